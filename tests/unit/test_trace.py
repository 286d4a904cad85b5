"""The Perfetto / Chrome trace of a live run."""

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

import phantora.report.trace as trace
from phantora.engine.results import LiveResult
from phantora.report.trace import CPU_TID, trace_events, write_trace
from tests.unit.test_live_engine import NCCL_STREAM, ScriptedRank, fluid, run


def _traced_run() -> LiveResult:
    def script(r: ScriptedRank) -> None:
        r.kernel(2_000 + 1_000 * r.rank, name="aten::mm")
        r.record(event=1)
        r.wait_event(stream=NCCL_STREAM, event=1)
        r.collective("all_reduce", [0, 1], 1 << 20, group="default")
        r.record(event=2, stream=NCCL_STREAM)
        r.wait_event(stream=0, event=2)
        r.kernel(500, name="aten::add_.Tensor")
        r.sync()

    return run([script, script], fluid(2), record_flows=True).result


def _by_phase(events: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    return [event for event in events if event["ph"] == phase]


def test_every_rank_is_a_process_with_a_cpu_thread_and_one_thread_per_stream() -> None:
    events = trace_events(_traced_run())
    names = {(e["pid"], e.get("tid"), e["name"]): e["args"] for e in _by_phase(events, "M")}
    for rank in (0, 1):
        assert names[(rank, None, "process_name")] == {"name": f"rank {rank} (GPU {rank})"}
        assert names[(rank, CPU_TID, "thread_name")] == {"name": "CPU"}
        assert names[(rank, 1, "thread_name")] == {"name": "stream 0 (default)"}
        assert names[(rank, 2, "thread_name")] == {"name": f"stream {NCCL_STREAM} (NCCL)"}
    assert names[(2, None, "process_name")] == {"name": "network"}


def test_kernels_collectives_and_syncs_are_slices_on_their_threads() -> None:
    result = _traced_run()
    (record,) = result.collectives
    slices = _by_phase(trace_events(result), "X")
    rank1 = [(e["tid"], e["name"], e["ts"], e["dur"]) for e in slices if e["pid"] == 1]
    end_us = record.end_ns / 1000
    assert rank1 == [
        (CPU_TID, "sync(device)", 0.0, round(end_us + 0.5, 3)),
        (1, "aten::mm", 0.0, 3.0),
        (1, "aten::add_.Tensor", round(end_us, 3), 0.5),
        (2, "all_reduce", 3.0, round(end_us - 3.0, 3)),
    ]
    collective = next(e for e in slices if e["pid"] == 0 and e["name"] == "all_reduce")
    assert collective["ts"] == 2.0  # rank 0 reached it at 2 us and waited for rank 1
    assert collective["args"] == {"bytes": 1 << 20, "group": "default", "seq": 0,
                                  "ranks": [0, 1], "algorithm": record.algorithm,
                                  "protocol": record.protocol, "channels": record.channels,
                                  "transfer_start_ns": 3_000}


def test_slices_on_one_thread_never_overlap() -> None:
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for event in _by_phase(trace_events(_traced_run()), "X"):
        tracks[(event["pid"], event["tid"])].append((event["ts"], event["ts"] + event["dur"]))
    for spans in tracks.values():
        spans.sort()
        assert all(end <= next_start for (_, end), (next_start, _) in pairwise(spans))


def test_network_flows_are_slices_with_arrows_from_their_collective(tmp_path: Path) -> None:
    result = _traced_run()
    events = trace_events(result)
    flows = [e for e in _by_phase(events, "X") if e["cat"] == "flow"]
    assert len(flows) == len(result.flows) > 0
    assert all(e["pid"] == 2 for e in flows)
    assert {e["args"]["collective"] for e in flows} == {
        "all_reduce (group 'default', seq 0, 1048576 bytes)"}
    starts, finishes = _by_phase(events, "s"), _by_phase(events, "f")
    assert len(starts) == len(finishes) == len(flows)
    collective = {(e["pid"], e["tid"]): e for e in _by_phase(events, "X")
                  if e["name"] == "all_reduce"}
    for start in starts:  # each arrow leaves from inside the sender's collective slice
        source = collective[(start["pid"], start["tid"])]
        assert source["ts"] <= start["ts"] <= source["ts"] + source["dur"]
    for finish in finishes:  # ... and lands on the flow's slice
        assert any(f["tid"] == finish["tid"] and f["ts"] == finish["ts"] for f in flows)
    counters = _by_phase(events, "C")
    assert {c["name"] for c in counters} == {"GPU 0 injected Gbit/s", "GPU 1 injected Gbit/s"}
    assert max(c["args"]["Gbit/s"] for c in counters) > 0
    assert counters[-1]["args"]["Gbit/s"] == 0  # every flow has ended
    assert not [e for e in trace_events(result, flows=False) if e.get("cat") == "flow"]

    write_trace(result, tmp_path / "out" / "trace.json")
    document = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert document["displayTimeUnit"] == "ns"
    assert document["otherData"]["simulated_ns"] == result.simulated_ns
    assert len(document["traceEvents"]) == len(trace_events(result))


def test_the_trace_draws_at_most_max_flows_and_counts_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _traced_run()
    monkeypatch.setattr(trace, "MAX_TRACE_FLOWS", 1)
    write_trace(result, tmp_path / "trace.json")
    document = json.loads((tmp_path / "trace.json").read_text())
    assert len([e for e in document["traceEvents"] if e.get("cat") == "flow"]) == 1
    assert document["otherData"]["flows_left_out"] == len(result.flows) - 1
