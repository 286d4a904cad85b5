// Event-by-event stepping of the ns-3 default simulator, for co-simulation.
//
// ns-3.44 has no public "time of the next event" or "run one event". Both live in
// DefaultSimulatorImpl as private members (m_events, ProcessOneEvent); the standard
// explicit-instantiation access rule ([temp.explicit]: access checks do not apply to the
// names in an explicit instantiation) lets us name them without patching ns-3.
#pragma once

#include "model/message-log.h"

#include "ns3/default-simulator-impl.h"
#include "ns3/nstime.h"
#include "ns3/scheduler.h"
#include "ns3/simulator.h"

#include <cstdint>
#include <stdexcept>

namespace phantora
{
namespace stepper_access
{

template <typename Tag, typename Tag::type Member>
struct Grant
{
    friend typename Tag::type Get(Tag)
    {
        return Member;
    }
};

struct EventsTag
{
    typedef ns3::Ptr<ns3::Scheduler> ns3::DefaultSimulatorImpl::*type;
    friend type Get(EventsTag);
};

struct ProcessOneEventTag
{
    typedef void (ns3::DefaultSimulatorImpl::*type)();
    friend type Get(ProcessOneEventTag);
};

template struct Grant<EventsTag, &ns3::DefaultSimulatorImpl::m_events>;
template struct Grant<ProcessOneEventTag, &ns3::DefaultSimulatorImpl::ProcessOneEvent>;

} // namespace stepper_access

class SimulationStepper
{
  public:
    /// Call once per simulation, before RunUntil: it processes the events already due now.
    /// Simulator::Run() is what turns off Time's registry of live Time objects (kept until
    /// the resolution is final); without one Run every Time costs a std::set insert/erase.
    static void Start()
    {
        ns3::Simulator::Stop(ns3::Time(0));
        ns3::Simulator::Run();
    }

    /// Make the RunUntil in progress return after the current event (a model found a fatal
    /// problem and recorded it where Python reads it). Cleared by the next RunUntil.
    static void RequestAbort()
    {
        AbortFlag() = true;
    }

    /// Whether the last RunUntil stopped on RequestAbort.
    static bool Aborted()
    {
        return AbortFlag();
    }

    /// Time of the next pending event in ns, or -1 when no event is pending.
    static int64_t NextEventNs()
    {
        ns3::Ptr<ns3::Scheduler>& events = Events(Impl());
        if (events->IsEmpty())
        {
            return -1;
        }
        return ns3::TimeStep(events->PeekNext().key.m_ts).GetNanoSeconds();
    }

    /// Process events one at a time up to `limitNs` (inclusive), stopping early at the first
    /// instant at which `log` grows (the other events of that instant are processed too, so
    /// every message finishing then is in the log). The clock is left exactly at that instant,
    /// or at `limitNs` if nothing completed, even when no event falls there.
    /// Returns the number of events processed.
    static uint64_t RunUntil(int64_t limitNs, ns3::Ptr<const MessageLog> log)
    {
        using namespace ns3;
        DefaultSimulatorImpl* impl = Impl();
        Ptr<Scheduler>& events = Events(impl);
        const uint64_t limit = NanoSeconds(limitNs).GetTimeStep();
        const std::size_t sizeBefore = log->GetSize();
        uint64_t processed = 0;
        AbortFlag() = false;
        while (!events->IsEmpty() && !AbortFlag())
        {
            uint64_t next = events->PeekNext().key.m_ts;
            if (next > limit ||
                (log->GetSize() > sizeBefore &&
                 next > static_cast<uint64_t>(Simulator::Now().GetTimeStep())))
            {
                break;
            }
            (impl->*Get(stepper_access::ProcessOneEventTag()))();
            ++processed;
        }
        Time target = NanoSeconds(limitNs);
        if (log->GetSize() == sizeBefore && !AbortFlag() && Simulator::Now() < target)
        {
            // A Stop event at the target is the only event left at or before it.
            Simulator::Stop(target - Simulator::Now());
            Simulator::Run();
        }
        return processed;
    }

  private:
    static bool& AbortFlag()
    {
        static bool abort = false;
        return abort;
    }

    static ns3::DefaultSimulatorImpl* Impl()
    {
        auto* impl = dynamic_cast<ns3::DefaultSimulatorImpl*>(
            ns3::PeekPointer(ns3::Simulator::GetImplementation()));
        if (impl == nullptr)
        {
            throw std::logic_error(
                "SimulationStepper needs ns3::DefaultSimulatorImpl (SimulatorImplementationType)");
        }
        return impl;
    }

    static ns3::Ptr<ns3::Scheduler>& Events(ns3::DefaultSimulatorImpl* impl)
    {
        return impl->*Get(stepper_access::EventsTag());
    }
};

} // namespace phantora
