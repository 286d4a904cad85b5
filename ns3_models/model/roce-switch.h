// A lossless Ethernet switch: per-flow ECMP, a shared-buffer MMU with PFC, ECN at egress.
//
// MMU (the HPCC/SimAI forks' SwitchMmu, sized per switch rather than as a fixed 1025-port
// array): each (ingress port, priority) has `reserve` guaranteed bytes; above that it uses
// the shared pool while its shared use stays within the dynamic threshold
//   T(port) = alpha(port) x (buffer - sum(headroom) - sum(reserve) - shared in use),
// and headroom beyond it. XOFF when the queue is in headroom or at T; XON once headroom is
// empty and shared use is back to 0 or `resumeOffset` below T. A packet that finds headroom
// full and shared use over T is dropped; with PFC on that means the headroom is too small,
// which fails the run. Without PFC the same threshold drops packets (and, since the NICs do
// not retransmit, also fails the run). Priority 0 (control) is neither counted nor paused.
// ECN: at dequeue, data packets leaving a queue longer than Kmax are CE-marked, between Kmin
// and Kmax with probability Pmax (q - Kmin) / (Kmax - Kmin) (thresholds scaled by port rate /
// NIC rate, as the forks' per-bandwidth tables do).
#pragma once

#include "model/roce-context.h"
#include "model/roce-port.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace phantora
{
namespace roce
{

class Switch : public PortOwner
{
  public:
    Switch(RoceContext& context, uint32_t node)
        : m_ctx(context),
          m_node(node),
          m_salt(Mix64(context.params.seed * 0x100000001B3ULL + node)),
          m_rng(Mix64(context.params.seed ^ (0xD1B54A32D192ED03ULL * (node + 1))))
    {
    }

    void AddPort(Port* port)
    {
        m_ports.push_back(port);
    }

    const std::vector<Port*>& Ports() const
    {
        return m_ports;
    }

    /// Local ports towards each fabric node (indexed by node; empty: unreachable).
    std::vector<std::vector<uint16_t>>& Routes()
    {
        return m_routes;
    }

    /// Headroom a port needs so that no packet is lost after its XOFF: the frame that crossed
    /// the threshold, the link's round trip of bytes, one full frame the switch may be sending
    /// when it queues the PFC frame, one the neighbour may have started, the PFC frame, and
    /// 2 ns of event rounding.
    uint64_t AutoHeadroom(const Port& port) const
    {
        const RoceParams& params = m_ctx.params;
        double bytesPerPs = port.bitsPerSecond / 8e12;
        double frame = params.payloadBytes + params.dataOverheadBytes;
        return static_cast<uint64_t>(2 * port.delayPs * bytesPerPs + 3 * frame +
                                     params.pfcFrameBytes + 2000 * bytesPerPs) + 1;
    }

    /// Size the MMU once every port is added. Returns "" or why the buffer cannot work.
    std::string Init()
    {
        const RoceParams& params = m_ctx.params;
        std::size_t n = m_ports.size();
        m_ingress.assign(n, {});
        m_headroomUsed.assign(n, {});
        m_egress.assign(n, {});
        m_pauseSent.assign(n, {});
        m_headroom.assign(n, 0);
        m_alpha.assign(n, 0);
        m_kmin.assign(n, 0);
        m_kmax.assign(n, 0);
        m_reserved = 0;
        m_headroomTotal = 0;
        for (std::size_t i = 0; i < n; ++i)
        {
            double scale = m_ports[i]->bitsPerSecond / params.nicBitsPerSecond;
            m_headroom[i] = !params.pfc             ? 0
                            : params.headroomBytes ? params.headroomBytes
                                                   : AutoHeadroom(*m_ports[i]);
            m_alpha[i] = params.pfcAlpha * scale;
            m_kmin[i] = static_cast<uint64_t>(params.kminBytes * scale);
            m_kmax[i] = static_cast<uint64_t>(params.kmaxBytes * scale);
            m_headroomTotal += m_headroom[i];
            m_reserved += params.reserveBytes;
        }
        if (params.bufferBytes <= m_headroomTotal + m_reserved)
        {
            return "switch " + m_ctx.nodeNames[m_node] + " has " + std::to_string(n) +
                   " ports whose headroom (" + std::to_string(m_headroomTotal) +
                   " bytes) and reserve (" + std::to_string(m_reserved) +
                   " bytes) take the whole buffer (" + std::to_string(params.bufferBytes) +
                   " bytes), leaving nothing shared";
        }
        return "";
    }

    void Receive(Port& port, Packet* p) override
    {
        if (p->kind == PacketKind::Pause || p->kind == PacketKind::Resume)
        {
            port.SetPaused(static_cast<uint8_t>(p->seq), p->kind == PacketKind::Pause, p->readyPs);
            m_ctx.pool.Put(p);
            return;
        }
        const std::vector<uint16_t>& routes = m_routes[p->dst];
        if (routes.empty())
        {
            m_ctx.Fail("switch " + m_ctx.nodeNames[m_node] + " has no route to " +
                       m_ctx.nodeNames[p->dst]);
            m_ctx.pool.Put(p);
            return;
        }
        uint16_t out = routes.size() == 1 ? routes[0]
                                          : routes[Mix64(p->flowHash ^ m_salt) % routes.size()];
        uint16_t in = port.local;
        uint8_t q = p->prio;
        if (q != 0)
        {
            uint32_t size = p->wireBytes;
            if (!Admit(in, q, size))
            {
                Drop(in, out, p);
                return;
            }
            AddIngress(in, q, size);
            maxSharedBytes = std::max(maxSharedBytes, m_shared);
            if (m_ctx.params.pfc && !m_pauseSent[in][q] &&
                (m_headroomUsed[in][q] > 0 || SharedUsed(in, q) >= Threshold(in)))
            {
                m_pauseSent[in][q] = true;
                ++m_ports[in]->pausesSent;
                SendPfc(in, q, PacketKind::Pause);
            }
            m_egress[out][q] += size;
        }
        p->ingress = in;
        m_ports[out]->Enqueue(p);
    }

    Packet* Next(Port& port, double, double&) override
    {
        Packet* p = port.PopQueued();
        if (p == nullptr || p->prio == 0)
        {
            return p;
        }
        uint8_t q = p->prio;
        uint16_t in = p->ingress;
        uint16_t out = port.local;
        RemoveIngress(in, q, p->wireBytes);
        m_egress[out][q] -= p->wireBytes;
        const RoceParams& params = m_ctx.params;
        if (params.ecn && p->kind == PacketKind::Data && ShouldMark(out, q))
        {
            p->ce = true;
            ++port.ecnMarks;
        }
        if (params.pfc && m_pauseSent[in][q] && m_headroomUsed[in][q] == 0)
        {
            uint64_t shared = SharedUsed(in, q);
            if (shared == 0 || shared + params.resumeOffsetBytes <= Threshold(in))
            {
                m_pauseSent[in][q] = false;
                SendPfc(in, q, PacketKind::Resume);
            }
        }
        return p;
    }

    bool HasMore(const Port& port) const override
    {
        return port.HasSendable();
    }

    uint64_t maxSharedBytes{0};

  private:
    uint64_t SharedUsed(uint16_t in, uint8_t q) const
    {
        uint64_t bytes = m_ingress[in][q];
        return bytes > m_ctx.params.reserveBytes ? bytes - m_ctx.params.reserveBytes : 0;
    }

    uint64_t Threshold(uint16_t in) const
    {
        uint64_t used = m_headroomTotal + m_reserved + m_shared;
        uint64_t free = m_ctx.params.bufferBytes > used ? m_ctx.params.bufferBytes - used : 0;
        return static_cast<uint64_t>(m_alpha[in] * static_cast<double>(free));
    }

    bool Admit(uint16_t in, uint8_t q, uint32_t size) const
    {
        bool sharedFull = size + SharedUsed(in, q) > Threshold(in);
        if (!m_ctx.params.pfc)
        {
            return m_ingress[in][q] + size <= m_ctx.params.reserveBytes || !sharedFull;
        }
        return size + m_headroomUsed[in][q] <= m_headroom[in] || !sharedFull;
    }

    void AddIngress(uint16_t in, uint8_t q, uint32_t size)
    {
        uint64_t reserve = m_ctx.params.reserveBytes;
        uint64_t next = m_ingress[in][q] + size;
        if (next <= reserve)
        {
            m_ingress[in][q] = next;
        }
        else if (next - reserve > Threshold(in))
        {
            m_headroomUsed[in][q] += size;
        }
        else
        {
            m_ingress[in][q] = next;
            m_shared += std::min<uint64_t>(size, next - reserve);
        }
    }

    void RemoveIngress(uint16_t in, uint8_t q, uint32_t size)
    {
        uint64_t fromHeadroom = std::min<uint64_t>(m_headroomUsed[in][q], size);
        uint64_t fromShared = std::min<uint64_t>(size - fromHeadroom, SharedUsed(in, q));
        m_headroomUsed[in][q] -= fromHeadroom;
        m_ingress[in][q] -= size - fromHeadroom;
        m_shared -= fromShared;
    }

    bool ShouldMark(uint16_t out, uint8_t q)
    {
        uint64_t bytes = m_egress[out][q];
        if (bytes > m_kmax[out])
        {
            return true;
        }
        if (bytes <= m_kmin[out])
        {
            return false;
        }
        double p = m_ctx.params.pmax * static_cast<double>(bytes - m_kmin[out]) /
                   static_cast<double>(m_kmax[out] - m_kmin[out]);
        return Uniform() < p;
    }

    /// xorshift64*: the switch's own deterministic stream, seeded by the fabric seed.
    double Uniform()
    {
        m_rng ^= m_rng >> 12;
        m_rng ^= m_rng << 25;
        m_rng ^= m_rng >> 27;
        return static_cast<double>((m_rng * 0x2545F4914F6CDD1DULL) >> 11) * 0x1.0p-53;
    }

    void SendPfc(uint16_t port, uint8_t q, PacketKind kind)
    {
        Packet* p = m_ctx.pool.Get();
        p->kind = kind;
        p->prio = 0; // the frame itself rides the control class
        p->wireBytes = m_ctx.params.pfcFrameBytes;
        p->readyPs = NowPs();
        p->seq = q; // the priority it pauses or resumes
        p->dst = m_ports[port]->peer->node;
        m_ports[port]->Enqueue(p);
    }

    void Drop(uint16_t in, uint16_t out, Packet* p)
    {
        ++m_ctx.drops;
        const std::vector<std::string>& names = m_ctx.nodeNames;
        std::string where = "switch " + names[m_node] + " dropped a packet from " +
                            names[m_ports[in]->peer->node] + " to " +
                            names[m_ports[out]->peer->node] + " at " +
                            std::to_string(NowPs() / 1e6) + " us";
        if (m_ctx.params.pfc)
        {
            m_ctx.Fail(where + ": the ingress headroom (" + std::to_string(m_headroom[in]) +
                       " bytes) was full; a PFC fabric must be lossless, so raise "
                       "cluster.network.roce.headroom (or leave it out for the computed value)");
        }
        else
        {
            m_ctx.Fail(where + ": the shared buffer was over its threshold and PFC is off; the "
                       "NICs do not retransmit (go-back-N is not modelled), so turn "
                       "cluster.network.roce.pfc on or raise cluster.network.roce.buffer");
        }
        m_ctx.pool.Put(p);
    }

    RoceContext& m_ctx;
    uint32_t m_node;
    uint64_t m_salt;
    uint64_t m_rng;
    std::vector<Port*> m_ports;
    std::vector<std::vector<uint16_t>> m_routes;
    std::vector<std::array<uint64_t, Port::kPriorities>> m_ingress;
    std::vector<std::array<uint64_t, Port::kPriorities>> m_headroomUsed;
    std::vector<std::array<uint64_t, Port::kPriorities>> m_egress;
    std::vector<std::array<bool, Port::kPriorities>> m_pauseSent;
    std::vector<uint64_t> m_headroom;
    std::vector<double> m_alpha;
    std::vector<uint64_t> m_kmin;
    std::vector<uint64_t> m_kmax;
    uint64_t m_headroomTotal{0};
    uint64_t m_reserved{0};
    uint64_t m_shared{0};
};

} // namespace roce
} // namespace phantora
