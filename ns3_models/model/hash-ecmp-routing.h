// Per-flow ECMP on top of ns-3 global routing.
//
// ns-3.44 only offers per-packet random ECMP (Ipv4GlobalRouting::RandomEcmpRouting), which
// reorders TCP segments and, with SACK, crashes TcpTxBuffer. Real switches hash the 5-tuple,
// so every packet of a connection takes the same path and different connections can
// collide on one link. This routing protocol does that for forwarded packets: among the
// equal-cost global routes to the destination it picks one by a hash of (source, destination,
// protocol, ports), salted per switch and by the "Salt" attribute (a switch's ECMP hash seed).
#pragma once

#include "ns3/ipv4-global-routing.h"
#include "ns3/ipv4-route.h"
#include "ns3/ipv4-routing-table-entry.h"
#include "ns3/ipv4.h"
#include "ns3/node.h"
#include "ns3/packet.h"
#include "ns3/socket.h"
#include "ns3/uinteger.h"

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace phantora
{

class HashEcmpRouting : public ns3::Ipv4GlobalRouting
{
  public:
    static ns3::TypeId GetTypeId()
    {
        using namespace ns3;
        static TypeId tid =
            TypeId("phantora::HashEcmpRouting")
                .SetParent<Ipv4GlobalRouting>()
                .SetGroupName("Phantora")
                .AddConstructor<HashEcmpRouting>()
                .AddAttribute("Salt",
                              "Seed mixed into the ECMP hash (with the node id), so different "
                              "seeds give different, equally valid path assignments.",
                              UintegerValue(0),
                              MakeUintegerAccessor(&HashEcmpRouting::m_salt),
                              MakeUintegerChecker<uint64_t>());
        return tid;
    }

    void SetIpv4(ns3::Ptr<ns3::Ipv4> ipv4) override
    {
        ns3::Ipv4GlobalRouting::SetIpv4(ipv4);
        m_ipv4 = ipv4;
    }

    bool RouteInput(ns3::Ptr<const ns3::Packet> packet,
                    const ns3::Ipv4Header& header,
                    ns3::Ptr<const ns3::NetDevice> inputDevice,
                    const UnicastForwardCallback& forward,
                    const MulticastForwardCallback& multicast,
                    const LocalDeliverCallback& deliver,
                    const ErrorCallback& error) override
    {
        using namespace ns3;
        uint32_t inputInterface = m_ipv4->GetInterfaceForDevice(inputDevice);
        Ipv4Address destination = header.GetDestination();
        if (destination.IsMulticast() || destination.IsBroadcast() ||
            m_ipv4->IsDestinationAddress(destination, inputInterface))
        {
            return Ipv4GlobalRouting::RouteInput(packet, header, inputDevice, forward, multicast,
                                                 deliver, error);
        }
        if (!m_ipv4->IsForwarding(inputInterface))
        {
            error(packet, header, Socket::ERROR_NOROUTETOHOST);
            return true;
        }
        const std::vector<Ptr<Ipv4Route>>& routes = Routes(destination);
        if (routes.empty())
        {
            return false;
        }
        forward(routes.size() == 1 ? routes[0] : routes[FlowHash(packet, header) % routes.size()],
                packet,
                header);
        return true;
    }

    /// Forget the cached routes: the global routes were recomputed (a link failed), and the
    /// new table may have as many entries as the old one.
    void ClearRouteCache()
    {
        m_routes.clear();
    }

  protected:
    void DoDispose() override
    {
        m_routes.clear();
        m_ipv4 = nullptr;
        ns3::Ipv4GlobalRouting::DoDispose();
    }

  private:
    /// splitmix64-style mix of the 5-tuple; the payload starts with the TCP/UDP ports.
    uint64_t FlowHash(ns3::Ptr<const ns3::Packet> packet, const ns3::Ipv4Header& header)
    {
        uint64_t x = (static_cast<uint64_t>(header.GetSource().Get()) << 32) ^
                     header.GetDestination().Get();
        uint8_t protocol = header.GetProtocol();
        x ^= static_cast<uint64_t>(protocol) << 17;
        constexpr uint8_t kTcp = 6;
        constexpr uint8_t kUdp = 17;
        if ((protocol == kTcp || protocol == kUdp) && packet->GetSize() >= 4)
        {
            uint8_t ports[4];
            packet->CopyData(ports, 4);
            x ^= (static_cast<uint64_t>(ports[0]) << 40) ^ (static_cast<uint64_t>(ports[1]) << 48) ^
                 (static_cast<uint64_t>(ports[2]) << 8) ^ (static_cast<uint64_t>(ports[3]) << 24);
        }
        x ^= NodeSalt() ^ (m_salt * 0xBF58476D1CE4E5B9ULL);
        x ^= x >> 33;
        x *= 0xFF51AFD7ED558CCDULL;
        x ^= x >> 33;
        x *= 0xC4CEB9FE1A85EC53ULL;
        x ^= x >> 33;
        return x;
    }

    /// Differs per switch, so consecutive switches do not repeat each other's choices.
    uint64_t NodeSalt()
    {
        if (m_nodeSalt == 0)
        {
            m_nodeSalt = (m_ipv4->GetObject<ns3::Node>()->GetId() + 1) * 0x9E3779B97F4A7C15ULL;
        }
        return m_nodeSalt;
    }

    /// Equal-cost routes towards `destination`, one per equal-cost table entry: host routes
    /// if any, else matching network routes. Built once per destination and shared by its
    /// packets (forwarding only reads a route); rebuilt when the table size changes or on
    /// ClearRouteCache.
    const std::vector<ns3::Ptr<ns3::Ipv4Route>>& Routes(ns3::Ipv4Address destination)
    {
        using namespace ns3;
        uint32_t nRoutes = GetNRoutes();
        if (nRoutes != m_cachedRoutes)
        {
            m_routes.clear();
            m_cachedRoutes = nRoutes;
        }
        auto found = m_routes.find(destination.Get());
        if (found != m_routes.end())
        {
            return found->second;
        }
        std::vector<Ipv4RoutingTableEntry*> hostEntries;
        std::vector<Ipv4RoutingTableEntry*> networkEntries;
        for (uint32_t i = 0; i < nRoutes; ++i)
        {
            Ipv4RoutingTableEntry* entry = GetRoute(i);
            if (entry->IsHost())
            {
                if (entry->GetDest() == destination)
                {
                    hostEntries.push_back(entry);
                }
            }
            else if (entry->GetDestNetworkMask().IsMatch(destination, entry->GetDestNetwork()))
            {
                networkEntries.push_back(entry);
            }
        }
        std::vector<Ptr<Ipv4Route>>& routes = m_routes[destination.Get()];
        for (Ipv4RoutingTableEntry* entry : hostEntries.empty() ? networkEntries : hostEntries)
        {
            Ptr<Ipv4Route> route = Create<Ipv4Route>();
            route->SetDestination(destination);
            route->SetSource(m_ipv4->GetAddress(entry->GetInterface(), 0).GetLocal());
            route->SetGateway(entry->GetGateway());
            route->SetOutputDevice(m_ipv4->GetNetDevice(entry->GetInterface()));
            routes.push_back(route);
        }
        return routes;
    }

    ns3::Ptr<ns3::Ipv4> m_ipv4;
    uint64_t m_salt{0};
    uint64_t m_nodeSalt{0};
    std::unordered_map<uint32_t, std::vector<ns3::Ptr<ns3::Ipv4Route>>> m_routes;
    uint32_t m_cachedRoutes{0};
};

} // namespace phantora
