"""A host profile (``cluster.host``) fitted from the CPU side of real PyTorch profiler traces:
what ``phantora-ns3 calibrate --host-out FILE`` builds beside the kernel table.

A trace times the host's own calls on the host that ran the script, so it measures the
mechanisms a microbenchmark would (``phantora-ns3 host-profile``) where it can tell them apart:

* ``families_ns``: per op family (``hwmodel.measured.host_profile.family_of``), the median over
  leaf ops (an op range enclosing no other op: ``aten::mm``, ``aten::copy_``, the ops the rank
  side dispatches) of its range less :data:`PROFILER_NS_PER_EVENT` for each runtime call inside
  it (the launch). An op that launches nothing is a ``view``. Ops that wait on the GPU inside
  (``.item()``'s ``cudaStreamSynchronize``) are left out, and so are tensor-list ops (the
  trace records no list lengths, so their cost per tensor cannot be told from their base).
* ``sync_ns``: the runtime calls themselves: ``cudaEventQuery`` (``query``) and
  ``cudaEventRecord`` (``record_event``) always; ``cudaDeviceSynchronize``,
  ``cudaStreamSynchronize`` and ``cudaEventSynchronize`` (``device``, ``stream``, ``event``)
  only where every kernel launched before the call had ended when it began, so the call did
  not wait.

A mechanism needs :data:`MIN_CALLS` calls, and the profiler's estimated share of its median may
be at most :data:`MAX_CORRECTION_SHARE` (the estimate is good to a factor of 2 to 3); else it is
left to the reference, with the reason in the profile's provenance. Left to the reference
always: the autograd engine's node and record, DTensor's dispatch, c10d's one-rank call path
and the Python weights (a trace counts no Python lines or calls). The launch calls and the gaps
between top-level ops (the script's Python, the ops' Python bindings and the profiler's own
record of each op) are reported in the provenance, not fitted: the table has no launch row (a
launch is part of each family's cost) and no line counts to divide the gaps by.

NB: an op's range opens after the Python binding parsed its arguments (about a microsecond),
which the microbenchmarks' families include: a fitted family is low by about that much.

A trace holds no host-speed probe: the profile's ``probe_ns`` is its reference's, so the Python
weights are the reference's. The fitted families' median ratio to the reference's is in the
provenance (``families_ratio``) but not taken for the host's speed: the traces record neither
the host's speed nor the profiler's true cost, and the two cannot be told apart (on the stored
eager H100 traces the fitted families come out a median 1.2x (in place) to 2.6x (matrix
products) an H100 host's unprofiled microbenchmarks; ``docs/calibrate.md``).
"""

import statistics
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hwmodel.measured.host_profile import (HostProfile, bundled, family_of,
                                               reference_families_ns)
from hwmodel.measured.host_references import references
from hwmodel.errors import ProfileError
from phantora.profiles.kineto import PROFILER_NS_PER_EVENT, RECORD_HINT, HostOp, RankTrace

MIN_CALLS = 5
"""Calls a mechanism needs in the traces to be fitted from them."""
MAX_CORRECTION_SHARE = 0.5
"""The largest share of a mechanism's median the profiler's estimated cost may be."""
SYNC_RUNTIME = {"cudaDeviceSynchronize": "device", "cudaStreamSynchronize": "stream",
                "cudaEventSynchronize": "event", "cudaEventQuery": "query",
                "cudaEventRecord": "record_event", "cudaEventRecordWithFlags": "record_event"}
"""Runtime calls -> the ``sync_ns`` row they measure."""
WAITING_SYNC = frozenset({"device", "stream", "event"})
"""Rows whose calls wait for the GPU: timed only where it had nothing left to run."""
LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch")
WORK_PREFIXES = (*LAUNCH_PREFIXES, "cudaMemsetAsync", "cudaMemcpyAsync", "cuMemsetD")
"""Runtime calls that give the GPU work: an op making one is not a ``view``."""
GAP_LIMIT_NS = 1_000_000
"""Gaps between top-level ops longer than this (data loading, logging, a wait) are not the
Python between two ops; the reported gaps leave them out."""


@dataclass(frozen=True)
class Fitted:
    """One mechanism's fit: the calls it came from and the profiler's share taken off."""

    calls: int
    raw_ns: float
    """The median of the calls' recorded durations."""
    ns: float
    """The median of the durations less the profiler's estimated cost inside each."""

    def document(self) -> dict[str, Any]:
        return {"calls": self.calls, "median_recorded_ns": round(self.raw_ns),
                "profiler_ns": round(self.raw_ns - self.ns), "ns": round(self.ns)}


def fit_host_profile(traces: Sequence[RankTrace], name: str, reference: str) -> HostProfile:
    """The host profile ``name`` fitted from ``traces``' CPU side (see the module doc), its
    other costs from ``reference``; :class:`ProfileError` naming the traces where they recorded
    no CPU ops."""
    bundled(reference)  # a known reference, or a clear error
    if not any(trace.leaf_ops for trace in traces):
        raise ProfileError(f"{', '.join(str(t.path) for t in traces)}: no CPU ops recorded "
                           "(ProfilerActivity.CPU missing), so no host cost to fit; "
                           f"{RECORD_HINT}")
    left_out: dict[str, str] = {}
    families = _keep("families_ns", _family_samples(traces), left_out)
    sync = _keep("sync_ns", _sync_samples(traces), left_out)
    left_out.update(_ALWAYS_LEFT_OUT)
    reference_ns = reference_families_ns(reference)
    ratio = (statistics.median(fit.ns / reference_ns[family]
                               for family, fit in families.items()) if families else 1.0)
    measured: dict[str, Any] = {}
    if families:
        measured["families_ns"] = {family: round(fit.ns) for family, fit in families.items()}
    if sync:
        measured["sync_ns"] = {row: round(fit.ns) for row, fit in sync.items()}
    probe = dict(references().hosts[reference].components_ns)
    provenance = {
        "source": "phantora-ns3 calibrate --host-out: the CPU side of profiler traces",
        "traces": [str(trace.path) for trace in traces],
        "devices": sorted({trace.device_name or "unknown" for trace in traces}),
        "profiler_ns_per_event": PROFILER_NS_PER_EVENT,
        "fitted": {**{f"families_ns.{k}": v.document() for k, v in families.items()},
                   **{f"sync_ns.{k}": v.document() for k, v in sync.items()}},
        "probe": f"not measured (a trace holds no host-speed probe): {reference}'s",
        "families_ratio": round(ratio, 3),
        "launch": _launches(traces),
        "python_gaps": _gaps(traces),
        "left_out": left_out}
    return HostProfile(name, reference, probe, measured, provenance=provenance)


_ALWAYS_LEFT_OUT = {
    "families_ns.foreach": "tensor-list ops: the trace records no list lengths, so a call's base "
                           "cost cannot be told from its cost per tensor",
    "foreach_per_tensor_ns": "the trace records no tensor-list lengths",
    "script_call_ns": "a plain Python call: the trace records no event for it",
    "python": "the trace counts no Python lines or calls; its gaps between ops are reported "
              "under python_gaps, not fitted",
    "autograd_record_ns": "recorded inside the op's own range, not apart from the op",
    "autograd_node_ns": "a node's engine work beyond its ops is a few microseconds, below the "
                        "profiler's own cost of the ranges inside it",
    "tensor_subclass_ns": "not told apart from the ops in a trace",
    "collectives_ns": "the profile's rows are a one-rank group's call path; a trace's "
                      "collectives ran on their own groups"}
"""Mechanisms a trace does not fit, and why (the profile's provenance ``left_out``)."""


def _keep(key: str, samples: dict[str, list[tuple[int, int]]],
          left_out: dict[str, str]) -> dict[str, Fitted]:
    """Per row, the fit of its ``(recorded ns, profiler ns)`` samples, where there are enough
    and the profiler's share is small enough; the others in ``left_out`` with the reason."""
    kept = {}
    for row, pairs in sorted(samples.items()):
        raw = statistics.median(ns for ns, _ in pairs)
        fit = Fitted(len(pairs), raw, statistics.median(ns - cost for ns, cost in pairs))
        if fit.calls < MIN_CALLS:
            left_out[f"{key}.{row}"] = f"{fit.calls} calls in the traces, fewer than {MIN_CALLS}"
        elif raw - fit.ns > MAX_CORRECTION_SHARE * raw:
            left_out[f"{key}.{row}"] = (f"{fit.calls} calls, median {raw / 1e3:.1f} us, of which "
                                        f"the profiler's estimate is {(raw - fit.ns) / 1e3:.1f}")
        else:
            kept[row] = fit
    return kept


def _family_samples(traces: Sequence[RankTrace]) -> dict[str, list[tuple[int, int]]]:
    """Per family, each leaf op's ``(recorded ns, profiler ns inside it)``."""
    samples: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for op in (op for trace in traces for op in trace.leaf_ops):
        if any(SYNC_RUNTIME.get(call) in WAITING_SYNC for call in op.runtime_calls):
            continue  # waited on the GPU inside
        launches = any(call.startswith(WORK_PREFIXES) for call in op.runtime_calls)
        family = family_of(_aten_name(op.name)) if launches else "view"
        if family != "foreach":
            samples[family].append((op.duration_ns,
                                    len(op.runtime_calls) * PROFILER_NS_PER_EVENT))
    return samples


def _aten_name(name: str) -> str:
    """``aten::add_.Tensor`` -> ``add_``: an op as the rank side names it to the host-cost
    table (the in-place ``_`` kept: in-place ops are a family of their own)."""
    return name.rsplit("::", 1)[-1].split(".", 1)[0]


def _sync_samples(traces: Sequence[RankTrace]) -> dict[str, list[tuple[int, int]]]:
    """Per ``sync_ns`` row, each call's ``(recorded ns, 0)`` (no event inside it), the waiting
    calls only where the GPU had drained."""
    samples: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for trace in traces:
        busy_until = _busy_until(trace)
        for call in trace.runtime_calls:
            row = SYNC_RUNTIME.get(call.name)
            if row is not None and (row not in WAITING_SYNC or busy_until(call.start_ns)
                                    <= call.start_ns):
                samples[row].append((call.duration_ns, 0))
    return samples


def _busy_until(trace: RankTrace) -> Callable[[int], int]:
    """When the GPU finishes what was launched before a time: the latest end of the kernels
    launched (else started) before it."""
    kernels = sorted(trace.kernels, key=lambda k: k.start_ns if k.launch_ns is None
                     else k.launch_ns)
    launched = [k.start_ns if k.launch_ns is None else k.launch_ns for k in kernels]
    ends, latest = [], 0
    for kernel in kernels:
        latest = max(latest, kernel.end_ns)
        ends.append(latest)

    def until(t_ns: int) -> int:
        index = bisect_left(launched, t_ns)
        return ends[index - 1] if index else 0
    return until


def _launches(traces: Sequence[RankTrace]) -> dict[str, Any]:
    """The kernel launch calls: how many, their median, and that less the profiler's
    estimate."""
    durations = [call.duration_ns for trace in traces for call in trace.runtime_calls
                 if call.name.startswith(LAUNCH_PREFIXES)]
    if not durations:
        return {"calls": 0}
    median = statistics.median(durations)
    return {"calls": len(durations), "median_recorded_ns": round(median),
            "less_profiler_ns": round(median - PROFILER_NS_PER_EVENT),
            "note": "part of each op family's cost (the table has no launch row); reported only"}


def _gaps(traces: Sequence[RankTrace]) -> dict[str, Any]:
    """The gaps between consecutive top-level ops on each trace's Python thread (the one whose
    top-level ops are not the autograd engine's), up to :data:`GAP_LIMIT_NS`."""
    gaps = []
    for trace in traces:
        threads: dict[int, list[HostOp]] = defaultdict(list)
        for op in trace.ops:
            if not op.name.startswith("autograd::"):
                threads[op.thread].append(op)
        if not threads:
            continue
        ops = max(threads.values(), key=len)
        gaps += [b.start_ns - (a.start_ns + a.duration_ns) for a, b in zip(ops, ops[1:])
                 if 0 <= b.start_ns - (a.start_ns + a.duration_ns) <= GAP_LIMIT_NS]
    if not gaps:
        return {"gaps": 0}
    return {"gaps": len(gaps), "median_ns": round(statistics.median(gaps)),
            "total_ns": sum(gaps),
            "note": "the script's Python, the ops' bindings and the profiler's record of each "
                    "op; reported only"}
