"""The execution-graph format: what every live run writes to ``DIR/graph/``.

One ``meta.json`` (format name and version, world size, GPU, the rank -> GPU map, the live
run's own results, the rank classes of a deduplicated run) and one ``rank<N>.jsonl`` per live
rank (a mirrored rank follows its representative, ``phantora.engine.mirrors``): the rank's
messages to the engine in program order, one JSON object per line, each op with the host gap
before it and its cause (``cpu_ns``: script CPU time since the previous host event; a sync's
``blocked_ns``: time the host waited in it). The records are exactly what the live engine consumed, so a replay feeds
the same engine the same ops with only the network (and so the sync answers) changed.

``docs/execution-graph.md`` documents every field; bump :data:`VERSION` on any incompatible
change (readers refuse other versions with a clear error).
"""

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwmodel.errors import ScenarioError
from phantora.engine.matching import CollectiveKey
from phantora.engine.rank_classes import RankClasses
from wire.messages import Collective, EventRecord, Kernel, Op, RankStats, StreamWait
from wire.ops import P2P_OPS, IssuedOp

FORMAT = "phantora-execution-graph"
VERSION = 1
GRAPH_DIR = "graph"
META_FILE = "meta.json"


class RecordingError(ScenarioError):
    """A recording is missing, unreadable, of another version, or does not fit the scenario
    (a bad input like a bad scenario: the CLI exits 2)."""


def rank_file(graph_dir: Path, rank: int) -> Path:
    return graph_dir / f"rank{rank}.jsonl"


def op_record(op: Op, cpu_ns: int) -> dict[str, Any]:
    """One GPU-side op as a record (``cpu_ns``: script CPU time since the last host event)."""
    if isinstance(op, Kernel):
        return {"op": "kernel", "t_ns": op.at_ns, "cpu_ns": cpu_ns, "stream": op.stream,
                "name": op.name, "duration_ns": op.duration_ns, "flops": op.flops,
                "bytes": op.bytes, "source": op.source}
    if isinstance(op, EventRecord):
        return {"op": "event_record", "t_ns": op.at_ns, "cpu_ns": cpu_ns, "stream": op.stream,
                "event": op.event}
    if isinstance(op, StreamWait):
        return {"op": "stream_wait", "t_ns": op.at_ns, "cpu_ns": cpu_ns, "stream": op.stream,
                "event": op.event}
    return {"op": "collective", "t_ns": op.at_ns, "cpu_ns": cpu_ns, "stream": op.stream,
            "kind": op.op, "group": op.group, "ranks": list(op.ranks), "seq": op.seq,
            "bytes": op.nbytes, "dtype_bytes": op.dtype_bytes, "root": op.root,
            "splits": None if op.splits is None else list(op.splits)}


def record_op(record: dict[str, Any], at_ns: int) -> Op:
    """The protocol op a GPU-side record stands for, issued at ``at_ns`` (values dropped: a
    replay carries no tensor values)."""
    kind = record["op"]
    if kind == "kernel":
        return Kernel(record["stream"], at_ns, record["duration_ns"], record["name"],
                      record["flops"], record["bytes"], record["source"])
    if kind == "event_record":
        return EventRecord(record["event"], record["stream"], at_ns)
    if kind == "stream_wait":
        return StreamWait(record["stream"], record["event"], at_ns)
    if kind == "collective":
        try:
            op = IssuedOp(record["kind"])
        except ValueError:
            raise RecordingError(f"unknown collective kind {record['kind']!r}; expected one "
                                 f"of {', '.join(IssuedOp)}") from None
        splits = record["splits"]
        return Collective(record["stream"], at_ns, record["group"], tuple(record["ranks"]),
                          record["seq"], op, record["bytes"], record["dtype_bytes"],
                          record["root"], None if splits is None else tuple(splits))
    raise RecordingError(f"unknown record op {kind!r}")


GPU_OPS = frozenset({"kernel", "event_record", "stream_wait", "collective"})
"""Record ops that go on a GPU stream; the others (``sync``, ``query``, ``exit``) are host
events."""


def collective_key(record: dict[str, Any]) -> CollectiveKey:
    """How a member's collective record finds the run's collective (``CollectiveRecord.key``;
    ``send``/``recv`` count per ordered pair)."""
    if record["kind"] in P2P_OPS:
        src, dst = record["ranks"]
        return CollectiveKey.of_p2p(record["group"], src, dst, record["seq"])
    return CollectiveKey.of_collective(record["group"], record["seq"])


def stats_dict(stats: RankStats) -> dict[str, Any]:
    return {"script_cpu_ns": stats.script_cpu_ns, "simulator_cpu_ns": stats.simulator_cpu_ns,
            "peak_memory_bytes": stats.peak_memory_bytes,
            "peak_reserved_bytes": stats.peak_reserved_bytes,
            "host_speed_factor": stats.host_speed_factor}


def write_graph(graph_dir: Path, meta: dict[str, Any],
                ranks: Iterable[tuple[int, Iterable[dict[str, Any]]]]) -> None:
    """``ranks``: each live rank's records."""
    graph_dir.mkdir(parents=True, exist_ok=True)
    for rank, records in ranks:
        with rank_file(graph_dir, rank).open("w") as out:
            for record in records:
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
    (graph_dir / META_FILE).write_text(json.dumps({"format": FORMAT, "version": VERSION, **meta},
                                                  indent=1) + "\n")


@dataclass(frozen=True)
class Recording:
    """A recording read back: ``meta.json`` and each rank's records."""

    path: Path
    meta: dict[str, Any]
    ranks: list[list[dict[str, Any]]]
    """Per rank; empty for a mirrored one."""

    @property
    def world_size(self) -> int:
        return int(self.meta["world_size"])

    @property
    def classes(self) -> RankClasses:
        """The run's rank classes (all live unless it was deduplicated)."""
        return RankClasses.of_grid(self.meta.get("rank_classes"), self.world_size)

    def stats(self, rank: int) -> RankStats:
        return RankStats(**self.meta["rank_stats"][rank])


def load_recording(run_dir: Path) -> Recording:
    """Read ``run_dir/graph`` (``run_dir`` may also be the graph folder itself)."""
    graph_dir = run_dir if (run_dir / META_FILE).is_file() else run_dir / GRAPH_DIR
    meta_path = graph_dir / META_FILE
    if not meta_path.is_file():
        raise RecordingError(f"{run_dir}: no execution graph (expected {meta_path}); record one "
                             "with a live run: phantora-ns3 SCENARIO.yaml --out DIR")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as error:
        raise RecordingError(f"{meta_path}: unreadable ({error}); record the run again") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RecordingError(f"{meta_path}: not a {FORMAT} file")
    if meta.get("version") != VERSION:
        raise RecordingError(f"{meta_path}: format version {meta.get('version')!r}, this "
                             f"phantora-ns3 reads version {VERSION}; record the run again")
    live = set(RankClasses.of_grid(meta.get("rank_classes"), meta["world_size"]).live_ranks())
    ranks = [list(_read_lines(rank_file(graph_dir, rank))) if rank in live else []
             for rank in range(meta["world_size"])]
    return Recording(graph_dir, meta, ranks)


def _read_lines(path: Path) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        raise RecordingError(f"{path}: missing; the recording is incomplete, record it again")
    with path.open() as lines:
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except ValueError:
                raise RecordingError(f"{path}:{number}: not a JSON record; the file is "
                                     "damaged, record the run again") from None
            if not isinstance(record, dict) or "op" not in record or "cpu_ns" not in record:
                raise RecordingError(f"{path}:{number}: a record needs 'op' and 'cpu_ns'")
            yield record
