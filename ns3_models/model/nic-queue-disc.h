// Egress queue of a GPU's NIC: control packets (pure ACKs, SYNs) go out before bulk data.
//
// A host NIC holds whatever TCP's windows let out. With one FIFO, the ACKs a GPU returns for
// an incoming connection wait behind its own outgoing window (hundreds of KB at 400 Gbps),
// inflating every RTT of the reverse direction and throttling it. Real stacks avoid that:
// RDMA NICs generate ACKs in hardware, Linux's fq schedules the ACK flow apart from bulk
// flows. This queue disc models it with two FIFOs, small packets first. It never drops: a
// host never loses its own packets.
#pragma once

#include "ns3/drop-tail-queue.h"
#include "ns3/queue-disc.h"
#include "ns3/queue-size.h"
#include "ns3/uinteger.h"

#include <cstdint>
#include <limits>

namespace phantora
{

class NicQueueDisc : public ns3::QueueDisc
{
  public:
    static ns3::TypeId GetTypeId()
    {
        using namespace ns3;
        static TypeId tid =
            TypeId("phantora::NicQueueDisc")
                .SetParent<QueueDisc>()
                .SetGroupName("Phantora")
                .AddConstructor<NicQueueDisc>()
                .AddAttribute("ControlMaxBytes",
                              "Packets of at most this many bytes (IP header included) are "
                              "control packets and leave before any data packet. The default "
                              "covers a TCP ACK with timestamps and three SACK blocks.",
                              UintegerValue(96),
                              MakeUintegerAccessor(&NicQueueDisc::m_controlMaxBytes),
                              MakeUintegerChecker<uint32_t>(40));
        return tid;
    }

    NicQueueDisc()
        : ns3::QueueDisc(ns3::QueueDiscSizePolicy::MULTIPLE_QUEUES)
    {
    }

    /// Data (non-control) packets this NIC has sent, retransmissions included.
    uint64_t GetDataPackets() const
    {
        return m_dataPackets;
    }

  private:
    static constexpr std::size_t kControl = 0;
    static constexpr std::size_t kData = 1;

    bool DoEnqueue(ns3::Ptr<ns3::QueueDiscItem> item) override
    {
        if (item->GetSize() <= m_controlMaxBytes)
        {
            return GetInternalQueue(kControl)->Enqueue(item);
        }
        ++m_dataPackets;
        return GetInternalQueue(kData)->Enqueue(item);
    }

    ns3::Ptr<ns3::QueueDiscItem> DoDequeue() override
    {
        ns3::Ptr<ns3::QueueDiscItem> item = GetInternalQueue(kControl)->Dequeue();
        return item ? item : GetInternalQueue(kData)->Dequeue();
    }

    bool CheckConfig() override
    {
        using namespace ns3;
        if (GetNQueueDiscClasses() > 0 || GetNPacketFilters() > 0)
        {
            return false;
        }
        if (GetNInternalQueues() == 0)
        {
            QueueSize unbounded(QueueSizeUnit::PACKETS, std::numeric_limits<uint32_t>::max());
            for (int band = 0; band < 2; ++band)
            {
                AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
                    "MaxSize", QueueSizeValue(unbounded)));
            }
        }
        return GetNInternalQueues() == 2;
    }

    void InitializeParams() override
    {
    }

    uint32_t m_controlMaxBytes{96};
    uint64_t m_dataPackets{0};
};

} // namespace phantora
