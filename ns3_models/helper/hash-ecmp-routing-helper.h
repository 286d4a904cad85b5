// Installs HashEcmpRouting (per-flow ECMP over global routes) instead of Ipv4GlobalRouting.
#pragma once

#include "model/hash-ecmp-routing.h"

#include "ns3/global-router-interface.h"
#include "ns3/ipv4-global-routing-helper.h"
#include "ns3/node.h"
#include "ns3/uinteger.h"

#include <cstdint>

namespace phantora
{

class HashEcmpRoutingHelper : public ns3::Ipv4GlobalRoutingHelper
{
  public:
    explicit HashEcmpRoutingHelper(uint64_t salt = 0)
        : m_salt(salt)
    {
    }

    HashEcmpRoutingHelper(const HashEcmpRoutingHelper& other) = default;

    HashEcmpRoutingHelper* Copy() const override
    {
        return new HashEcmpRoutingHelper(*this);
    }

    /// Same wiring as Ipv4GlobalRoutingHelper::Create, with our routing protocol.
    ns3::Ptr<ns3::Ipv4RoutingProtocol> Create(ns3::Ptr<ns3::Node> node) const override
    {
        using namespace ns3;
        Ptr<GlobalRouter> router = CreateObject<GlobalRouter>();
        node->AggregateObject(router);
        Ptr<HashEcmpRouting> routing = CreateObject<HashEcmpRouting>();
        routing->SetAttribute("Salt", UintegerValue(m_salt));
        router->SetRoutingProtocol(routing);
        return routing;
    }

  private:
    uint64_t m_salt;
};

} // namespace phantora
