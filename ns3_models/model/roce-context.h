// State shared by every NIC and switch of one RoCE fabric: parameters, packet pool, queue
// pairs, the completion log and the first fatal problem (drop, pause watchdog).
#pragma once

#include "helper/simulation-stepper.h"
#include "model/message-log.h"
#include "model/roce-packet.h"

#include "ns3/ptr.h"

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace phantora
{
namespace roce
{

/// Every setting of the fabric; Python fills it from the validated scenario (units in names).
struct RoceParams
{
    // framing
    uint32_t payloadBytes{8956};      // RDMA payload of a full data packet
    uint32_t dataOverheadBytes{82};   // headers + Ethernet framing per data packet
    uint32_t ackBytes{86};            // ack / CNP on the wire
    uint32_t pfcFrameBytes{84};       // PFC frame on the wire
    uint8_t dataPriority{3};          // 1..7
    bool ackHighPriority{true};       // acks in the strict control class (never paused)
    double nicBitsPerSecond{400e9};   // line rate queue pairs start at
    // switch MMU and PFC
    bool pfc{true};
    uint64_t bufferBytes{32u << 20};  // shared buffer per switch
    double pfcAlpha{0.125};           // dynamic threshold at NIC rate, x2 per port-rate doubling
    uint64_t headroomBytes{0};        // per port; 0: from the link (see Switch::AutoHeadroom)
    uint32_t reserveBytes{4096};      // guaranteed per (ingress port, priority)
    uint32_t resumeOffsetBytes{3072}; // XON hysteresis
    double watchdogPs{10e9};          // a pause in force this long fails the run
    // ECN (per egress port, scaled by port rate / NIC rate)
    bool ecn{true};
    uint64_t kminBytes{800000};
    uint64_t kmaxBytes{3200000};
    double pmax{0.2};
    // DCQCN
    bool dcqcn{true};
    double g{1.0 / 256};
    double alphaIntervalPs{1e6};
    double decreaseIntervalPs{4e6};
    double rpTimerPs{900e6};
    uint32_t fastRecoverySteps{1};
    double rateAiBps{50e6};
    double rateHaiBps{100e6};
    double minRateBps{100e6};
    double rateOnFirstCnp{1.0};
    bool clampTargetRate{false};
    double cnpIntervalPs{0}; // NP: at most one CNP per queue pair per interval; 0: every mark
    uint64_t seed{1};
};

/// A queue pair: one sender NIC to one receiver NIC, messages delivered in order.
struct QueuePair
{
    struct Waiting
    {
        uint64_t bytes;
        int64_t startNs;
    };

    struct Expected
    {
        uint64_t id;
        uint64_t endOffset;
    };

    uint32_t srcNode;
    uint32_t dstNode;
    uint64_t hash;    // ECMP key of data packets
    uint64_t ackHash; // ECMP key of acks
    uint64_t windowBytes{0};
    // sender
    uint64_t released{0}; // bytes whose message has started
    uint64_t sent{0};
    uint64_t acked{0};
    std::deque<Waiting> waiting;
    bool releasePending{false};
    bool active{false};
    double rateBps;
    double nextAvailPs{0};
    // DCQCN reaction point
    double targetBps;
    double alpha{1};
    bool seenCnp{false};
    bool alphaCnp{false};
    bool decreaseCnp{false};
    bool decreasePending{false};
    double nextAlphaPs{0};
    double decreaseGridPs{0};
    uint32_t stage{0};
    ns3::EventId rpTimer;
    // receiver (notification point)
    uint64_t received{0};               // bytes received without a gap (what acks carry)
    std::map<uint64_t, uint64_t> ahead; // start -> end of byte ranges received past a gap
    uint64_t expectedTotal{0}; // bytes of all messages announced so far
    std::deque<Expected> expected;
    double lastCnpPs{-1e300};
    // counters
    uint64_t cnps{0};
    uint64_t rateCuts{0};
    double minRateBps;
};

struct RoceContext
{
    RoceParams params;
    PacketPool pool;
    std::vector<QueuePair> qps;
    ns3::Ptr<MessageLog> log;
    std::vector<std::string> nodeNames;
    std::string failure;
    uint64_t drops{0};
    uint64_t dataPackets{0};
    uint64_t ackPackets{0};
    uint64_t reorderedPackets{0}; // data packets that arrived before an earlier one of their QP

    /// Stop the run at this event with `why` (kept: the first problem is the cause).
    void Fail(const std::string& why)
    {
        if (failure.empty())
        {
            failure = why;
        }
        SimulationStepper::RequestAbort();
    }
};

inline uint64_t Mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

} // namespace roce
} // namespace phantora
