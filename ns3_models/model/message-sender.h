// Sending side of one persistent connection (one per source GPU, destination GPU and tag).
//
// NCCL keeps its connections open for the life of a communicator, so a message does not pay
// a handshake or a fresh slow start. This app models that: it opens one TCP connection when
// it starts and keeps it open; messages are appended with a start time and written into the
// socket back to back, in the order they were appended (a message is released at its start
// time or when the previous one was released, whichever is later, like an NCCL channel's FIFO).
#pragma once

#include "ns3/application.h"
#include "ns3/inet-socket-address.h"
#include "ns3/ipv4-address.h"
#include "ns3/packet.h"
#include "ns3/simulator.h"
#include "ns3/socket.h"
#include "ns3/tcp-header.h"
#include "ns3/tcp-socket-base.h"
#include "ns3/tcp-socket-factory.h"
#include "ns3/uinteger.h"

#include <algorithm>
#include <cstdint>
#include <deque>

namespace phantora
{

class MessageSender : public ns3::Application
{
  public:
    static ns3::TypeId GetTypeId()
    {
        using namespace ns3;
        static TypeId tid =
            TypeId("phantora::MessageSender")
                .SetParent<Application>()
                .SetGroupName("Phantora")
                .AddConstructor<MessageSender>()
                .AddAttribute("RemoteAddress",
                              "IPv4 address of the receiving endpoint.",
                              Ipv4AddressValue(),
                              MakeIpv4AddressAccessor(&MessageSender::m_remoteAddress),
                              MakeIpv4AddressChecker())
                .AddAttribute("RemotePort",
                              "Port the receiving endpoint's MessageReceiver listens on.",
                              UintegerValue(5000),
                              MakeUintegerAccessor(&MessageSender::m_remotePort),
                              MakeUintegerChecker<uint16_t>(1))
                .AddAttribute("LocalPort",
                              "Local port of this connection; the receiver identifies the "
                              "connection by (source address, LocalPort), so it must be unique "
                              "per source node and below the ephemeral range (49152).",
                              UintegerValue(10000),
                              MakeUintegerAccessor(&MessageSender::m_localPort),
                              MakeUintegerChecker<uint16_t>(1, 49151))
                .AddAttribute("SendBufferBytes",
                              "TCP send buffer of this connection (it bounds the data in "
                              "flight); 0 keeps the TcpSocket::SndBufSize default.",
                              UintegerValue(0),
                              MakeUintegerAccessor(&MessageSender::m_sendBufferBytes),
                              MakeUintegerChecker<uint32_t>());
        return tid;
    }

    /// Append a message of `bytes` (> 0) that may start at absolute time `start`.
    void Enqueue(uint64_t bytes, ns3::Time start)
    {
        m_pending.push_back(PendingMessage{bytes, start});
        if (!m_releaseEvent.IsPending())
        {
            ScheduleRelease();
        }
    }

    /// Segments TCP sent again (after a timeout or a fast retransmit) on this connection.
    uint64_t GetRetransmissions() const
    {
        return m_retransmissions;
    }

  protected:
    void DoDispose() override
    {
        m_releaseEvent.Cancel();
        m_socket = nullptr;
        ns3::Application::DoDispose();
    }

  private:
    struct PendingMessage
    {
        uint64_t bytes;
        ns3::Time start;
    };

    void StartApplication() override
    {
        using namespace ns3;
        m_socket = Socket::CreateSocket(GetNode(), TcpSocketFactory::GetTypeId());
        if (m_sendBufferBytes > 0)
        {
            m_socket->SetAttribute("SndBufSize", UintegerValue(m_sendBufferBytes));
        }
        m_socket->Bind(InetSocketAddress(Ipv4Address::GetAny(), m_localPort));
        m_socket->ShutdownRecv();
        // A failed connect is not reported: in a routed fabric TCP retries its SYN until it
        // gets through, and messages that can never complete show up as a simulation that
        // runs out of events (the Python backend raises then).
        m_socket->SetConnectCallback(MakeCallback(&MessageSender::HandleConnected, this),
                                     MakeNullCallback<void, Ptr<Socket>>());
        m_socket->SetSendCallback(MakeCallback(&MessageSender::HandleTxSpace, this));
        m_socket->TraceConnectWithoutContext(
            "Retransmission", MakeCallback(&MessageSender::CountRetransmission, this));
        UintegerValue segmentSize;
        m_socket->GetAttribute("SegmentSize", segmentSize);
        m_segmentSize = segmentSize.Get();
        UintegerValue sendBuffer;
        m_socket->GetAttribute("SndBufSize", sendBuffer);
        m_wakeBytes = sendBuffer.Get() / 3;
        m_socket->Connect(InetSocketAddress(m_remoteAddress, m_remotePort));
    }

    void StopApplication() override
    {
        m_releaseEvent.Cancel();
        if (m_socket)
        {
            m_socket->Close();
        }
    }

    void ScheduleRelease()
    {
        ns3::Time delay = std::max(m_pending.front().start - ns3::Simulator::Now(), ns3::Time(0));
        m_releaseEvent = ns3::Simulator::Schedule(delay, &MessageSender::Release, this);
    }

    /// Move every message whose start time has come into the write budget.
    void Release()
    {
        ns3::Time now = ns3::Simulator::Now();
        while (!m_pending.empty() && m_pending.front().start <= now)
        {
            m_unwrittenBytes += m_pending.front().bytes;
            m_pending.pop_front();
        }
        if (!m_pending.empty())
        {
            ScheduleRelease();
        }
        Write();
    }

    /// Write as much released data as the socket buffer takes. Only whole segments are
    /// written while more data follows, so TCP never sends a runt segment mid-stream.
    void Write()
    {
        if (!m_connected)
        {
            return;
        }
        while (m_unwrittenBytes > 0)
        {
            uint64_t room = m_socket->GetTxAvailable();
            uint64_t chunk = std::min(m_unwrittenBytes, room);
            if (chunk < m_unwrittenBytes)
            {
                chunk -= chunk % m_segmentSize;
            }
            if (chunk == 0)
            {
                return; // HandleTxSpace resumes once ACKs free buffer space
            }
            int sent = m_socket->Send(ns3::Create<ns3::Packet>(static_cast<uint32_t>(chunk)));
            if (sent <= 0)
            {
                return;
            }
            m_unwrittenBytes -= static_cast<uint64_t>(sent);
        }
    }

    void HandleConnected(ns3::Ptr<ns3::Socket>)
    {
        m_connected = true;
        Write();
    }

    /// Like Linux (sk_stream_write_space), wake the writer only once a third of the send
    /// buffer is free, or when what is left to write fits: one Send per batch of ACKs, not
    /// per ACK (each Send costs TCP an event).
    void HandleTxSpace(ns3::Ptr<ns3::Socket>, uint32_t available)
    {
        if (available >= m_wakeBytes || available >= m_unwrittenBytes)
        {
            Write();
        }
    }

    void CountRetransmission(ns3::Ptr<const ns3::Packet>,
                             const ns3::TcpHeader&,
                             const ns3::Address&,
                             const ns3::Address&,
                             ns3::Ptr<const ns3::TcpSocketBase>)
    {
        ++m_retransmissions;
    }

    ns3::Ipv4Address m_remoteAddress;
    uint16_t m_remotePort{5000};
    uint16_t m_localPort{10000};
    uint32_t m_sendBufferBytes{0};
    ns3::Ptr<ns3::Socket> m_socket;
    uint32_t m_segmentSize{1};
    uint32_t m_wakeBytes{1};
    bool m_connected{false};
    std::deque<PendingMessage> m_pending;
    uint64_t m_unwrittenBytes{0};
    ns3::EventId m_releaseEvent;
    uint64_t m_retransmissions{0};
};

} // namespace phantora
