"""``trace.json``: a live run as a Chrome / Perfetto trace (open it in https://ui.perfetto.dev).

Layout: one process per rank (``pid`` = rank, named ``rank N (GPU g)``) with thread 0 = the
CPU (its waits in host syncs, in virtual time) and one thread per CUDA stream (kernels by aten
name; collectives by op with bytes, group, seq, algorithm and protocol in ``args``), compute
streams first, then the streams that carry collectives, marked ``(NCCL)``. A
collective's slice runs from when its stream reached it - waiting for the other members
included, as a real NCCL kernel spins - to its end; ``args.transfer_start_ns`` says when the
data started moving. When the engine recorded flows, one more process, ``network``, holds every
flow as a slice on lanes per source GPU, with a flow arrow from its collective's slice on the
sending rank, and per source GPU a counter track of the rate it injects. With a step
attribution, each live rank has one more thread, ``step attribution``, whose slices say which
part of the step each stretch of its timeline is (:mod:`phantora.report.attribution`).

Times in the format's unit, microseconds, with ns precision.
"""

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from phantora.engine.results import LiveResult
from phantora.report.attribution import Attribution

CPU_TID = 0
ATTRIBUTION_TID = 999_999
"""The step attribution's thread in each rank's process (after its streams)."""


def _us(time_ns: int) -> float:
    return round(time_ns / 1000, 3)


def _name(kind: str, pid: int, name: str, tid: int | None = None) -> dict[str, Any]:
    """``process_name`` / ``thread_name`` metadata."""
    event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    return event


def _order(kind: str, pid: int, index: int, tid: int | None = None) -> dict[str, Any]:
    """``process_sort_index`` / ``thread_sort_index`` metadata (tracks in numeric order)."""
    event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid, "args": {"sort_index": index}}
    if tid is not None:
        event["tid"] = tid
    return event


def _slice(name: str, category: str, pid: int, tid: int, start_ns: int, end_ns: int,
           args: dict[str, Any] | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "X", "name": name, "cat": category, "pid": pid, "tid": tid,
                             "ts": _us(start_ns), "dur": _us(end_ns - start_ns)}
    if args:
        event["args"] = args
    return event


def _stream_threads(result: LiveResult) -> dict[tuple[int, int], tuple[int, str]]:
    """(rank, stream) -> (thread id, name): compute streams first, then streams that carry
    collectives (NCCL's), each group in stream-id order; thread ids 1, 2, ... per rank."""
    comm = {(s.rank, s.stream) for s in result.collective_spans}
    streams = sorted({(s.rank, s.stream) for s in result.kernels} | comm,
                     key=lambda key: (key[0], key in comm, key[1]))
    threads: dict[tuple[int, int], tuple[int, str]] = {}
    per_rank: Counter[int] = Counter()
    for rank, stream in streams:
        per_rank[rank] += 1
        kind = " (default)" if stream == 0 else " (NCCL)" if (rank, stream) in comm else ""
        threads[(rank, stream)] = (per_rank[rank], f"stream {stream}{kind}")
    return threads


def trace_events(result: LiveResult, *, flows: bool = True,
                 attribution: Attribution | None = None) -> list[dict[str, Any]]:
    """Every trace event of ``result``: metadata first, then slices in time order per track."""
    threads = _stream_threads(result)
    tids = {key: tid for key, (tid, _) in threads.items()}
    events: list[dict[str, Any]] = []
    for rank in result.ranks:
        events.append(_name("process_name", rank.rank, f"rank {rank.rank} (GPU {rank.gpu})"))
        events.append(_order("process_sort_index", rank.rank, rank.rank))
        events.append(_name("thread_name", rank.rank, "CPU", CPU_TID))
    for (rank_id, _), (tid, name) in threads.items():
        events.append(_name("thread_name", rank_id, name, tid))
        events.append(_order("thread_sort_index", rank_id, tid, tid))
    for blocked in result.blocked:
        what = "device" if blocked.kind == "device" else f"{blocked.kind} {blocked.target}"
        events.append(_slice(f"sync({what})", "sync", blocked.rank, CPU_TID, blocked.start_ns,
                             blocked.end_ns))
    for kernel in result.kernels:
        events.append(_slice(kernel.name, "kernel", kernel.rank, tids[(kernel.rank, kernel.stream)],
                             kernel.start_ns, kernel.end_ns))
    for span in result.collective_spans:
        record = span.record
        events.append(_slice(span.op, "collective", span.rank, tids[(span.rank, span.stream)],
                             span.ready_ns, span.end_ns,
                             {"bytes": record.bytes, "group": record.group, "seq": record.seq,
                              "ranks": list(record.ranks), "algorithm": record.algorithm,
                              "protocol": record.protocol, "channels": record.channels,
                              "transfer_start_ns": record.start_ns}))
    if attribution is not None:
        events.extend(_attribution_events(attribution))
    if flows and result.flows:
        events.extend(_flow_events(result, pid=len(result.ranks)))
    return events


def _attribution_events(attribution: Attribution) -> list[dict[str, Any]]:
    """Per live rank, its timeline's parts as slices, and each step as a slice under them."""
    events = []
    for rank in sorted({segment.rank for segment in attribution.segments}):
        events.append(_name("thread_name", rank, "step attribution", ATTRIBUTION_TID))
        events.append(_order("thread_sort_index", rank, ATTRIBUTION_TID, ATTRIBUTION_TID))
    for step in attribution.steps:
        events.append(_slice(f"step {step.step}", "step", step.rank, ATTRIBUTION_TID,
                             step.start_ns, step.end_ns,
                             {f"{part}_ns": ns for part, ns in step.parts_ns.items()}))
    for segment in attribution.segments:
        record = segment.collective
        name = segment.part if record is None else f"{segment.part}: {record.op}"
        events.append(_slice(name, "attribution", segment.rank, ATTRIBUTION_TID,
                             segment.start_ns, segment.end_ns,
                             None if record is None else {"group": record.group,
                                                          "seq": record.seq,
                                                          "bytes": record.bytes}))
    return events


def _flow_events(result: LiveResult, pid: int) -> list[dict[str, Any]]:
    """Flows as slices on lanes per source GPU (greedy: a flow takes the first lane free at
    its start, so slices on one track never overlap), an arrow from each collective's slice on
    the sending rank's stream to each of its flows, and per source GPU a counter of the rate it
    injects (each flow's bytes spread evenly over its lifetime)."""
    events = [_name("process_name", pid, "network"), _order("process_sort_index", pid, pid)]
    rank_of_gpu = {rank.gpu: rank.rank for rank in result.ranks}
    spans = {(span.rank, span.record.key): span for span in result.collective_spans}
    threads = {key: tid for key, (tid, _) in _stream_threads(result).items()}
    lanes: dict[int, list[int]] = defaultdict(list)  # source GPU -> each lane's end
    named: set[int] = set()
    rates: dict[int, list[tuple[int, float]]] = defaultdict(list)
    shown = sorted(result.flows, key=lambda f: (f.start_ns, f.src))[:MAX_TRACE_FLOWS]
    for flow_id, flow in enumerate(shown):
        ends = lanes[flow.src]
        lane = next((i for i, end in enumerate(ends) if end <= flow.start_ns), len(ends))
        ends[lane:lane + 1] = [flow.end_ns]
        tid = _FLOW_TID_BASE + flow.src * _MAX_LANES + min(lane, _MAX_LANES - 1)
        if tid not in named:
            named.add(tid)
            events.append(_name("thread_name", pid, f"GPU {flow.src} flows (lane {lane})", tid))
            events.append(_order("thread_sort_index", pid, tid, tid))
        events.append(_slice(f"GPU {flow.src} -> {flow.dst}", "flow", pid, tid, flow.start_ns,
                             flow.end_ns, {"bytes": flow.nbytes, "collective": flow.collective}))
        span = spans.get((rank_of_gpu.get(flow.src, -1), flow.key))
        if span is not None:
            common = {"name": "flow", "cat": "network", "id": flow_id}
            events.append({**common, "ph": "s", "pid": span.rank,
                           "tid": threads[(span.rank, span.stream)], "ts": _us(flow.start_ns)})
            events.append({**common, "ph": "f", "bp": "e", "pid": pid, "tid": tid,
                           "ts": _us(flow.start_ns)})
        if flow.end_ns > flow.start_ns:
            gbps = flow.nbytes * 8 / (flow.end_ns - flow.start_ns)
            rates[flow.src] += [(flow.start_ns, gbps), (flow.end_ns, -gbps)]
    for gpu, changes in sorted(rates.items()):
        level = 0.0
        for time_ns, delta in sorted(changes):
            level += delta
            events.append({"ph": "C", "name": f"GPU {gpu} injected Gbit/s", "pid": pid,
                           "ts": _us(time_ns), "args": {"Gbit/s": round(max(level, 0.0), 3)}})
    return events


MAX_TRACE_FLOWS = 200_000
"""Flows drawn at most (the earliest): long runs on large fabrics have millions, more than a
browser loads; ``otherData.flows_left_out`` counts the rest."""
_FLOW_TID_BASE = 1_000_000
_MAX_LANES = 1000
"""Flow lanes per GPU in the trace (more concurrent flows share the last lane)."""


def write_trace(result: LiveResult, path: Path, *, flows: bool = True,
                attribution: Attribution | None = None) -> None:
    """Write ``path`` (usually ``DIR/trace.json``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"traceEvents": trace_events(result, flows=flows, attribution=attribution),
                "displayTimeUnit": "ns",
                "otherData": {"tool": "phantora-ns3", "simulated_ns": result.simulated_ns,
                              "flows_left_out": max(0, len(result.flows) - MAX_TRACE_FLOWS)
                              if flows else 0}}
    path.write_text(json.dumps(document, separators=(",", ":")) + "\n")
