"""``trace.json``: a live run as a Chrome / Perfetto trace (open it in https://ui.perfetto.dev).

Layout: one process per rank (``pid`` = rank, named ``rank N (GPU g)``) with thread 0 = the
CPU (its waits in host syncs, in virtual time) and one thread per CUDA stream (kernels by aten
name; collectives by op with bytes, group, seq, algorithm and protocol in ``args``), compute
streams first, then the streams that carry collectives, marked ``(NCCL)``. A
collective's slice runs from when its stream reached it - waiting for the other members
included, as a real NCCL kernel spins - to its end; ``args.transfer_start_ns`` says when the
data started moving. Optionally one more process, ``network``, holds every flow as an async
slice (flows overlap, so they cannot share a plain thread), one track per source GPU.

Times in the format's unit, microseconds, with ns precision.
"""

import json
from collections import Counter
from pathlib import Path
from typing import Any

from phantora.engine.live import LiveResult

CPU_TID = 0


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


def trace_events(result: LiveResult, *, flows: bool = True) -> list[dict[str, Any]]:
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
    if flows and result.flows:
        events.extend(_flow_events(result, pid=len(result.ranks)))
    return events


def _flow_events(result: LiveResult, pid: int) -> list[dict[str, Any]]:
    events = [_name("process_name", pid, "network"), _order("process_sort_index", pid, pid)]
    for flow_id, flow in enumerate(result.flows):
        common = {"name": f"GPU {flow.src} -> {flow.dst}", "cat": f"gpu{flow.src}", "pid": pid,
                  "tid": flow.src, "id": flow_id}
        events.append({**common, "ph": "b", "ts": _us(flow.start_ns),
                       "args": {"bytes": flow.nbytes, "collective": flow.collective}})
        events.append({**common, "ph": "e", "ts": _us(flow.end_ns)})
    return events


def write_trace(result: LiveResult, path: Path, *, flows: bool = True) -> None:
    """Write ``path`` (usually ``DIR/trace.json``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"traceEvents": trace_events(result, flows=flows), "displayTimeUnit": "ns",
                "otherData": {"tool": "phantora-ns3", "simulated_ns": result.simulated_ns}}
    path.write_text(json.dumps(document, separators=(",", ":")) + "\n")
