// Builds the inter-host fabric in ns-3 from a plain node/link list.
//
// Endpoints (GPUs) get one point-to-point NIC each; switches forward with per-flow hash ECMP
// over global routes. Every link gets its own /30 subnet (10.0.0.0 + 4 * link index).
// Queues:
//  * endpoint NIC: NicQueueDisc (unbounded, ACKs before data; not ns-3's default FqCoDel,
//    which costs ~40% more CPU and which no NIC has) over a one-packet device queue.
//  * switch egress port: RED with ECN marking as DCTCP wants it (MinTh = MaxTh = K, QW = 1, no
//    gentle region, so every ECN-capable packet arriving to a backlog >= K bytes is marked)
//    holding up to `switchBufferBytes`.
// The device queue below every queue disc holds a single packet, so the queue disc sees
// (and orders, and marks) the real backlog.
// Link failures (ScheduleLinkDown): at the given time both Ipv4 interfaces of the link go down
// and global routing is recomputed, so ECMP hashes over the remaining next hops. Packets on
// the link or queued for it then still cross it and die at the down interface on arrival
// (counted by GetLinkDownDrops); TCP retransmits them.
#pragma once

#include "helper/hash-ecmp-routing-helper.h"
#include "model/nic-queue-disc.h"

#include "ns3/boolean.h"
#include "ns3/data-rate.h"
#include "ns3/double.h"
#include "ns3/internet-stack-helper.h"
#include "ns3/ipv4-global-routing-helper.h"
#include "ns3/ipv4-header.h"
#include "ns3/ipv4-interface-address.h"
#include "ns3/ipv4-l3-protocol.h"
#include "ns3/ipv4.h"
#include "ns3/node-container.h"
#include "ns3/packet.h"
#include "ns3/point-to-point-helper.h"
#include "ns3/point-to-point-net-device.h"
#include "ns3/queue-disc.h"
#include "ns3/queue-size.h"
#include "ns3/queue.h"
#include "ns3/simulator.h"
#include "ns3/traffic-control-helper.h"
#include "ns3/traffic-control-layer.h"
#include "ns3/uinteger.h"

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace phantora
{

class FabricHelper
{
  public:
    /// @param mtuBytes IP MTU of every link.
    /// @param switchBufferBytes capacity of each switch egress queue.
    /// @param ecnThresholdBytes backlog at which a switch port starts marking (DCTCP's K).
    /// @param ecmpSalt seed of the switches' ECMP hash.
    FabricHelper(uint32_t mtuBytes,
                 uint32_t switchBufferBytes,
                 uint32_t ecnThresholdBytes,
                 uint64_t ecmpSalt)
        : m_mtuBytes(mtuBytes),
          m_switchBufferBytes(switchBufferBytes),
          m_ecnThresholdBytes(ecnThresholdBytes),
          m_ecmpSalt(ecmpSalt)
    {
    }

    /// Add a GPU endpoint; returns its node index in this fabric.
    uint32_t AddEndpoint()
    {
        return AddNode(true);
    }

    /// Add a forwarding switch; returns its node index in this fabric.
    uint32_t AddSwitch()
    {
        return AddNode(false);
    }

    /// Add a full-duplex link; each direction carries `bitsPerSecond`.
    void AddLink(uint32_t a, uint32_t b, uint64_t bitsPerSecond, uint64_t delayNs)
    {
        if (a >= m_nodes.GetN() || b >= m_nodes.GetN() || a == b)
        {
            throw std::out_of_range("AddLink: bad node indices " + std::to_string(a) + ", " +
                                    std::to_string(b));
        }
        if (m_links.size() >= kMaxLinks)
        {
            throw std::length_error("AddLink: the 10.0.0.0/8 addressing plan holds at most " +
                                    std::to_string(kMaxLinks) + " links");
        }
        m_links.push_back(LinkSpec{a, b, bitsPerSecond, delayNs});
    }

    /// Create stacks, devices, queues, addresses and routes. Call once, before simulating.
    void Install()
    {
        using namespace ns3;
        InternetStackHelper stack;
        stack.SetIpv6StackInstall(false);
        stack.SetRoutingHelper(HashEcmpRoutingHelper(m_ecmpSalt));
        stack.Install(m_nodes);

        m_endpointAddress.assign(m_nodes.GetN(), Ipv4Address());
        for (uint32_t index = 0; index < m_links.size(); ++index)
        {
            InstallLink(index, m_links[index]);
        }
        Ipv4GlobalRoutingHelper::PopulateRoutingTables();
        for (uint32_t node = 0; node < m_nodes.GetN(); ++node)
        {
            m_nodes.Get(node)->GetObject<Ipv4L3Protocol>()->TraceConnectWithoutContext(
                "Drop", MakeCallback(&FabricHelper::CountDrop, this));
        }
    }

    /// Link `link` (in AddLink order) goes down at `atNs` (absolute, not before now) and stays
    /// down. Throws std::out_of_range for a bad link or time.
    void ScheduleLinkDown(uint32_t link, int64_t atNs)
    {
        ns3::Time delay = ns3::NanoSeconds(atNs) - ns3::Simulator::Now();
        if (link >= m_interfaces.size() || delay.IsStrictlyNegative())
        {
            throw std::out_of_range("ScheduleLinkDown: link " + std::to_string(link) + " at " +
                                    std::to_string(atNs) + " ns");
        }
        ns3::Simulator::Schedule(delay, &FabricHelper::LinkDown, this, link);
    }

    uint64_t GetLinkFailures() const
    {
        return m_linkFailures;
    }

    /// Packets that arrived on a down interface (were on a link when it failed) and died there.
    uint64_t GetLinkDownDrops() const
    {
        return m_linkDownDrops;
    }

    ns3::Ptr<ns3::Node> GetNode(uint32_t index) const
    {
        return m_nodes.Get(index);
    }

    /// The address of an endpoint's NIC (unset for switches).
    ns3::Ipv4Address GetEndpointAddress(uint32_t index) const
    {
        return m_endpointAddress.at(index);
    }

    /// Packets handed to a link by any device so far: every packet-hop, ACKs included.
    uint64_t GetPacketHops() const
    {
        uint64_t hops = 0;
        for (const auto& device : m_devices)
        {
            auto queue = device->GetQueue();
            hops += queue->GetTotalReceivedPackets() - queue->GetTotalDroppedPackets();
        }
        return hops;
    }

    /// Data packets (TCP segments with payload, retransmissions included) sent by all NICs.
    uint64_t GetDataPackets() const
    {
        uint64_t packets = 0;
        for (const auto& queueDisc : m_nicQueueDiscs)
        {
            packets += queueDisc->GetDataPackets();
        }
        return packets;
    }

    /// Packets dropped anywhere: switch buffers full, or (never expected) a device queue.
    uint64_t GetDrops() const
    {
        uint64_t drops = 0;
        for (const auto& device : m_devices)
        {
            drops += device->GetQueue()->GetTotalDroppedPackets();
        }
        for (const auto& queueDisc : m_switchQueueDiscs)
        {
            drops += queueDisc->GetStats().nTotalDroppedPackets;
        }
        return drops;
    }

    /// Packets CE-marked by switch ports.
    uint64_t GetEcnMarks() const
    {
        uint64_t marks = 0;
        for (const auto& queueDisc : m_switchQueueDiscs)
        {
            marks += queueDisc->GetStats().nTotalMarkedPackets;
        }
        return marks;
    }

  private:
    static constexpr uint32_t kMaxLinks = 1U << 22; // one /30 each inside 10.0.0.0/8

    struct LinkSpec
    {
        uint32_t a;
        uint32_t b;
        uint64_t bitsPerSecond;
        uint64_t delayNs;
    };

    void LinkDown(uint32_t link)
    {
        using namespace ns3;
        uint32_t ends[2] = {m_links[link].a, m_links[link].b};
        for (uint32_t side = 0; side < 2; ++side)
        {
            m_nodes.Get(ends[side])->GetObject<Ipv4>()->SetDown(m_interfaces[link][side]);
        }
        ++m_linkFailures;
        Ipv4GlobalRoutingHelper::RecomputeRoutingTables();
        for (uint32_t node = 0; node < m_nodes.GetN(); ++node)
        {
            Ptr<Ipv4> ipv4 = m_nodes.Get(node)->GetObject<Ipv4>();
            DynamicCast<HashEcmpRouting>(ipv4->GetRoutingProtocol())->ClearRouteCache();
        }
    }

    void CountDrop(const ns3::Ipv4Header&,
                   ns3::Ptr<const ns3::Packet>,
                   ns3::Ipv4L3Protocol::DropReason reason,
                   ns3::Ptr<ns3::Ipv4>,
                   uint32_t)
    {
        m_linkDownDrops += reason == ns3::Ipv4L3Protocol::DROP_INTERFACE_DOWN;
    }

    uint32_t AddNode(bool isEndpoint)
    {
        m_nodes.Create(1);
        m_isEndpoint.push_back(isEndpoint);
        return m_nodes.GetN() - 1;
    }

    void InstallLink(uint32_t index, const LinkSpec& link)
    {
        using namespace ns3;
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(link.bitsPerSecond)));
        p2p.SetDeviceAttribute("Mtu", UintegerValue(m_mtuBytes));
        p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(link.delayNs)));
        NetDeviceContainer devices = p2p.Install(m_nodes.Get(link.a), m_nodes.Get(link.b));
        m_interfaces.emplace_back();

        // 10.0.0.0 + 4 * index: .1 on side a, .2 on side b, /30.
        uint32_t network = (10U << 24) + (index << 2);
        uint32_t ends[2] = {link.a, link.b};
        for (uint32_t side = 0; side < 2; ++side)
        {
            Ptr<PointToPointNetDevice> device =
                DynamicCast<PointToPointNetDevice>(devices.Get(side));
            m_devices.push_back(device);
            device->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, 1));
            if (m_isEndpoint[ends[side]])
            {
                InstallNicQueueDisc(device);
                m_endpointAddress[ends[side]] = Ipv4Address(network + 1 + side);
            }
            else
            {
                InstallSwitchQueueDisc(device, link);
            }
            Ptr<Ipv4> ipv4 = m_nodes.Get(ends[side])->GetObject<Ipv4>();
            int32_t interface = ipv4->AddInterface(device);
            m_interfaces[index][side] = static_cast<uint32_t>(interface);
            ipv4->AddAddress(interface,
                             Ipv4InterfaceAddress(Ipv4Address(network + 1 + side),
                                                  Ipv4Mask(0xFFFFFFFCU)));
            ipv4->SetMetric(interface, 1);
            ipv4->SetUp(interface);
        }
    }

    void InstallNicQueueDisc(ns3::Ptr<ns3::NetDevice> device)
    {
        ns3::TrafficControlHelper tch;
        NicQueueDisc::GetTypeId(); // registers the name the helper's factory looks up
        tch.SetRootQueueDisc("phantora::NicQueueDisc");
        ns3::QueueDiscContainer installed = tch.Install(device);
        m_nicQueueDiscs.push_back(ns3::DynamicCast<NicQueueDisc>(installed.Get(0)));
    }

    void InstallSwitchQueueDisc(ns3::Ptr<ns3::NetDevice> device, const LinkSpec& link)
    {
        using namespace ns3;
        TrafficControlHelper tch;
        tch.SetRootQueueDisc(
            "ns3::RedQueueDisc",
            "MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, m_switchBufferBytes)),
            "MinTh", DoubleValue(m_ecnThresholdBytes),
            "MaxTh", DoubleValue(m_ecnThresholdBytes),
            "QW", DoubleValue(1.0),
            "Gentle", BooleanValue(false),
            "UseEcn", BooleanValue(true),
            "UseHardDrop", BooleanValue(false),
            "MeanPktSize", UintegerValue(m_mtuBytes),
            "LinkBandwidth", DataRateValue(DataRate(link.bitsPerSecond)),
            "LinkDelay", TimeValue(NanoSeconds(link.delayNs)));
        QueueDiscContainer installed = tch.Install(device);
        m_switchQueueDiscs.push_back(installed.Get(0));
    }

    uint32_t m_mtuBytes;
    uint32_t m_switchBufferBytes;
    uint32_t m_ecnThresholdBytes;
    uint64_t m_ecmpSalt;
    ns3::NodeContainer m_nodes;
    std::vector<bool> m_isEndpoint;
    std::vector<LinkSpec> m_links;
    std::vector<std::array<uint32_t, 2>> m_interfaces; // Ipv4 interface of sides a, b per link
    uint64_t m_linkFailures{0};
    uint64_t m_linkDownDrops{0};
    std::vector<ns3::Ipv4Address> m_endpointAddress;
    std::vector<ns3::Ptr<ns3::PointToPointNetDevice>> m_devices;
    std::vector<ns3::Ptr<NicQueueDisc>> m_nicQueueDiscs;
    std::vector<ns3::Ptr<ns3::QueueDisc>> m_switchQueueDiscs;
};

} // namespace phantora
