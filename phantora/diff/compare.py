"""Real per-rank traces against a simulated run of the same script, step by step: GPU time by
kernel family, collectives by op and size, GPU idle and exposed communication, and the buckets
that diverge most (``docs/diff.md`` defines every number).

Each real step (``ProfilerStep#N``, or in a whole-run trace the window from one optimizer step's
end to the next's; either covers training step N + 1) is compared with the simulated step of
the same index, or with the mean of the simulated steady steps (all but the first) where that
step is missing or asked for. Beside each, an estimate of what the profiler itself added to the
real step's host time. A trace of another run is refused: another rank count, no steps, or
matrix-product shapes the simulated run mostly lacks.
"""

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from hwmodel.errors import ProfileError
from phantora.diff.simulated import SimulatedRun
from phantora.profiles.activity import (Activity, CollectiveKey, matmul_flops, matmul_operands,
                                        real_activities)
from phantora.profiles.families import FAMILIES
from phantora.profiles.kineto import PROFILER_NS_PER_EVENT, RECORD_HINT, RankTrace

SCHEMA_VERSION = 1
MIN_GEMM_OVERLAP = 0.5
"""Share of the real traces' distinct matrix-product shapes (op, FLOPs) the simulated run must
also have run; below it the trace is of another script or other shapes."""
ROUTED_SHAPES = 3
"""Distinct sizes of one dimension of otherwise equal products from which their shapes are taken
to follow the data (a learned router's token counts), not the script's configuration."""
TOP_DIVERGENCES = 10
IDLE_BUCKET = "GPU idle"
HOST_BOUND_IDLE_SHARE = 0.5
"""A real step whose GPU idles for at least this share of it is host-bound under the
profiler: its length is mostly host time, which the profiler lengthens."""

Against = Literal["same", "steady"]


@dataclass(frozen=True)
class CollectiveStats:
    """Collectives of one (op, bytes) in a step: how many, their time (waiting for the other
    ranks included) and their transfer time (None where unknown)."""

    count: float
    total_ns: float
    transfer_ns: float | None

    def plus(self, activity: Activity) -> "CollectiveStats":
        transfer = (None if self.transfer_ns is None or activity.transfer_ns is None
                    else self.transfer_ns + activity.transfer_ns)
        return CollectiveStats(self.count + 1, self.total_ns + activity.duration_ns, transfer)


NO_COLLECTIVES = CollectiveStats(0.0, 0.0, 0.0)


@dataclass
class StepMetrics:
    """One step of one rank (or a mean of several): times in ns."""

    step_ns: float
    gpu_idle_ns: float
    exposed_communication_ns: float
    busy_by_family_ns: dict[str, float] = field(default_factory=dict)
    collectives: dict[CollectiveKey, CollectiveStats] = field(default_factory=dict)
    buckets_ns: dict[str, float] = field(default_factory=dict)
    families_of: dict[str, str] = field(default_factory=dict)
    """Bucket -> its family."""

    def as_json(self) -> dict[str, Any]:
        return {"step_ns": round(self.step_ns), "gpu_idle_ns": round(self.gpu_idle_ns),
                "exposed_communication_ns": round(self.exposed_communication_ns),
                "busy_by_family_ns": {f: round(ns) for f, ns in self.busy_by_family_ns.items()},
                "collectives": [{"op": op, "bytes": nbytes, "count": round(stats.count, 3),
                                 "total_ns": round(stats.total_ns),
                                 "transfer_ns": _round(stats.transfer_ns)}
                                for (op, nbytes), stats in sorted(
                                    self.collectives.items(),
                                    key=lambda item: _collective_order(item[0]))]}


@dataclass(frozen=True)
class ProfilerCost:
    """What the profiler itself added to a real step (or the mean of several): the host events
    it recorded and the host time they cost, as far as it lengthened the step."""

    cpu_ops: float
    runtime_calls: float
    inflation_ns: float
    """Events x :data:`PROFILER_NS_PER_EVENT`, at most the step's GPU idle: host time lengthens
    a step only where the GPU waits for the host."""
    host_bound: bool
    """GPU idle is at least :data:`HOST_BOUND_IDLE_SHARE` of the step."""

    def as_json(self) -> dict[str, Any]:
        return {"cpu_ops": round(self.cpu_ops, 1), "runtime_calls": round(self.runtime_calls, 1),
                "inflation_ns": round(self.inflation_ns), "host_bound": self.host_bound}


def profiler_cost(cpu_ops: float, runtime_calls: float, real: StepMetrics) -> ProfilerCost:
    """The profiler's estimated cost in a real step that recorded these host events."""
    return ProfilerCost(
        cpu_ops, runtime_calls,
        min((cpu_ops + runtime_calls) * PROFILER_NS_PER_EVENT, real.gpu_idle_ns),
        real.gpu_idle_ns >= HOST_BOUND_IDLE_SHARE * real.step_ns)


@dataclass
class StepComparison:
    rank: int
    sim_rank: int
    """The live rank whose simulated timeline the rank ran (itself unless mirrored)."""
    real_step: int
    sim_steps: list[int]
    match: str
    """``same step`` or ``mean of steady steps``."""
    real: StepMetrics
    sim: StepMetrics
    profiler: ProfilerCost


def measure_step(activities: Sequence[Activity], start_ns: int, end_ns: int) -> StepMetrics:
    """A step's metrics: what was launched in ``[start, end)`` by family, bucket and
    collective; what the GPU did inside the window (every activity clipped to it) for idle and
    exposed communication."""
    busy: dict[str, float] = defaultdict(float)
    buckets: dict[str, float] = defaultdict(float)
    families: dict[str, str] = {}
    collectives: dict[CollectiveKey, CollectiveStats] = {}
    for a in activities:
        if a.launch_ns is None or not start_ns <= a.launch_ns < end_ns:
            continue
        busy[a.family] += a.duration_ns
        buckets[a.bucket] += a.duration_ns
        families[a.bucket] = a.family
        if a.collective is not None:
            collectives[a.collective] = collectives.get(a.collective, NO_COLLECTIVES).plus(a)
    inside = [(max(a.start_ns, start_ns), min(a.end_ns, end_ns), a.collective is None)
              for a in activities if a.start_ns < end_ns and a.end_ns > start_ns]
    covered = _union_ns((s, e) for s, e, _ in inside)
    computing = _union_ns((s, e) for s, e, compute in inside if compute)
    return StepMetrics(end_ns - start_ns, end_ns - start_ns - covered, covered - computing,
                       dict(busy), collectives, dict(buckets), families)


def _union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def mean_metrics(steps: Sequence[StepMetrics]) -> StepMetrics:
    """Every number averaged over ``steps`` (a bucket missing from a step counts 0 there)."""
    n = len(steps)

    def mean(maps: Iterable[dict[Any, float]]) -> dict[Any, float]:
        sums: dict[Any, float] = defaultdict(float)
        for values in maps:
            for key, value in values.items():
                sums[key] += value / n
        return dict(sums)

    counts = mean({k: c.count for k, c in s.collectives.items()} for s in steps)
    totals = mean({k: c.total_ns for k, c in s.collectives.items()} for s in steps)
    transfers = mean({k: c.transfer_ns or 0.0 for k, c in s.collectives.items()} for s in steps)
    unknown = {k for s in steps for k, c in s.collectives.items() if c.transfer_ns is None}
    return StepMetrics(
        sum(s.step_ns for s in steps) / n, sum(s.gpu_idle_ns for s in steps) / n,
        sum(s.exposed_communication_ns for s in steps) / n,
        mean(s.busy_by_family_ns for s in steps),
        {k: CollectiveStats(counts[k], totals[k], None if k in unknown else transfers[k])
         for k in counts},
        mean(s.buckets_ns for s in steps),
        {b: f for s in steps for b, f in s.families_of.items()})


@dataclass
class Diff:
    traces: Sequence[RankTrace]
    ranks: list[int]
    """Each trace's rank."""
    run: SimulatedRun
    against: Against
    steps: list[StepComparison]

    def mean(self) -> tuple[StepMetrics, StepMetrics]:
        """Real and simulated metrics, each the mean over every compared step and rank."""
        return (mean_metrics([c.real for c in self.steps]),
                mean_metrics([c.sim for c in self.steps]))

    def mean_profiler_cost(self) -> ProfilerCost:
        """The profiler's cost in the mean real step."""
        n = len(self.steps)
        return profiler_cost(sum(c.profiler.cpu_ops for c in self.steps) / n,
                             sum(c.profiler.runtime_calls for c in self.steps) / n,
                             self.mean()[0])

    def document(self) -> dict[str, Any]:
        """``diff.json``: every compared step, and their mean (``docs/diff.md``)."""
        real, sim = self.mean()
        return {
            "schema_version": SCHEMA_VERSION, "run_dir": str(self.run.path),
            "world_size": self.run.world_size, "against": self.against,
            "traces": [{"path": str(t.path), "rank": rank, "device": t.device_name,
                        "step_cut": t.step_cut, "profiled_steps": t.step_numbers}
                       for t, rank in zip(self.traces, self.ranks)],
            "steps": [{"rank": c.rank, "sim_rank": c.sim_rank, "real_step": c.real_step,
                       "training_step": c.real_step + 1, "sim_steps": c.sim_steps,
                       "match": c.match, **_side_by_side(c.real, c.sim),
                       "profiler": c.profiler.as_json(), "real": c.real.as_json(),
                       "sim": c.sim.as_json(),
                       "divergences": divergences(c.real, c.sim)} for c in self.steps],
            "mean": {**_side_by_side(real, sim),
                     "profiler": self.mean_profiler_cost().as_json(),
                     "families": family_rows(real, sim),
                     "collectives": collective_rows(real, sim),
                     "divergences": divergences(real, sim)},
        }


def compare(traces: Sequence[RankTrace], run: SimulatedRun, against: Against = "same") -> Diff:
    """Every profiled step of every trace against the simulated run; :class:`ProfileError`
    where the traces are not of this run."""
    ranks = check_traces(traces, run)
    per_rank = with_transfers([real_activities(trace, run.op_names) for trace in traces])
    comparisons = []
    for trace, rank, real in zip(traces, ranks, per_rank):
        sim_rank = run.live_rank(rank)
        sim_steps = run.steps.get(sim_rank, [])
        if not sim_steps:
            raise ProfileError(f"{run.path}: no step of rank {sim_rank} in the attribution")
        for number, (start, end) in zip(trace.step_numbers, trace.steps):
            chosen, match = _sim_steps(sim_steps, number + 1, against)
            sim = mean_metrics([measure_step(run.activities[sim_rank], s, e)
                                for _, s, e in chosen])
            measured = measure_step(real, start, end)
            comparisons.append(StepComparison(
                rank, sim_rank, number, [step for step, _, _ in chosen], match, measured, sim,
                profiler_cost(*trace.host_events(start, end), measured)))
    return Diff(traces, ranks, run, against, comparisons)


def with_transfers(per_rank: Sequence[list[Activity]]) -> list[list[Activity]]:
    """Each real collective with its transfer time: the shortest duration of its instance over
    the traced ranks (the k-th collective of that op and size on each rank, launched in the
    trace). The last rank to arrive waits for none, so with every rank traced that is the
    transfer; with fewer, it still holds some waiting; with one trace it is unknown."""
    if len(per_rank) < 2:
        return list(per_rank)
    instances: list[list[tuple[CollectiveKey, int]]] = []
    shortest: dict[tuple[CollectiveKey, int], int] = {}
    for activities in per_rank:
        seen: dict[CollectiveKey, int] = defaultdict(int)
        keys = []
        for a in activities:
            if a.collective is None or a.launch_ns is None:
                keys.append(None)
                continue
            key = (a.collective, seen[a.collective])
            seen[a.collective] += 1
            shortest[key] = min(shortest.get(key, a.duration_ns), a.duration_ns)
            keys.append(key)
        instances.append(keys)
    return [[a if key is None else replace(a, transfer_ns=shortest[key])
             for a, key in zip(activities, keys)]
            for activities, keys in zip(per_rank, instances)]


def _sim_steps(steps: list[tuple[int, int, int]], wanted: int,
               against: Against) -> tuple[list[tuple[int, int, int]], str]:
    """The simulated step(s) a real one is compared with: the same training step (not the
    first, which holds start-up), else the mean of the steady steps."""
    same = [s for s in steps if s[0] == wanted and wanted > 1]
    if against == "same" and same:
        return same, "same step"
    steady = steps[1:] or steps
    return steady, "mean of steady steps"


def check_traces(traces: Sequence[RankTrace], run: SimulatedRun) -> list[int]:
    """Each trace's rank (its ``distributedInfo``, else its place in the list), once every
    trace is checked to be of the simulated run."""
    ranks = []
    for index, trace in enumerate(traces):
        if trace.world_size is not None and trace.world_size != run.world_size:
            raise ProfileError(f"{trace.path}: a trace of {trace.world_size} ranks, the run "
                               f"{run.path} has {run.world_size}: not the same job")
        if trace.world_size is None and run.world_size > 1:
            raise ProfileError(f"{trace.path}: a single-process trace (no distributedInfo), "
                               f"the run {run.path} has {run.world_size} ranks")
        rank = index if trace.rank is None else trace.rank
        if rank in ranks or not 0 <= rank < run.world_size:
            problem = "given twice" if rank in ranks else "not in the run"
            raise ProfileError(f"{trace.path}: rank {rank} is {problem} (the run has ranks "
                               f"0..{run.world_size - 1})")
        if not trace.steps:
            raise ProfileError(f"{trace.path}: no ProfilerStep#N ranges and fewer than two "
                               "Optimizer.step#<class>.step ranges, so no step to compare: "
                               "profile at least two steps of a torch.optim optimizer, or call "
                               f"prof.step() once per training step; {RECORD_HINT}")
        ranks.append(rank)
    _check_shapes(traces, run)
    return ranks


def _check_shapes(traces: Sequence[RankTrace], run: SimulatedRun) -> None:
    """Refuse traces whose matrix products mostly have shapes the simulated run never ran."""
    if not run.gemm_keys:
        return
    examples: dict[tuple[str, int], tuple[Any, ...]] = {}
    for trace in traces:
        for kernel in trace.kernels:
            flops = matmul_flops(kernel.op) if kernel.op else None
            if kernel.op and flops:
                examples.setdefault((kernel.op.name, flops), matmul_operands(kernel.op) or ())
    if not examples:
        raise ProfileError(f"{traces[0].path}: no matrix product with recorded shapes, the run "
                           f"{run.path} has {len(run.gemm_keys)}: recorded without "
                           f"record_shapes=True, or another script; {RECORD_HINT}")
    routed = _token_routed(examples)
    checked = [key for key in examples if key not in routed] or list(examples)
    missing = [key for key in checked if key not in run.gemm_keys]
    share = 1 - len(missing) / len(checked)
    if share < MIN_GEMM_OVERLAP:
        shown = "; ".join(f"{op} {' x '.join(map(str, examples[(op, flops)]))}"
                          for op, flops in missing[:3])
        raise ProfileError(
            f"{traces[0].path}: only {share:.0%} of the traces' {len(checked)} matrix-product "
            f"shapes occur in the run {run.path} (at least {MIN_GEMM_OVERLAP:.0%} needed): "
            f"another script, model or batch size; not simulated, e.g. {shown}")


def _token_routed(examples: dict[tuple[str, int], tuple[Any, ...]]) -> set[tuple[str, int]]:
    """Products whose shapes depend on the data: the same operands but for one dimension (and
    its copies: a contraction dimension appears in both operands) that takes at least
    :data:`ROUTED_SHAPES` values, as the token count of each expert of a learned MoE router
    does. Their shapes follow the routing, which a simulation draws its own way, so the shape
    check leaves them out."""
    values: dict[tuple[Any, ...], set[int]] = {}
    signatures: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    for key, operands in examples.items():
        dims = tuple(d for operand in operands for d in operand)
        for position, value in enumerate(dims):
            masked = tuple(None if d == value else d for d in dims)
            signature = (key[0], position, masked)
            values.setdefault(signature, set()).add(value)
            signatures.setdefault(key, []).append(signature)
    return {key for key, found in signatures.items()
            if any(len(values[signature]) >= ROUTED_SHAPES for signature in found)}


def divergences(real: StepMetrics, sim: StepMetrics,
                top: int = TOP_DIVERGENCES) -> list[dict[str, Any]]:
    """The buckets (kernel op and shape, collective op and size, GPU idle) whose time differs
    most, simulated minus real, each with its share of the step's error (sim - real step)."""
    error = sim.step_ns - real.step_ns
    rows = []
    labels = {**real.families_of, **sim.families_of}
    for bucket in sorted(set(real.buckets_ns) | set(sim.buckets_ns) | {IDLE_BUCKET}):
        real_ns, sim_ns = (m.gpu_idle_ns if bucket == IDLE_BUCKET
                           else m.buckets_ns.get(bucket, 0.0) for m in (real, sim))
        rows.append({"bucket": bucket, "family": labels.get(bucket, "idle"),
                     "real_ns": round(real_ns), "sim_ns": round(sim_ns),
                     "divergence_ns": round(sim_ns - real_ns),
                     "share_of_error": round((sim_ns - real_ns) / error, 4) if error else None})
    rows.sort(key=lambda row: -abs(row["divergence_ns"]))
    return rows[:top]


def _side_by_side(real: StepMetrics, sim: StepMetrics) -> dict[str, Any]:
    error = sim.step_ns - real.step_ns
    return {"real_step_ns": round(real.step_ns), "sim_step_ns": round(sim.step_ns),
            "error_ns": round(error),
            "error_pct": round(100 * error / real.step_ns, 2) if real.step_ns else None,
            "gpu_idle_ns": {"real": round(real.gpu_idle_ns), "sim": round(sim.gpu_idle_ns)},
            "exposed_communication_ns": {"real": round(real.exposed_communication_ns),
                                         "sim": round(sim.exposed_communication_ns)}}


def family_rows(real: StepMetrics, sim: StepMetrics) -> list[dict[str, Any]]:
    """GPU time launched in the step by family, real and simulated (families neither has are
    left out)."""
    return [{"family": family, "real_ns": round(real.busy_by_family_ns.get(family, 0.0)),
             "sim_ns": round(sim.busy_by_family_ns.get(family, 0.0))}
            for family in FAMILIES
            if family in real.busy_by_family_ns or family in sim.busy_by_family_ns]


def collective_rows(real: StepMetrics, sim: StepMetrics) -> list[dict[str, Any]]:
    """Per (op, bytes): count and time per step, real and simulated."""
    rows = []
    for key in sorted(set(real.collectives) | set(sim.collectives), key=_collective_order):
        row: dict[str, Any] = {"op": key[0], "bytes": key[1]}
        for side, metrics in (("real", real), ("sim", sim)):
            stats = metrics.collectives.get(key, NO_COLLECTIVES)
            row |= {f"{side}_count": round(stats.count, 3),
                    f"{side}_total_ns": round(stats.total_ns),
                    f"{side}_mean_ns": _round(stats.total_ns / stats.count) if stats.count else None,
                    f"{side}_mean_transfer_ns": (_round(stats.transfer_ns / stats.count)
                                                 if stats.count and stats.transfer_ns is not None
                                                 else None)}
        rows.append(row)
    return rows


def _round(ns: float | None) -> int | None:
    return None if ns is None else round(ns)


def _collective_order(key: CollectiveKey) -> tuple[str, int]:
    return key[0], -1 if key[1] is None else key[1]


def write_diff(document: dict[str, Any], out_dir: Path) -> Path:
    """``out_dir/diff.json``; its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "diff.json"
    path.write_text(json.dumps(document, indent=1) + "\n")
    return path
