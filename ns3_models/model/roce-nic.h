// An RDMA NIC: rate-paced queue pairs, per-packet acks, and DCQCN's two ends.
//
// Sender: queue pairs start at line rate and are paced (`next packet no earlier than start +
// wire bytes / rate`); the NIC's port pulls the next packet when its line is free: control
// first, then acks riding the data priority, then round robin over ready queue pairs (not
// paused, within their window, paced). Queue pairs are kept by a stable id, never by position.
//
// Receiver (notification point): every data packet is acked; the ack carries a CNP when the
// packet was CE-marked (at most one per `cnpIntervalPs` per queue pair when that is > 0).
// Packets are placed by offset, as NICs that support adaptive routing do: one that overtook
// an earlier packet of its queue pair (its path changed when a link failed) waits past the
// gap, acks stay cumulative, and a message completes once every one of its bytes arrived.
// Nothing is retransmitted (no go-back-N): the fabric never loses a packet.
//
// Reaction point (DCQCN as in the HPCC/SimAI forks' "Mellanox" variant): the first CNP sets
// alpha = 1 and rate *= rateOnFirstCnp; alpha <- (1-g) alpha + g [CNP seen] every alpha
// interval; every decrease interval with a CNP since the last one: target = rate (if clamping
// or increases have begun), rate = max(min, rate (1 - alpha/2)), restart the increase timer;
// each increase-timer tick: fast recovery (stage < F) rate = (rate + target)/2, additive
// (stage = F) target += AI, hyper (stage > F) target += HAI, then the same averaging.
// Timers are lazy where the forks tick eagerly: alpha is brought up to date in closed form
// when read, the decrease check is an event only while a CNP waits for it, and the increase
// timer stops once rate and target are back at line rate (later ticks would change nothing).
#pragma once

#include "model/roce-context.h"
#include "model/roce-port.h"

#include "ns3/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace phantora
{
namespace roce
{

class Nic : public PortOwner
{
  public:
    static constexpr double kReadySlackPs = 0.01; // ready-time comparisons at ns event times

    Nic(RoceContext& context, uint32_t node)
        : m_ctx(context),
          m_node(node)
    {
    }

    void SetPort(Port* port)
    {
        m_port = port;
    }

    Port* GetPort() const
    {
        return m_port;
    }

    /// Message `id` of `bytes` on queue pair `qpId` (whose sender is this NIC), to start at
    /// `startNs` or after the queue pair's previous message, whichever is later.
    void Send(uint32_t qpId, uint64_t bytes, int64_t startNs)
    {
        QueuePair& qp = m_ctx.qps[qpId];
        qp.waiting.push_back(QueuePair::Waiting{bytes, startNs});
        if (!qp.releasePending)
        {
            ScheduleRelease(qpId);
        }
    }

    void Receive(Port& port, Packet* p) override
    {
        switch (p->kind)
        {
        case PacketKind::Pause:
        case PacketKind::Resume:
            port.SetPaused(static_cast<uint8_t>(p->seq), p->kind == PacketKind::Pause, p->readyPs);
            m_ctx.pool.Put(p);
            return;
        case PacketKind::Data:
            ReceiveData(p);
            return;
        case PacketKind::Ack:
            ReceiveAck(p);
            return;
        }
    }

    Packet* Next(Port& port, double nowPs, double& wakePs) override
    {
        if (!port.queue[0].Empty())
        {
            return port.queue[0].Pop();
        }
        uint8_t prio = m_ctx.params.dataPriority;
        if (port.IsPaused(prio))
        {
            return nullptr; // the resume kicks the port
        }
        if (!port.queue[prio].Empty())
        {
            return port.queue[prio].Pop(); // acks riding the data priority
        }
        return NextData(port, nowPs, wakePs);
    }

    bool HasMore(const Port& port) const override
    {
        return !m_active.empty() || port.HasSendable();
    }

  private:
    void ScheduleRelease(uint32_t qpId)
    {
        QueuePair& qp = m_ctx.qps[qpId];
        qp.releasePending = true;
        int64_t now = ns3::Simulator::Now().GetTimeStep();
        int64_t start = std::max(qp.waiting.front().startNs, now);
        ns3::Simulator::Schedule(ns3::TimeStep(start - now), &Nic::Release, this, qpId);
    }

    void Release(uint32_t qpId)
    {
        QueuePair& qp = m_ctx.qps[qpId];
        qp.releasePending = false;
        int64_t now = ns3::Simulator::Now().GetTimeStep();
        while (!qp.waiting.empty() && qp.waiting.front().startNs <= now)
        {
            qp.released += qp.waiting.front().bytes;
            qp.waiting.pop_front();
        }
        if (!qp.waiting.empty())
        {
            ScheduleRelease(qpId);
        }
        qp.nextAvailPs = std::max(qp.nextAvailPs, NowPs());
        if (!qp.active)
        {
            qp.active = true;
            m_active.push_back(qpId);
        }
        m_port->Kick(NowPs());
    }

    double WindowBytes(const QueuePair& qp) const
    {
        double window = static_cast<double>(qp.windowBytes);
        return window * qp.rateBps / m_ctx.params.nicBitsPerSecond; // var-win as in the forks
    }

    Packet* NextData(Port& port, double nowPs, double& wakePs)
    {
        // Queue pairs with nothing left leave the rotation (order kept: round robin stays fair).
        auto finished = [this](uint32_t qpId) {
            QueuePair& qp = m_ctx.qps[qpId];
            qp.active = qp.sent < qp.released;
            return !qp.active;
        };
        m_active.erase(std::remove_if(m_active.begin(), m_active.end(), finished), m_active.end());
        std::size_t n = m_active.size();
        for (std::size_t k = 0; k < n; ++k)
        {
            std::size_t index = (m_rr + k) % n;
            uint32_t qpId = m_active[index];
            QueuePair& qp = m_ctx.qps[qpId];
            if (qp.windowBytes > 0 && static_cast<double>(qp.sent - qp.acked) >= WindowBytes(qp))
            {
                continue; // an ack reopens it
            }
            if (qp.nextAvailPs > nowPs + kReadySlackPs)
            {
                wakePs = wakePs < 0 ? qp.nextAvailPs : std::min(wakePs, qp.nextAvailPs);
                continue;
            }
            m_rr = index + 1;
            return MakeData(port, qpId, qp);
        }
        return nullptr;
    }

    Packet* MakeData(Port& port, uint32_t qpId, QueuePair& qp)
    {
        const RoceParams& params = m_ctx.params;
        uint64_t payload = std::min<uint64_t>(params.payloadBytes, qp.released - qp.sent);
        qp.sent += payload;
        Packet* p = m_ctx.pool.Get();
        p->kind = PacketKind::Data;
        p->prio = params.dataPriority;
        p->payloadBytes = static_cast<uint32_t>(payload);
        p->wireBytes = static_cast<uint32_t>(payload) + params.dataOverheadBytes;
        p->qp = qpId;
        p->dst = qp.dstNode;
        p->flowHash = qp.hash;
        p->seq = qp.sent;
        p->readyPs = qp.nextAvailPs;
        double start = std::max(port.FreePs(), p->readyPs);
        qp.nextAvailPs = start + p->wireBytes * 8e12 / qp.rateBps;
        ++m_ctx.dataPackets;
        return p;
    }

    /// Notification point: count the bytes, finish messages, turn the packet into its ack.
    void ReceiveData(Packet* p)
    {
        QueuePair& qp = m_ctx.qps[p->qp];
        Place(qp, p->seq - p->payloadBytes, p->seq);
        while (!qp.expected.empty() && qp.received >= qp.expected.front().endOffset)
        {
            m_ctx.log->Record(qp.expected.front().id);
            qp.expected.pop_front();
        }
        const RoceParams& params = m_ctx.params;
        bool cnp = false;
        if (p->ce && p->readyPs - qp.lastCnpPs >= params.cnpIntervalPs)
        {
            cnp = true;
            qp.lastCnpPs = p->readyPs;
        }
        p->kind = PacketKind::Ack;
        p->cnp = cnp;
        p->ce = false;
        p->seq = qp.received;
        p->wireBytes = params.ackBytes;
        p->payloadBytes = 0;
        p->dst = qp.srcNode;
        p->flowHash = qp.ackHash;
        p->prio = params.ackHighPriority ? 0 : params.dataPriority;
        ++m_ctx.ackPackets;
        m_port->Enqueue(p);
    }

    /// Bytes [start, end) of `qp` arrived: extend the gap-free prefix, or wait past the gap.
    void Place(QueuePair& qp, uint64_t start, uint64_t end)
    {
        if (start != qp.received)
        {
            ++m_ctx.reorderedPackets;
            qp.ahead.emplace(start, end);
            return;
        }
        qp.received = end;
        for (auto next = qp.ahead.begin(); next != qp.ahead.end() && next->first == qp.received;
             next = qp.ahead.erase(next))
        {
            qp.received = next->second;
        }
    }

    /// Reaction point: window accounting and the CNP.
    void ReceiveAck(Packet* p)
    {
        QueuePair& qp = m_ctx.qps[p->qp];
        qp.acked = std::max(qp.acked, p->seq);
        if (p->cnp)
        {
            ++qp.cnps;
            if (m_ctx.params.dcqcn)
            {
                OnCnp(p->qp, qp);
            }
        }
        double arrival = p->readyPs;
        m_ctx.pool.Put(p);
        if (qp.windowBytes > 0 && qp.active)
        {
            m_port->Kick(arrival);
        }
    }

    /// Apply the alpha-timer ticks due by `nowPs` (each tick uses and clears the CNP flag).
    void UpdateAlpha(QueuePair& qp, double nowPs) const
    {
        const RoceParams& params = m_ctx.params;
        if (!qp.seenCnp || qp.nextAlphaPs > nowPs)
        {
            return;
        }
        double ticks = std::floor((nowPs - qp.nextAlphaPs) / params.alphaIntervalPs) + 1;
        qp.alpha = (1 - params.g) * qp.alpha + (qp.alphaCnp ? params.g : 0.0);
        qp.alpha *= std::pow(1 - params.g, ticks - 1);
        qp.alphaCnp = false;
        qp.nextAlphaPs += ticks * params.alphaIntervalPs;
    }

    void OnCnp(uint32_t qpId, QueuePair& qp)
    {
        const RoceParams& params = m_ctx.params;
        double now = NowPs();
        UpdateAlpha(qp, now);
        if (!qp.seenCnp)
        {
            qp.seenCnp = true;
            qp.alpha = 1;
            qp.nextAlphaPs = now + params.alphaIntervalPs;
            // The forks offset the decrease grid by 1 ns so it runs after the alpha update.
            qp.decreaseGridPs = now + 1000;
            qp.rateBps = std::max(params.minRateBps, qp.rateBps * params.rateOnFirstCnp);
            qp.targetBps = qp.rateBps;
        }
        else
        {
            qp.alphaCnp = true;
        }
        qp.decreaseCnp = true;
        if (!qp.decreasePending)
        {
            double periods = std::floor((now - qp.decreaseGridPs) / params.decreaseIntervalPs) + 1;
            double at = qp.decreaseGridPs + std::max(periods, 1.0) * params.decreaseIntervalPs;
            qp.decreasePending = true;
            ns3::Simulator::Schedule(DelayUntil(at), &Nic::CheckDecrease, this, qpId);
        }
    }

    void CheckDecrease(uint32_t qpId)
    {
        const RoceParams& params = m_ctx.params;
        QueuePair& qp = m_ctx.qps[qpId];
        qp.decreasePending = false;
        double now = NowPs();
        UpdateAlpha(qp, now);
        if (!qp.decreaseCnp)
        {
            return;
        }
        qp.decreaseCnp = false;
        if (params.clampTargetRate || qp.stage != 0)
        {
            qp.targetBps = qp.rateBps;
        }
        qp.rateBps = std::max(params.minRateBps, qp.rateBps * (1 - qp.alpha / 2));
        qp.minRateBps = std::min(qp.minRateBps, qp.rateBps);
        qp.stage = 0;
        ++qp.rateCuts;
        qp.rpTimer.Cancel();
        qp.rpTimer = ns3::Simulator::Schedule(DelayUntil(now + params.rpTimerPs), &Nic::Increase,
                                              this, qpId);
    }

    void Increase(uint32_t qpId)
    {
        const RoceParams& params = m_ctx.params;
        QueuePair& qp = m_ctx.qps[qpId];
        double line = params.nicBitsPerSecond;
        if (qp.stage == params.fastRecoverySteps)
        {
            qp.targetBps = std::min(line, qp.targetBps + params.rateAiBps);
        }
        else if (qp.stage > params.fastRecoverySteps)
        {
            qp.targetBps = std::min(line, qp.targetBps + params.rateHaiBps);
        }
        qp.rateBps = qp.rateBps / 2 + qp.targetBps / 2;
        ++qp.stage;
        if (qp.rateBps < line || qp.targetBps < line)
        {
            qp.rpTimer = ns3::Simulator::Schedule(DelayUntil(NowPs() + params.rpTimerPs),
                                                  &Nic::Increase, this, qpId);
        }
    }

    RoceContext& m_ctx;
    uint32_t m_node;
    Port* m_port{nullptr};
    std::vector<uint32_t> m_active;
    std::size_t m_rr{0};
};

} // namespace roce
} // namespace phantora
