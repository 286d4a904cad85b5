// Packets of the RoCE fabric: plain pooled structs, not ns3::Packet.
//
// The RoCE models never look at packet bytes, so a packet is its header fields plus its size
// on the wire. Packets come from a free list and move between queues by an intrusive link:
// forwarding a packet allocates nothing, which keeps the per-hop cost near the scheduler's own.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace phantora
{
namespace roce
{

enum class PacketKind : uint8_t
{
    Data,   // RDMA write payload of one queue pair
    Ack,    // per-packet acknowledgement; `cnp` set when it carries a congestion notification
    Pause,  // PFC XOFF for the priority in `seq` (the frame itself rides priority 0)
    Resume, // PFC XON for the priority in `seq`
};

struct Packet
{
    Packet* next;          // FIFO or free-list link
    double readyPs;        // exact instant (ps) the packet could first leave its current node
    uint64_t seq;          // data: queue-pair byte offset after it; ack: bytes acked; PFC: priority
    uint64_t flowHash;     // ECMP key of the packet's queue pair and direction
    uint32_t wireBytes;    // bytes on the link, framing included
    uint32_t payloadBytes; // data only
    uint32_t qp;           // queue-pair id (data and acks)
    uint32_t dst;          // fabric node the packet is addressed to
    uint16_t ingress;      // switch port it entered by (switch-local index)
    PacketKind kind;
    uint8_t prio;
    bool ce;  // ECN congestion experienced
    bool cnp; // ack carries a CNP
};

/// Free list of packets; memory is kept for the life of the fabric.
class PacketPool
{
  public:
    Packet* Get()
    {
        if (m_free == nullptr)
        {
            Grow();
        }
        Packet* p = m_free;
        m_free = p->next;
        *p = Packet{};
        ++m_inUse;
        return p;
    }

    void Put(Packet* p)
    {
        p->next = m_free;
        m_free = p;
        --m_inUse;
    }

    uint64_t InUse() const
    {
        return m_inUse;
    }

  private:
    static constexpr std::size_t kChunk = 4096;

    void Grow()
    {
        m_chunks.push_back(std::make_unique<Packet[]>(kChunk));
        Packet* chunk = m_chunks.back().get();
        for (std::size_t i = 0; i < kChunk; ++i)
        {
            chunk[i].next = m_free;
            m_free = &chunk[i];
        }
    }

    std::vector<std::unique_ptr<Packet[]>> m_chunks;
    Packet* m_free{nullptr};
    uint64_t m_inUse{0};
};

/// FIFO of packets linked through Packet::next, with its byte count.
struct PacketFifo
{
    Packet* head{nullptr};
    Packet* tail{nullptr};
    uint64_t bytes{0};

    bool Empty() const
    {
        return head == nullptr;
    }

    void Push(Packet* p)
    {
        p->next = nullptr;
        if (tail)
        {
            tail->next = p;
        }
        else
        {
            head = p;
        }
        tail = p;
        bytes += p->wireBytes;
    }

    Packet* Pop()
    {
        Packet* p = head;
        head = p->next;
        if (head == nullptr)
        {
            tail = nullptr;
        }
        bytes -= p->wireBytes;
        return p;
    }
};

} // namespace roce
} // namespace phantora
