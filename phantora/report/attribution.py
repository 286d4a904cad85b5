"""Step attribution: where each rank's step time went, part by part, summing to the step.

A step is the window between two step ends on the rank's clock, where the script sees a step
end: the end of the first host sync (``torch.cuda.synchronize()``, ``.item()``, an event
wait) after its optimizer step (``torch.optim`` step hooks), or the optimizer step itself when
the rank does not wait for its GPU before the next one. The first step starts at 0 and holds
the script's start-up. A script that never steps an optimizer has one window, the whole run. Every instant of a window gets exactly one
part, the first that holds in this order, so the parts sum to the window:

1. ``compute``: a kernel of the rank runs on any of its streams (communication that runs
   under it is hidden, and costs nothing here);
2. ``communication``: a collective of the rank moves data (every member has reached it) and
   no kernel runs: exposed communication, also split by op and by the tier its flows cross
   (``nvlink`` inside a host, ``nic`` across hosts through one switch, ``fabric`` through
   switch-to-switch links; ``local`` for a collective with no flows);
3. ``pipeline_bubble``: the rank's GPU waits in a send or recv for its peer, nothing else runs;
4. ``waiting``: the rank's GPU waits in a collective for other members to reach it;
5. ``host_bound``: the GPU has nothing to do: the rank's CPU has not launched the next work
   (launch gaps included).

This is the rank's own critical path as its GPU sees it: what the rank was doing, or what
it was waiting for, at each instant. A straggler shows as ``waiting`` on the other ranks.
Mirrored ranks (rank deduplication) run their representative's timeline, so only live ranks
are attributed.
"""

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from statistics import fmean
from typing import Any

from phantora.cluster.topology import LinkKind, Topology
from phantora.collectives import CollectiveOp
from phantora.engine.results import (BlockedSpan, CollectiveRecord, CollectiveSpan, LiveResult,
                                     RankResult)
from phantora.engine.streams import KernelSpan

PARTS = ("compute", "communication", "pipeline_bubble", "waiting", "host_bound")
"""The parts of a step, in precedence order (``summary.json``: ``attribution``)."""
TIERS = ("nvlink", "nic", "fabric", "local")


class _Part(IntEnum):
    """Precedence: the lowest active value names an instant."""

    COMPUTE = 0
    COMMUNICATION = 1
    PIPELINE_BUBBLE = 2
    WAITING = 3
    HOST_BOUND = 4


@dataclass
class StepParts:
    """One rank's step: its window on the rank's clock and the parts that fill it."""

    rank: int
    step: int
    """1-based; step 1 holds the script's start-up."""
    start_ns: int
    end_ns: int
    parts_ns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))
    communication_by_op: dict[str, int] = field(default_factory=dict)
    communication_by_tier: dict[str, int] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "step": self.step, "start_ns": self.start_ns,
                "end_ns": self.end_ns, "duration_ns": self.duration_ns,
                **{f"{part}_ns": ns for part, ns in self.parts_ns.items()},
                "communication_by_op_ns": dict(sorted(self.communication_by_op.items())),
                "communication_by_tier_ns": dict(sorted(self.communication_by_tier.items()))}


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of a rank's timeline that one part fills (the Perfetto track's slices)."""

    rank: int
    start_ns: int
    end_ns: int
    part: str
    collective: CollectiveRecord | None = None
    """The collective behind a communication, bubble or waiting segment."""


def optimizer_steps(ranks: Iterable[RankResult]) -> dict[int, list[int]]:
    """Each rank's optimizer step ends on its clock, from its step hooks."""
    return {rank.rank: [step[0] for step in rank.host_time.steps] for rank in ranks}


def step_ends(optimizer_ns: Sequence[int], blocked: Sequence[BlockedSpan]) -> list[int]:
    """Where the rank's steps end: each optimizer step moved to the end of the first host
    sync the rank waited in after it and before the next (``blocked``: the rank's waits, in
    time order)."""
    ends = []
    starts = [span.start_ns for span in blocked]
    for index, optimizer in enumerate(optimizer_ns):
        following = optimizer_ns[index + 1] if index + 1 < len(optimizer_ns) else None
        first = bisect_left(starts, optimizer)
        if first < len(blocked) and (following is None or starts[first] < following):
            ends.append(blocked[first].end_ns)
        else:
            ends.append(optimizer)
    return ends


def rank_segments(rank: int, kernels: Iterable[KernelSpan], spans: Sequence[CollectiveSpan],
                  end_ns: int) -> list[Segment]:
    """One rank's timeline from 0 to ``end_ns``, from its kernels and collective spans, cut
    into segments of one part each (adjacent segments of the same part and collective
    merged)."""
    events: list[tuple[int, int, int, int]] = []  # (time, +1 start / -1 end, part, span)
    for kernel in kernels:
        if kernel.end_ns > kernel.start_ns:
            events += [(kernel.start_ns, 1, _Part.COMPUTE, -1),
                       (kernel.end_ns, -1, _Part.COMPUTE, -1)]
    for index, span in enumerate(spans):
        moving_from = max(span.ready_ns, span.record.start_ns)
        wait = _Part.PIPELINE_BUBBLE if span.record.op == CollectiveOp.SEND_RECV \
            else _Part.WAITING
        if moving_from > span.ready_ns:
            events += [(span.ready_ns, 1, wait, index), (moving_from, -1, wait, index)]
        if span.end_ns > moving_from:
            events += [(moving_from, 1, _Part.COMMUNICATION, index),
                       (span.end_ns, -1, _Part.COMMUNICATION, index)]
    events.sort(key=lambda event: (event[0], event[1]))  # ends before starts at an instant
    running = 0
    active: list[dict[int, int]] = [defaultdict(int) for _ in range(3)]  # comm, bubble, wait
    segments: list[Segment] = []
    now = 0
    for time_ns, delta, part, index in [*events, (end_ns, 0, _Part.HOST_BOUND, -1)]:
        if time_ns > now:
            _append(segments, _segment(rank, now, time_ns, running, active, spans))
            now = time_ns
        if part == _Part.COMPUTE:
            running += delta
        elif part != _Part.HOST_BOUND:
            counts = active[part - 1]
            counts[index] += delta
            if not counts[index]:
                del counts[index]
    return segments


def _segment(rank: int, start_ns: int, end_ns: int, running: int,
             active: list[dict[int, int]], spans: Sequence[CollectiveSpan]) -> Segment:
    if running:
        return Segment(rank, start_ns, end_ns, "compute")
    for part, counts in zip(PARTS[1:4], active):
        if counts:  # concurrent collectives: the earliest issued one is charged
            return Segment(rank, start_ns, end_ns, part, spans[min(counts)].record)
    return Segment(rank, start_ns, end_ns, "host_bound")


def _append(segments: list[Segment], segment: Segment) -> None:
    last = segments[-1] if segments else None
    if last is not None and last.part == segment.part and last.collective is segment.collective \
            and last.end_ns == segment.start_ns:
        segments[-1] = Segment(last.rank, last.start_ns, segment.end_ns, last.part,
                               last.collective)
    else:
        segments.append(segment)


def collective_tiers(result: LiveResult, topology: Topology) -> dict[Any, str]:
    """The highest tier each collective's flows cross, by collective key."""
    pair_tier: dict[tuple[int, int], int] = {}
    tier_of: dict[Any, int] = {}
    for flow in result.flows:
        pair = (flow.src, flow.dst)
        tier = pair_tier.get(pair)
        if tier is None:
            tier = pair_tier[pair] = _pair_tier(topology, *pair)
        tier_of[flow.key] = max(tier_of.get(flow.key, 0), tier)
    return {key: TIERS[tier] for key, tier in tier_of.items()}


def _pair_tier(topology: Topology, src: int, dst: int) -> int:
    if topology.same_host(src, dst):
        return 0
    path = topology.fabric_path(src, dst, flow_key=0)  # equal-cost paths cross the same tiers
    return 2 if any(topology.links[link].kind is LinkKind.FABRIC for link in path) else 1


def attribute_steps(segments: Sequence[Segment], ends: Sequence[int],
                    tiers: Mapping[Any, str]) -> list[StepParts]:
    """Cut one rank's segments into its step windows (``ends``: its step ends; none: the
    whole timeline is one window)."""
    if not segments:
        return []
    rank = segments[0].rank
    bounds = [0, *ends] if ends else [0, segments[-1].end_ns]
    steps = [StepParts(rank, i, bounds[i - 1], bounds[i]) for i in range(1, len(bounds))
             if bounds[i] > bounds[i - 1]]
    cursor = 0
    for step in steps:
        while cursor < len(segments) and segments[cursor].end_ns <= step.start_ns:
            cursor += 1
        index = cursor
        while index < len(segments) and segments[index].start_ns < step.end_ns:
            segment = segments[index]
            ns = min(segment.end_ns, step.end_ns) - max(segment.start_ns, step.start_ns)
            step.parts_ns[segment.part] += ns
            if segment.part == "communication" and segment.collective is not None:
                record = segment.collective
                by_op, by_tier = step.communication_by_op, step.communication_by_tier
                by_op[record.op] = by_op.get(record.op, 0) + ns
                tier = tiers.get(record.key, "local")
                by_tier[tier] = by_tier.get(tier, 0) + ns
            index += 1
        unfilled = step.duration_ns - sum(step.parts_ns.values())
        step.parts_ns["host_bound"] += unfilled  # past the rank's last GPU activity
    return steps


@dataclass
class Attribution:
    """Every live rank's steps and its timeline segments."""

    steps: list[StepParts]
    segments: list[Segment]

    def steady(self) -> list[StepParts]:
        """The steady steps: all but each rank's start-up step, when it has others."""
        return [s for s in self.steps if s.step > 1] or self.steps

    def to_dict(self) -> dict[str, Any]:
        """``summary.json``'s ``attribution``: the mean steady step over ranks (``steady``),
        each live rank's (``steady_by_rank``) and every step of every live rank (``steps``)."""
        steady = self.steady()
        ranks = sorted({s.rank for s in steady})
        return {"parts": list(PARTS), "steady": _mean_step(steady),
                "steady_by_rank": [_mean_step([s for s in steady if s.rank == rank])
                                   for rank in ranks],
                "steps": [step.to_dict() for step in self.steps]}


def _mean_step(steps: Sequence[StepParts]) -> dict[str, Any]:
    """The mean of ``steps``: parts in ns and as shares of the step."""
    if not steps:
        return {}
    duration = fmean(s.duration_ns for s in steps)
    parts = {part: fmean(s.parts_ns[part] for s in steps) for part in PARTS}
    by_op = _mean_of(s.communication_by_op for s in steps)
    by_tier = _mean_of(s.communication_by_tier for s in steps)
    return {
        "steps": sorted({s.step for s in steps}),
        "ranks": sorted({s.rank for s in steps}),
        "step_ns": round(duration),
        **{f"{part}_ns": round(ns) for part, ns in parts.items()},
        "share": {part: round(ns / duration, 4) if duration else 0.0
                  for part, ns in parts.items()},
        "communication_by_op_ns": {op: round(ns) for op, ns in by_op.items()},
        "communication_by_tier_ns": {tier: round(ns) for tier, ns in by_tier.items()},
    }


def _mean_of(tallies: Iterable[dict[str, int]]) -> dict[str, float]:
    tallies = list(tallies)
    keys = sorted({key for tally in tallies for key in tally})
    return {key: fmean(tally.get(key, 0) for tally in tallies) for key in keys}


def attribute(result: LiveResult, topology: Topology,
              optimizer_ns: Mapping[int, Sequence[int]] | None = None) -> Attribution:
    """Attribute every live rank's steps (``optimizer_ns``: each rank's optimizer steps on
    its clock; default its step hooks')."""
    optimizer_ns = optimizer_steps(result.ranks) if optimizer_ns is None else optimizer_ns
    live = result.classes.live_ranks() if result.classes is not None else \
        [rank.rank for rank in result.ranks]
    kernels: dict[int, list[KernelSpan]] = defaultdict(list)
    for kernel in result.kernels:
        kernels[kernel.rank].append(kernel)
    spans: dict[int, list[CollectiveSpan]] = defaultdict(list)
    for span in result.collective_spans:
        spans[span.rank].append(span)
    blocked: dict[int, list[BlockedSpan]] = defaultdict(list)
    for wait in result.blocked:  # in (rank, start) order
        blocked[wait.rank].append(wait)
    tiers = collective_tiers(result, topology)
    steps: list[StepParts] = []
    segments: list[Segment] = []
    for rank in live:
        info = result.ranks[rank]
        rank_parts = rank_segments(rank, kernels[rank], spans[rank],
                                   max(info.clock_ns, info.gpu_end_ns))
        segments += rank_parts
        ends = step_ends(optimizer_ns.get(rank, []), blocked[rank])
        steps += attribute_steps(rank_parts, ends, tiers)
    return Attribution(steps, segments)
