"""A simulated run's GPU activities and steps, per live rank, as a comparison with a real trace
needs them.

Three outputs of the run folder together: ``trace.json`` says when each kernel and collective
ran on its stream, the execution graph (``graph/rank<N>.jsonl``) when the host issued it and a
kernel's FLOPs (a matrix product's shape), and ``summary.json``'s attribution where each step
starts and ends. A stream runs its work in issue order, so the k-th kernel a rank issued on a
stream is the k-th kernel slice of that stream's track; a collective is matched by its group,
sequence number and members.
"""

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwmodel.compute.ops import base_name
from hwmodel.errors import ProfileError
from phantora.profiles.activity import (Activity, GemmKey, collective_bucket, gemm_bucket,
                                        op_bucket)
from phantora.profiles.families import kernel_family
from phantora.record.graph import Recording, load_recording

MATMUL_WITH_FLOPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
"""The products :func:`phantora.profiles.activity.matmul_flops` sizes from a trace's shapes."""
_STREAM = re.compile(r"stream (-?\d+)")


@dataclass
class SimulatedRun:
    path: Path
    world_size: int
    mirrors: dict[int, int]
    """Mirrored rank -> the live rank whose timeline it runs (deduplicated runs)."""
    steps: dict[int, list[tuple[int, int, int]]]
    """Live rank -> ``(step, start_ns, end_ns)`` of each step, in order."""
    activities: dict[int, list[Activity]]
    """Live rank -> its kernels and collectives, by start."""
    gemm_keys: set[GemmKey]
    op_names: set[str]
    """Every kernel name (aten op) the run simulated."""

    def live_rank(self, rank: int) -> int:
        return self.mirrors.get(rank, rank)


def read_run(run_dir: Path) -> SimulatedRun:
    """Read a live script run's folder; :class:`ProfileError` where it lacks what a comparison
    needs."""
    recording = load_recording(run_dir)
    summary = _json(run_dir / "summary.json")
    trace = _json(run_dir / "trace.json")
    steps: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for step in (summary.get("attribution") or {}).get("steps", []):
        steps[step["rank"]].append((step["step"], step["start_ns"], step["end_ns"]))
    if not steps:
        raise ProfileError(f"{run_dir}: summary.json has no step attribution: not a live "
                           "script run")
    activities = _activities(recording, trace["traceEvents"], run_dir)
    kernels = [r for records in recording.ranks for r in records if r["op"] == "kernel"]
    return SimulatedRun(
        path=run_dir, world_size=recording.world_size, mirrors=recording.classes.mirrors(),
        steps={rank: sorted(s) for rank, s in steps.items()}, activities=activities,
        gemm_keys={key for r in kernels if (key := _gemm_key(r)) is not None},
        op_names={r["name"] for r in kernels})


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ProfileError(f"{path}: unreadable ({error}); a live run writes it: "
                           "phantora-ns3 SCENARIO.yaml --out DIR") from None


def _gemm_key(record: dict[str, Any]) -> GemmKey | None:
    if base_name(record["name"]) in MATMUL_WITH_FLOPS and record.get("flops"):
        return record["name"], int(record["flops"])
    return None


def _activities(recording: Recording, events: list[dict[str, Any]],
                run_dir: Path) -> dict[int, list[Activity]]:
    streams = {(e["pid"], e["tid"]): int(m.group(1)) for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"
               and (m := _STREAM.match(str((e.get("args") or {}).get("name", ""))))}
    slices: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    collectives: dict[tuple[int, Any, Any, str, tuple[int, ...]], dict[str, Any]] = {}
    for e in events:
        if e.get("ph") != "X" or (e["pid"], e["tid"]) not in streams:
            continue
        if e.get("cat") == "kernel":
            slices[(e["pid"], streams[(e["pid"], e["tid"])])].append(e)
        elif e.get("cat") == "collective":
            args = e.get("args") or {}
            collectives[(e["pid"], args.get("group"), args.get("seq"), e["name"],
                         tuple(args.get("ranks", ())))] = e
    result: dict[int, list[Activity]] = {}
    for rank in recording.classes.live_ranks():
        records = recording.ranks[rank]
        result[rank] = sorted(
            [*_kernels(rank, records, slices, run_dir),
             *_collectives(rank, records, collectives)], key=lambda a: a.start_ns)
    return result


def _ns(microseconds: float) -> int:
    return round(microseconds * 1000)


def _kernels(rank: int, records: list[dict[str, Any]],
             slices: dict[tuple[int, int], list[dict[str, Any]]],
             run_dir: Path) -> Iterable[Activity]:
    issued: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if record["op"] == "kernel":
            issued[record["stream"]].append(record)
    for stream, kernels in issued.items():
        ran = sorted(slices.get((rank, stream), []), key=lambda e: e["ts"])
        if len(ran) != len(kernels) or any(e["name"] != r["name"] for e, r in zip(ran, kernels)):
            raise ProfileError(f"{run_dir}: trace.json and graph/ disagree on rank {rank}'s "
                               f"stream {stream} ({len(ran)} kernel slices, {len(kernels)} "
                               "kernels recorded): not the outputs of one run")
        for event, record in zip(ran, kernels):
            start = _ns(event["ts"])
            gemm = _gemm_key(record)
            yield Activity(kernel_family(record["name"], record["name"]),
                           gemm_bucket(gemm) if gemm else op_bucket(record["name"]), start,
                           start + _ns(event["dur"]), record["t_ns"], gemm=gemm)


def _kind(record: dict[str, Any]) -> str:
    """The collective's op as a real trace names it: a rank issues every all-to-all given
    splits as ``all_to_allv``, where PyTorch's trace says ``all_to_all`` for even ones."""
    splits = record.get("splits") or []
    if record["kind"] == "all_to_allv" and splits and len(set(splits)) == 1:
        return "all_to_all"
    return record["kind"]


def _collectives(rank: int, records: list[dict[str, Any]],
                 spans: dict[tuple[int, Any, Any, str, tuple[int, ...]], dict[str, Any]]
                 ) -> Iterable[Activity]:
    for record in records:
        if record["op"] != "collective":
            continue
        event = spans.get((rank, record["group"], record["seq"], record["kind"],
                           tuple(record["ranks"])))
        if event is None:
            continue  # issued but never completed (a run stopped by an error)
        start = _ns(event["ts"])
        key = (_kind(record), int(record["bytes"]))
        end = start + _ns(event["dur"])
        transfer = (event.get("args") or {}).get("transfer_start_ns")
        yield Activity("communication", collective_bucket(key), start, end, record["t_ns"],
                       collective=key, transfer_ns=None if transfer is None else end - transfer)
