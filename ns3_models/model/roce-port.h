// One direction of a full-duplex link: the egress side of a NIC or switch port.
//
// Eight per-priority FIFOs; priority 0 is the control class (PFC frames, and acks when they
// ride high priority): strict priority, never paused. A PFC pause stops one priority of this
// port until the matching resume (as in the HPCC/SimAI forks, the pause time in the frame is
// not used: pauses last until XON), and the port counts how often and how long it was paused.
//
// Timing is kept exactly in picoseconds (double): a packet starts when the line is free and
// the packet is ready, and arrives at the peer `wire time + delay` later. Only the ns-3 events
// are rounded up to whole nanoseconds (ns-3's time resolution), so rounding never accumulates
// along a busy link. One event per packet per hop: its arrival at the peer; a "line free"
// event exists only while packets wait behind the one being sent.
#pragma once

#include "model/roce-packet.h"

#include "ns3/nstime.h"
#include "ns3/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace phantora
{
namespace roce
{

class Port;

/// What a NIC or a switch does with its ports.
class PortOwner
{
  public:
    virtual ~PortOwner() = default;
    /// A packet arrived on `port` (its last bit, at the current event time).
    virtual void Receive(Port& port, Packet* p) = 0;
    /// The next packet `port` should send now, or nullptr; a NIC may set `wakePs` to the
    /// instant a paced queue pair becomes ready (left untouched otherwise).
    virtual Packet* Next(Port& port, double nowPs, double& wakePs) = 0;
    /// Whether `port` may have a packet to send once its line is free (if not, whatever
    /// gives it one later kicks the port).
    virtual bool HasMore(const Port& port) const = 0;
};

/// Told when a port's pause state changes (the fabric's pause watchdog).
class PauseListener
{
  public:
    virtual ~PauseListener() = default;
    virtual void PauseChanged(const Port& port, bool paused) = 0;
};

inline double NowPs()
{
    return static_cast<double>(ns3::Simulator::Now().GetTimeStep()) * 1000.0;
}

/// Delay until `ps` (absolute), rounded up to whole ns, never negative.
inline ns3::Time DelayUntil(double ps)
{
    int64_t at = static_cast<int64_t>(std::ceil(ps / 1000.0 - 1e-9));
    int64_t now = ns3::Simulator::Now().GetTimeStep();
    return ns3::TimeStep(at > now ? at - now : 0);
}

class Port
{
  public:
    static constexpr int kPriorities = 8;

    Port(PortOwner* owner, uint32_t node, uint16_t local, double bitsPerSecond, double delayPs)
        : owner(owner),
          node(node),
          local(local),
          bitsPerSecond(bitsPerSecond),
          psPerByte(8e12 / bitsPerSecond),
          delayPs(delayPs)
    {
    }

    Port(const Port&) = delete;
    Port& operator=(const Port&) = delete;

    /// Queue a packet on its priority and start sending if the line is idle.
    void Enqueue(Packet* p)
    {
        PacketFifo& q = queue[p->prio];
        q.Push(p);
        if (p->prio != 0 && q.bytes > maxQueueBytes)
        {
            maxQueueBytes = q.bytes;
        }
        Kick(p->readyPs);
    }

    /// Something the owner may send became available at `atPs` (<= now; exact, where the
    /// event that tells it is rounded up to the ns). Send now if the line is idle, else make
    /// sure the line-free event exists. An idle line cannot have started before `atPs`.
    void Kick(double atPs)
    {
        if (m_txScheduled || m_inTx)
        {
            return;
        }
        double now = NowPs();
        if (m_freePs <= now)
        {
            m_freePs = std::max(m_freePs, std::min(atPs, now));
            Transmit(now);
        }
        else
        {
            ScheduleTx(m_freePs);
        }
    }

    /// When the line finishes sending what it has started (ps).
    double FreePs() const
    {
        return m_freePs;
    }

    bool IsPaused(uint8_t prio) const
    {
        return (m_pausedMask >> prio) & 1U;
    }

    bool AnyPaused() const
    {
        return m_pausedMask != 0;
    }

    /// A PFC frame for `prio` arrived from the peer at `now` (ps, exact).
    void SetPaused(uint8_t prio, bool paused, double now)
    {
        uint8_t bit = static_cast<uint8_t>(1U << prio);
        if (paused && !(m_pausedMask & bit))
        {
            m_pausedMask |= bit;
            m_pausedSincePs[prio] = now;
            ++pausesReceived;
            if (pauseListener)
            {
                pauseListener->PauseChanged(*this, true);
            }
        }
        else if (!paused && (m_pausedMask & bit))
        {
            m_pausedMask &= static_cast<uint8_t>(~bit);
            pausedPs += now - m_pausedSincePs[prio];
            if (pauseListener)
            {
                pauseListener->PauseChanged(*this, false);
            }
            Kick(now);
        }
    }

    /// Time paused so far, the pauses still in force counted up to now.
    double PausedPsUntil(double nowPs) const
    {
        double total = pausedPs;
        for (int prio = 0; prio < kPriorities; ++prio)
        {
            if (IsPaused(static_cast<uint8_t>(prio)))
            {
                total += nowPs - m_pausedSincePs[prio];
            }
        }
        return total;
    }

    /// Earliest start of a pause still in force, or -1 when none is.
    double PausedSincePs() const
    {
        double since = -1;
        for (int prio = 0; prio < kPriorities; ++prio)
        {
            bool earlier = since < 0 || m_pausedSincePs[prio] < since;
            if (IsPaused(static_cast<uint8_t>(prio)) && earlier)
            {
                since = m_pausedSincePs[prio];
            }
        }
        return since;
    }

    /// Strict priority 0, then round robin over the other priorities that are not paused.
    Packet* PopQueued()
    {
        if (!queue[0].Empty())
        {
            return queue[0].Pop();
        }
        for (int k = 0; k < kPriorities - 1; ++k)
        {
            int prio = 1 + (m_rr + k) % (kPriorities - 1);
            if (!queue[prio].Empty() && !IsPaused(static_cast<uint8_t>(prio)))
            {
                m_rr = prio % (kPriorities - 1);
                return queue[prio].Pop();
            }
        }
        return nullptr;
    }

    /// Whether data (priorities 1-7) waits in this port, paused or not.
    bool HasQueuedData() const
    {
        for (int prio = 1; prio < kPriorities; ++prio)
        {
            if (!queue[prio].Empty())
            {
                return true;
            }
        }
        return false;
    }

    /// Whether a queued packet could leave now (control, or a priority not paused).
    bool HasSendable() const
    {
        for (int prio = 0; prio < kPriorities; ++prio)
        {
            if (!queue[prio].Empty() && (prio == 0 || !IsPaused(static_cast<uint8_t>(prio))))
            {
                return true;
            }
        }
        return false;
    }

    PortOwner* owner;
    uint32_t node;  // fabric node index of the owner
    uint16_t local; // index of this port on its node
    double bitsPerSecond;
    double psPerByte;
    double delayPs;
    Port* peer{nullptr};
    PauseListener* pauseListener{nullptr};
    PacketFifo queue[kPriorities];

    // counters
    uint64_t txPackets{0};
    uint64_t pausesReceived{0}; // XOFF frames that paused this port
    uint64_t pausesSent{0};     // XOFF frames this port's node sent through it (switches)
    uint64_t ecnMarks{0};       // data packets CE-marked as they left through this port
    uint64_t maxQueueBytes{0};  // longest data queue (priorities 1-7) seen
    double pausedPs{0};         // completed pauses; see PausedPsUntil
    // A failed link: routing no longer picks it, but what was queued on it when it went down
    // still leaves (and arrives): the lossless drain model of a link failure.
    bool down{false};
    uint64_t txAtDown{0}; // txPackets when it went down

  private:
    void ScheduleTx(double atPs)
    {
        m_txScheduled = true;
        ns3::Simulator::Schedule(DelayUntil(atPs), &Port::OnLineFree, this);
    }

    void OnLineFree()
    {
        m_txScheduled = false;
        Transmit(NowPs());
    }

    void Transmit(double now)
    {
        m_inTx = true;
        double wakePs = -1;
        Packet* p = owner->Next(*this, now, wakePs);
        m_inTx = false;
        if (p == nullptr)
        {
            if (wakePs >= 0)
            {
                ScheduleTx(std::max(wakePs, m_freePs));
            }
            return;
        }
        double start = std::max(m_freePs, p->readyPs);
        m_freePs = start + p->wireBytes * psPerByte;
        double arrival = m_freePs + delayPs;
        p->readyPs = arrival;
        ++txPackets;
        ns3::Simulator::Schedule(DelayUntil(arrival), &Port::OnArrive, peer, p);
        if (owner->HasMore(*this))
        {
            ScheduleTx(m_freePs);
        }
    }

    void OnArrive(Packet* p)
    {
        owner->Receive(*this, p);
    }

    double m_freePs{0};
    bool m_txScheduled{false};
    bool m_inTx{false};
    uint8_t m_pausedMask{0};
    int m_rr{0};
    double m_pausedSincePs[kPriorities]{};
};

} // namespace roce
} // namespace phantora
