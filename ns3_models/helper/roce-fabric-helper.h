// Builds a RoCE fabric (NICs, lossless switches, links) on ns-3's event scheduler, feeds it
// messages and reports its counters.
//
// Same construction interface as FabricHelper (AddEndpoint / AddSwitch / AddLink / Install),
// so one Python builder serves both transports. Routing: shortest paths computed here (GPUs
// are endpoints, never transit), per-flow ECMP by a salted hash of the queue pair. A pause
// watchdog runs while any port is paused: a pause in force longer than `watchdogPs` fails the
// run and names the paused ports, and the cycle among them if they wait on each other (a PFC
// deadlock), instead of letting the simulation hang.
//
// Link failures (ScheduleLinkDown): at the given time the link's two ports are marked down and
// every switch's routes are recomputed without them, so ECMP hashes over the remaining next
// hops. What was already queued on (or in flight over) the link drains to its peer: nothing
// is lost, and no drop ever comes from a failure. Packets of a queue pair on its new path may
// overtake those still draining; the receiving NIC places them by offset (roce-nic.h).
#pragma once

#include "model/message-log.h"
#include "model/roce-context.h"
#include "model/roce-nic.h"
#include "model/roce-port.h"
#include "model/roce-switch.h"

#include "ns3/nstime.h"
#include "ns3/simulator.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace phantora
{

/// Counters of one port (one link direction), for the report.
struct RocePortReport
{
    uint32_t node;
    uint32_t peer;
    uint64_t txPackets;
    uint64_t pausesReceived;
    uint64_t pausesSent;
    double pausedUs;
    uint64_t maxQueueBytes;
    uint64_t ecnMarks;
};

/// What link failures did: links down so far, packets that left through a down link after it
/// failed (queued there when it went down), (switch, destination) route sets that changed,
/// and data packets that reached their NIC ahead of an earlier packet of their queue pair.
struct RoceFailureTotals
{
    uint64_t linkFailures;
    uint64_t drainedPackets;
    uint64_t changedRoutes;
    uint64_t reorderedPackets;
};

/// Queue-pair counters summed over the fabric.
struct RoceFlowTotals
{
    uint64_t qps;
    uint64_t qpsWithCnp;
    uint64_t qpsCut;
    uint64_t cnps;
    uint64_t rateCuts;
    uint64_t maxCnpsPerQp;
    double minRateBps;
};

class RoceFabricHelper : public roce::PauseListener
{
  public:
    explicit RoceFabricHelper(const roce::RoceParams& params)
    {
        if (ns3::Time::GetResolution() != ns3::Time::NS)
        {
            throw std::logic_error("the RoCE fabric needs ns-3's default 1 ns time resolution");
        }
        m_ctx.params = params;
        m_ctx.log = ns3::CreateObject<MessageLog>();
    }

    RoceFabricHelper(const RoceFabricHelper&) = delete;
    RoceFabricHelper& operator=(const RoceFabricHelper&) = delete;

    uint32_t AddEndpoint()
    {
        return AddNode(true);
    }

    uint32_t AddSwitch()
    {
        return AddNode(false);
    }

    void SetNodeName(uint32_t node, const std::string& name)
    {
        m_ctx.nodeNames.at(node) = name;
    }

    void AddLink(uint32_t a, uint32_t b, uint64_t bitsPerSecond, uint64_t delayNs)
    {
        if (a >= m_isEndpoint.size() || b >= m_isEndpoint.size() || a == b)
        {
            throw std::out_of_range("AddLink: bad node indices " + std::to_string(a) + ", " +
                                    std::to_string(b));
        }
        roce::Port* pa = NewPort(a, bitsPerSecond, delayNs);
        roce::Port* pb = NewPort(b, bitsPerSecond, delayNs);
        pa->peer = pb;
        pb->peer = pa;
        m_links.push_back(pa);
    }

    /// Size the switch buffers and compute routes. Throws std::invalid_argument naming the
    /// problem when a buffer cannot hold its ports' headroom and reserve.
    void Install()
    {
        for (uint32_t node = 0; node < m_isEndpoint.size(); ++node)
        {
            if (m_isEndpoint[node] && m_nics[node]->GetPort() == nullptr)
            {
                throw std::invalid_argument("endpoint " + m_ctx.nodeNames[node] + " has no link");
            }
            if (!m_isEndpoint[node])
            {
                std::string problem = m_switches[node]->Init();
                if (!problem.empty())
                {
                    throw std::invalid_argument(problem);
                }
            }
        }
        ComputeRoutes();
    }

    /// Link `link` (in AddLink order) goes down at `atNs` (absolute, not before now) and stays
    /// down. Throws std::out_of_range for a bad link or time.
    void ScheduleLinkDown(uint32_t link, int64_t atNs)
    {
        int64_t now = ns3::Simulator::Now().GetTimeStep();
        if (link >= m_links.size() || atNs < now)
        {
            throw std::out_of_range("ScheduleLinkDown: link " + std::to_string(link) + " at " +
                                    std::to_string(atNs) + " ns");
        }
        ns3::Simulator::Schedule(ns3::TimeStep(atNs - now), &RoceFabricHelper::LinkDown, this,
                                 link);
    }

    RoceFailureTotals GetFailureTotals() const
    {
        RoceFailureTotals totals{m_linkFailures, 0, m_changedRoutes, m_ctx.reorderedPackets};
        for (const auto& port : m_ports)
        {
            totals.drainedPackets += port->down ? port->txPackets - port->txAtDown : 0;
        }
        return totals;
    }

    /// A queue pair from endpoint `src` to `dst`; `tag` tells parallel ones apart (and gives
    /// them their own ECMP path); `windowBytes` 0 for none. Returns its id.
    uint32_t AddQueuePair(uint32_t src, uint32_t dst, uint32_t tag, uint64_t windowBytes)
    {
        const roce::RoceParams& params = m_ctx.params;
        uint64_t key = roce::Mix64(params.seed ^ roce::Mix64((uint64_t(src) << 32) | dst) ^
                                   roce::Mix64(tag + 0x51ED27ULL));
        roce::QueuePair qp;
        qp.srcNode = src;
        qp.dstNode = dst;
        qp.hash = key;
        qp.ackHash = roce::Mix64(key ^ 0xA5A5A5A5ULL);
        qp.windowBytes = windowBytes;
        qp.rateBps = qp.targetBps = qp.minRateBps = params.nicBitsPerSecond;
        m_ctx.qps.push_back(std::move(qp));
        return static_cast<uint32_t>(m_ctx.qps.size() - 1);
    }

    /// Message `id` of `bytes` (> 0) on queue pair `qp`, to start at `startNs` (absolute) or
    /// after the queue pair's previous message, whichever is later.
    void Send(uint32_t qp, uint64_t id, uint64_t bytes, int64_t startNs)
    {
        roce::QueuePair& pair = m_ctx.qps.at(qp);
        pair.expectedTotal += bytes;
        pair.expected.push_back(roce::QueuePair::Expected{id, pair.expectedTotal});
        m_nics[pair.srcNode]->Send(qp, bytes, startNs);
    }

    ns3::Ptr<MessageLog> GetLog() const
    {
        return m_ctx.log;
    }

    /// The first fatal problem (a drop, a pause in force too long), or "".
    std::string GetFailure() const
    {
        return m_ctx.failure;
    }

    /// The ports paused right now, for a report on a run that cannot go on.
    std::string DescribePauses() const
    {
        double now = roce::NowPs();
        std::ostringstream out;
        int listed = 0;
        for (const auto& port : m_ports)
        {
            double since = port->PausedSincePs();
            if (since >= 0 && listed++ < 8)
            {
                out << (listed > 1 ? "; " : "") << PortName(*port) << " paused since "
                    << since / 1e6 << " us (" << (now - since) / 1e6 << " us)";
            }
        }
        return out.str();
    }

    uint64_t GetDataPackets() const
    {
        return m_ctx.dataPackets;
    }

    uint64_t GetAckPackets() const
    {
        return m_ctx.ackPackets;
    }

    uint64_t GetPacketHops() const
    {
        uint64_t hops = 0;
        for (const auto& port : m_ports)
        {
            hops += port->txPackets;
        }
        return hops;
    }

    uint64_t GetDrops() const
    {
        return m_ctx.drops;
    }

    uint64_t GetMaxSharedBytes() const
    {
        uint64_t most = 0;
        for (const auto& sw : m_switches)
        {
            if (sw)
            {
                most = std::max(most, sw->maxSharedBytes);
            }
        }
        return most;
    }

    std::vector<RocePortReport> GetPortReports() const
    {
        double now = roce::NowPs();
        std::vector<RocePortReport> reports;
        reports.reserve(m_ports.size());
        for (const auto& port : m_ports)
        {
            reports.push_back(RocePortReport{port->node, port->peer->node, port->txPackets,
                                             port->pausesReceived, port->pausesSent,
                                             port->PausedPsUntil(now) / 1e6, port->maxQueueBytes,
                                             port->ecnMarks});
        }
        return reports;
    }

    RoceFlowTotals GetFlowTotals() const
    {
        RoceFlowTotals totals{m_ctx.qps.size(), 0, 0, 0, 0, 0, m_ctx.params.nicBitsPerSecond};
        for (const auto& qp : m_ctx.qps)
        {
            totals.qpsWithCnp += qp.cnps > 0;
            totals.qpsCut += qp.rateCuts > 0;
            totals.cnps += qp.cnps;
            totals.rateCuts += qp.rateCuts;
            totals.maxCnpsPerQp = std::max(totals.maxCnpsPerQp, qp.cnps);
            totals.minRateBps = std::min(totals.minRateBps, qp.minRateBps);
        }
        return totals;
    }

    /// Current sending rate of queue pair `qp` (tests watch DCQCN converge).
    double GetRateBps(uint32_t qp) const
    {
        return m_ctx.qps.at(qp).rateBps;
    }

    void PauseChanged(const roce::Port&, bool paused) override
    {
        m_pausedPorts += paused ? 1 : -1;
        if (paused && !m_watchdogArmed && m_ctx.params.watchdogPs > 0)
        {
            m_watchdogArmed = true;
            ns3::Simulator::Schedule(roce::DelayUntil(roce::NowPs() + m_ctx.params.watchdogPs / 2),
                                     &RoceFabricHelper::Watchdog, this);
        }
    }

  private:
    uint32_t AddNode(bool isEndpoint)
    {
        uint32_t node = static_cast<uint32_t>(m_isEndpoint.size());
        m_isEndpoint.push_back(isEndpoint);
        m_ctx.nodeNames.push_back("node" + std::to_string(node));
        m_nics.emplace_back(isEndpoint ? new roce::Nic(m_ctx, node) : nullptr);
        m_switches.emplace_back(isEndpoint ? nullptr : new roce::Switch(m_ctx, node));
        return node;
    }

    roce::Port* NewPort(uint32_t node, uint64_t bitsPerSecond, uint64_t delayNs)
    {
        roce::PortOwner* owner = m_isEndpoint[node]
                                     ? static_cast<roce::PortOwner*>(m_nics[node].get())
                                     : m_switches[node].get();
        uint16_t local = 0;
        if (m_isEndpoint[node])
        {
            if (m_nics[node]->GetPort() != nullptr)
            {
                throw std::invalid_argument("endpoint " + m_ctx.nodeNames[node] +
                                            " has a second link; a NIC has one port");
            }
        }
        else
        {
            local = static_cast<uint16_t>(m_switches[node]->Ports().size());
        }
        m_ports.push_back(std::make_unique<roce::Port>(owner, node, local,
                                                       static_cast<double>(bitsPerSecond),
                                                       static_cast<double>(delayNs) * 1000.0));
        roce::Port* port = m_ports.back().get();
        port->pauseListener = this;
        if (m_isEndpoint[node])
        {
            m_nics[node]->SetPort(port);
        }
        else
        {
            m_switches[node]->AddPort(port);
        }
        return port;
    }

    /// Every switch's equal-cost ports towards every endpoint, over the links that are up.
    void ComputeRoutes()
    {
        for (auto& sw : m_switches)
        {
            if (sw)
            {
                sw->Routes().assign(m_isEndpoint.size(), {});
            }
        }
        for (uint32_t dst = 0; dst < m_isEndpoint.size(); ++dst)
        {
            if (m_isEndpoint[dst])
            {
                RouteTowards(dst);
            }
        }
    }

    void LinkDown(uint32_t link)
    {
        for (roce::Port* port : {m_links[link], m_links[link]->peer})
        {
            port->down = true;
            port->txAtDown = port->txPackets;
        }
        ++m_linkFailures;
        std::vector<std::vector<std::vector<uint16_t>>> before;
        for (const auto& sw : m_switches)
        {
            before.push_back(sw ? sw->Routes() : std::vector<std::vector<uint16_t>>{});
        }
        ComputeRoutes();
        for (std::size_t node = 0; node < m_switches.size(); ++node)
        {
            for (std::size_t dst = 0; m_switches[node] && dst < before[node].size(); ++dst)
            {
                m_changedRoutes += before[node][dst] != m_switches[node]->Routes()[dst];
            }
        }
    }

    /// Breadth-first from `dst` over links that are up (endpoints other than `dst` are never
    /// transit); every switch gets the ports whose neighbour is one hop closer.
    void RouteTowards(uint32_t dst)
    {
        constexpr uint32_t kFar = std::numeric_limits<uint32_t>::max();
        std::vector<uint32_t> distance(m_isEndpoint.size(), kFar);
        std::deque<uint32_t> frontier{dst};
        distance[dst] = 0;
        while (!frontier.empty())
        {
            uint32_t node = frontier.front();
            frontier.pop_front();
            if (m_isEndpoint[node] && node != dst)
            {
                continue;
            }
            for (roce::Port* port : PortsOf(node))
            {
                uint32_t next = port->peer->node;
                if (!port->down && distance[next] == kFar)
                {
                    distance[next] = distance[node] + 1;
                    frontier.push_back(next);
                }
            }
        }
        for (uint32_t node = 0; node < m_isEndpoint.size(); ++node)
        {
            if (m_isEndpoint[node] || distance[node] == kFar)
            {
                continue;
            }
            auto& routes = m_switches[node]->Routes()[dst];
            for (roce::Port* port : m_switches[node]->Ports())
            {
                if (!port->down && distance[port->peer->node] + 1 == distance[node])
                {
                    routes.push_back(port->local);
                }
            }
        }
    }

    std::vector<roce::Port*> PortsOf(uint32_t node) const
    {
        if (m_isEndpoint[node])
        {
            return {m_nics[node]->GetPort()};
        }
        return m_switches[node]->Ports();
    }

    std::string PortName(const roce::Port& port) const
    {
        return m_ctx.nodeNames[port.node] + "->" + m_ctx.nodeNames[port.peer->node];
    }

    /// Fail the run if a pause has lasted longer than the limit; name the stuck ports and the
    /// cycle they form if they wait on each other.
    void Watchdog()
    {
        m_watchdogArmed = false;
        if (m_pausedPorts == 0)
        {
            return;
        }
        double now = roce::NowPs();
        double limit = m_ctx.params.watchdogPs;
        std::vector<const roce::Port*> stuck;
        for (const auto& port : m_ports)
        {
            double since = port->PausedSincePs();
            if (since >= 0 && now - since >= limit)
            {
                stuck.push_back(port.get());
            }
        }
        if (stuck.empty())
        {
            m_watchdogArmed = true;
            ns3::Simulator::Schedule(roce::DelayUntil(now + limit / 2), &RoceFabricHelper::Watchdog,
                                     this);
            return;
        }
        std::string cycle = PauseCycle(stuck);
        std::ostringstream why;
        why << "PFC " << (cycle.empty() ? "pause storm" : "deadlock") << ": "
            << (cycle.empty() ? "" : "the ports " + cycle + " pause each other in a cycle; ")
            << stuck.size() << " port(s) paused for more than " << limit / 1e6
            << " us of simulated time (cluster.network.roce.pfc_watchdog): " << DescribePauses();
        m_ctx.Fail(why.str());
    }

    /// A cycle among `stuck` ports where each waits on the next: port P (node A -> node B) is
    /// paused by B, whose data for A's traffic sits in B's own paused ports.
    std::string PauseCycle(const std::vector<const roce::Port*>& stuck) const
    {
        std::vector<int> state(stuck.size(), 0); // 0 new, 1 on the path, 2 done
        std::vector<std::size_t> path;
        std::function<bool(std::size_t)> visit = [&](std::size_t i) {
            state[i] = 1;
            path.push_back(i);
            for (std::size_t j = 0; j < stuck.size(); ++j)
            {
                if (stuck[j]->node != stuck[i]->peer->node || !stuck[j]->HasQueuedData())
                {
                    continue;
                }
                if (state[j] == 1)
                {
                    path.erase(path.begin(), std::find(path.begin(), path.end(), j));
                    return true;
                }
                if (state[j] == 0 && visit(j))
                {
                    return true;
                }
            }
            state[i] = 2;
            path.pop_back();
            return false;
        };
        for (std::size_t i = 0; i < stuck.size(); ++i)
        {
            if (state[i] == 0 && visit(i))
            {
                std::string names;
                for (std::size_t k : path)
                {
                    names += (names.empty() ? "" : ", ") + PortName(*stuck[k]);
                }
                return names;
            }
        }
        return "";
    }

    roce::RoceContext m_ctx;
    std::vector<bool> m_isEndpoint;
    std::vector<std::unique_ptr<roce::Nic>> m_nics;
    std::vector<std::unique_ptr<roce::Switch>> m_switches;
    std::vector<std::unique_ptr<roce::Port>> m_ports;
    std::vector<roce::Port*> m_links; // side a of each link, in AddLink order
    uint64_t m_linkFailures{0};
    uint64_t m_changedRoutes{0};
    int64_t m_pausedPorts{0};
    bool m_watchdogArmed{false};
};

} // namespace phantora
