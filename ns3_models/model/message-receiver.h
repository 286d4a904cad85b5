// Receiving side for every connection into one endpoint (one app per destination GPU).
//
// A TCP stream has no message boundaries, so the receiver is told where they are: for each
// connection, identified by the sender's (IPv4 address, local port), it keeps the expected
// messages as cumulative byte offsets. Arriving bytes are only counted; each time the count
// passes a message's end offset, that message's id is recorded in the MessageLog with the
// current time.
#pragma once

#include "model/message-log.h"

#include "ns3/application.h"
#include "ns3/inet-socket-address.h"
#include "ns3/ipv4-address.h"
#include "ns3/packet.h"
#include "ns3/socket.h"
#include "ns3/tcp-socket-factory.h"
#include "ns3/uinteger.h"

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

namespace phantora
{

class MessageReceiver : public ns3::Application
{
  public:
    static ns3::TypeId GetTypeId()
    {
        using namespace ns3;
        static TypeId tid = TypeId("phantora::MessageReceiver")
                                .SetParent<Application>()
                                .SetGroupName("Phantora")
                                .AddConstructor<MessageReceiver>()
                                .AddAttribute("Port",
                                              "TCP port to listen on for incoming connections.",
                                              UintegerValue(5000),
                                              MakeUintegerAccessor(&MessageReceiver::m_port),
                                              MakeUintegerChecker<uint16_t>(1));
        return tid;
    }

    /// The key a connection is known by: the sender's address and local port.
    static uint64_t ConnectionKey(ns3::Ipv4Address source, uint16_t sourcePort)
    {
        return (static_cast<uint64_t>(source.Get()) << 16) | sourcePort;
    }

    void SetLog(ns3::Ptr<MessageLog> log)
    {
        m_log = log;
    }

    /// Expect a message of `bytes` with id `id` next on connection `key`.
    void Expect(uint64_t key, uint64_t id, uint64_t bytes)
    {
        Connection& connection = m_connections[key];
        connection.expectedBytes += bytes;
        connection.pending.push_back(ExpectedMessage{id, connection.expectedBytes});
    }

  protected:
    void DoDispose() override
    {
        m_listener = nullptr;
        m_accepted.clear();
        m_log = nullptr;
        ns3::Application::DoDispose();
    }

  private:
    struct ExpectedMessage
    {
        uint64_t id;
        uint64_t endOffset; // cumulative bytes on the connection when this message is complete
    };

    struct Connection
    {
        uint64_t receivedBytes{0};
        uint64_t expectedBytes{0};
        std::deque<ExpectedMessage> pending;
    };

    void StartApplication() override
    {
        using namespace ns3;
        m_listener = Socket::CreateSocket(GetNode(), TcpSocketFactory::GetTypeId());
        m_listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), m_port));
        m_listener->Listen();
        // As PacketSink does: this side never sends data. Without it ns-3.44 TCP can crash
        // in TcpTxBuffer when a peer's socket lingers in CLOSE_WAIT.
        m_listener->ShutdownSend();
        m_listener->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                      MakeCallback(&MessageReceiver::HandleAccept, this));
    }

    void StopApplication() override
    {
        for (auto& socket : m_accepted)
        {
            socket->Close();
        }
        if (m_listener)
        {
            m_listener->Close();
        }
    }

    void HandleAccept(ns3::Ptr<ns3::Socket> socket, const ns3::Address& from)
    {
        using namespace ns3;
        InetSocketAddress peer = InetSocketAddress::ConvertFrom(from);
        // unordered_map never moves its elements, so the bound pointer stays valid.
        Connection* connection = &m_connections[ConnectionKey(peer.GetIpv4(), peer.GetPort())];
        socket->SetRecvCallback(MakeCallback(&MessageReceiver::HandleRead, this, connection));
        m_accepted.push_back(socket);
    }

    void HandleRead(Connection* connection, ns3::Ptr<ns3::Socket> socket)
    {
        ns3::Ptr<ns3::Packet> packet;
        while ((packet = socket->Recv()) && packet->GetSize() > 0)
        {
            connection->receivedBytes += packet->GetSize();
        }
        while (!connection->pending.empty() &&
               connection->receivedBytes >= connection->pending.front().endOffset)
        {
            m_log->Record(connection->pending.front().id);
            connection->pending.pop_front();
        }
    }

    uint16_t m_port{5000};
    ns3::Ptr<ns3::Socket> m_listener;
    std::vector<ns3::Ptr<ns3::Socket>> m_accepted;
    std::unordered_map<uint64_t, Connection> m_connections;
    ns3::Ptr<MessageLog> m_log;
};

} // namespace phantora
