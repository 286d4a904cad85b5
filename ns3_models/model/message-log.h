// Completion log shared by all message receivers of one simulation.
//
// Receivers append (message id, end time) in C++ as messages finish; Python drains the log
// once per step (SimulationStepper::RunUntil stops as soon as it grows), so no Python code
// runs per packet or per message inside the event loop.
#pragma once

#include "ns3/nstime.h"
#include "ns3/object.h"
#include "ns3/simulator.h"

#include <cstdint>
#include <vector>

namespace phantora
{

/// One finished message: its id and the instant its last byte reached the receiving app.
struct MessageCompletion
{
    uint64_t id;
    int64_t endNs;
};

class MessageLog : public ns3::Object
{
  public:
    static ns3::TypeId GetTypeId()
    {
        static ns3::TypeId tid = ns3::TypeId("phantora::MessageLog")
                                     .SetParent<ns3::Object>()
                                     .SetGroupName("Phantora")
                                     .AddConstructor<MessageLog>();
        return tid;
    }

    /// Record that message `id` completed now.
    void Record(uint64_t id)
    {
        m_completions.push_back(MessageCompletion{id, ns3::Simulator::Now().GetNanoSeconds()});
    }

    std::size_t GetSize() const
    {
        return m_completions.size();
    }

    const std::vector<MessageCompletion>& GetCompletions() const
    {
        return m_completions;
    }

    /// Forget the completions already handed out (called after each drain).
    void Clear()
    {
        m_completions.clear();
    }

  private:
    std::vector<MessageCompletion> m_completions;
};

} // namespace phantora
