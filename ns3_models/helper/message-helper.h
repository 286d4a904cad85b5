// Wires persistent message connections between endpoints and feeds them messages.
//
// One MessageReceiver per destination node (created on first use), one MessageSender per
// connection. The sender's local port is unique per source node, so the receiver can tell
// connections apart by (source address, source port); the helper tells the receiver where
// each message ends in the byte stream and the sender when the message may start.
// Connections are opened lazily: the sender app starts (and sends its SYN) at the simulated
// time the connection is added, and stays open until the simulation is destroyed.
#pragma once

#include "model/message-log.h"
#include "model/message-receiver.h"
#include "model/message-sender.h"

#include "ns3/ipv4.h"
#include "ns3/node.h"
#include "ns3/nstime.h"
#include "ns3/uinteger.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace phantora
{

class MessageHelper
{
  public:
    /// @param receiverPort the port every MessageReceiver listens on.
    explicit MessageHelper(uint16_t receiverPort = 5000)
        : m_receiverPort(receiverPort),
          m_log(ns3::CreateObject<MessageLog>())
    {
    }

    /// Open a connection from `source` to `destination` (single-NIC endpoints) with a TCP send
    /// buffer of `sendBufferBytes` (0: the default); returns its index for Send(). Throws
    /// std::length_error when `source` has no free local port left.
    uint32_t AddConnection(ns3::Ptr<ns3::Node> source,
                           ns3::Ptr<ns3::Node> destination,
                           uint32_t sendBufferBytes)
    {
        using namespace ns3;
        uint16_t& nextPort = m_nextLocalPort.try_emplace(source->GetId(), kFirstLocalPort)
                                 .first->second;
        if (nextPort > kLastLocalPort)
        {
            throw std::length_error("node " + std::to_string(source->GetId()) + " already has " +
                                    std::to_string(kLastLocalPort - kFirstLocalPort + 1) +
                                    " connections, the most its local ports allow");
        }
        uint16_t localPort = nextPort++;
        Ptr<MessageSender> sender = CreateObject<MessageSender>();
        sender->SetAttribute("RemoteAddress", Ipv4AddressValue(AddressOf(destination)));
        sender->SetAttribute("RemotePort", UintegerValue(m_receiverPort));
        sender->SetAttribute("LocalPort", UintegerValue(localPort));
        sender->SetAttribute("SendBufferBytes", UintegerValue(sendBufferBytes));
        source->AddApplication(sender);

        m_connections.push_back(Connection{sender,
                                           ReceiverOn(destination),
                                           MessageReceiver::ConnectionKey(AddressOf(source),
                                                                          localPort)});
        return static_cast<uint32_t>(m_connections.size() - 1);
    }

    /// Queue message `id` of `bytes` (> 0) on `connection`, to start at `startNs` (absolute)
    /// or when the connection's previous message was released, whichever is later.
    void Send(uint32_t connection, uint64_t id, uint64_t bytes, int64_t startNs)
    {
        Connection& c = m_connections.at(connection);
        c.receiver->Expect(c.key, id, bytes);
        c.sender->Enqueue(bytes, ns3::NanoSeconds(startNs));
    }

    ns3::Ptr<MessageLog> GetLog() const
    {
        return m_log;
    }

    /// Segments retransmitted by all connections.
    uint64_t GetRetransmissions() const
    {
        uint64_t segments = 0;
        for (const auto& connection : m_connections)
        {
            segments += connection.sender->GetRetransmissions();
        }
        return segments;
    }

  private:
    static constexpr uint16_t kFirstLocalPort = 10000;
    static constexpr uint16_t kLastLocalPort = 49151; // ns-3 allocates ephemeral ports above

    struct Connection
    {
        ns3::Ptr<MessageSender> sender;
        ns3::Ptr<MessageReceiver> receiver;
        uint64_t key;
    };

    static ns3::Ipv4Address AddressOf(ns3::Ptr<ns3::Node> endpoint)
    {
        // Interface 0 is the loopback; an endpoint's only other interface is its NIC.
        return endpoint->GetObject<ns3::Ipv4>()->GetAddress(1, 0).GetLocal();
    }

    ns3::Ptr<MessageReceiver> ReceiverOn(ns3::Ptr<ns3::Node> destination)
    {
        using namespace ns3;
        auto found = m_receivers.find(destination->GetId());
        if (found != m_receivers.end())
        {
            return found->second;
        }
        Ptr<MessageReceiver> receiver = CreateObject<MessageReceiver>();
        receiver->SetAttribute("Port", UintegerValue(m_receiverPort));
        receiver->SetLog(m_log);
        destination->AddApplication(receiver);
        m_receivers.emplace(destination->GetId(), receiver);
        return receiver;
    }

    uint16_t m_receiverPort;
    ns3::Ptr<MessageLog> m_log;
    std::vector<Connection> m_connections;
    std::unordered_map<uint32_t, ns3::Ptr<MessageReceiver>> m_receivers;
    std::unordered_map<uint32_t, uint16_t> m_nextLocalPort;
};

} // namespace phantora
