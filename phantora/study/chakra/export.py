"""``phantora-ns3 export-chakra RUN_DIR --out DIR``: a recorded run as Chakra ETs.

One ``<prefix>.<rank>.et`` per rank (varint-length-prefixed protobuf records: a
``GlobalMetadata`` with version ``0.0.4``, then ``Node``s) and ``comm_group.json``
(``{"1": [ranks], ...}``), as ASTRA-sim 2 reads them (``../shared/research/roce_and_traces.md``
section 10). The graph per rank:

- a **host chain** of CPU COMP nodes (``is_cpu_op``), one per recorded CPU gap;
- a **chain per GPU stream**: kernels as COMP nodes, collectives as COMM_COLL, send/recv as
  COMM_SEND/COMM_RECV; each depends on the previous node of its stream, on the host node
  that launched it, and on the events its stream waited for;
- a sync makes the next host node depend on what it waited for (the stream, every stream, or
  the event's node).

Every dependency is a ``data_deps`` entry (both feeders honour those). Durations are whole µs
(Chakra's unit); each chain carries its rounding residual so its sum stays within 1 µs of the
recording. ``comm_size`` follows ASTRA-sim's reading: all_gather the per-rank shard,
reduce_scatter the whole input, all_reduce / all_to_all / broadcast the buffer. P2P tags are
unique per message. ASTRA-sim does not model the host; CPU nodes are plain delays there.

A deduplicated recording holds only its live ranks' records; each mirrored rank gets its
representative's, with every collective moved to the mirror's own groups as the engine
issued it (:class:`~phantora.engine.mirrors.Mirror`), so every rank has its ET.
"""

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from hwmodel.errors import MissingDependencyError
from phantora.engine.mirrors import Mirror
from phantora.record.graph import GPU_OPS, Recording, record_op
from wire.ops import P2P_OPS, IssuedOp

CHAKRA_VERSION = "0.0.4"
COMM_TYPES = {IssuedOp.ALL_REDUCE: "ALL_REDUCE", IssuedOp.REDUCE: "REDUCE",
              IssuedOp.ALL_GATHER: "ALL_GATHER", IssuedOp.BROADCAST: "BROADCAST",
              IssuedOp.ALL_TO_ALL: "ALL_TO_ALL", IssuedOp.ALL_TO_ALLV: "ALL_TO_ALL",
              IssuedOp.REDUCE_SCATTER: "REDUCE_SCATTER"}
"""Issued collectives -> Chakra's ``CollectiveCommType``."""
REPLAYED_BY_DURATION = frozenset({IssuedOp.BROADCAST})
"""Collectives ASTRA-sim does not simulate but replays as their node's ``duration_micros``:
they carry their simulated duration (from its start, every member ready, to its end)."""


def proto() -> Any:
    try:
        from phantora.study.chakra import et_def_pb2
    except ImportError as error:
        raise MissingDependencyError(f"Chakra export needs protobuf ({error}): pip install -e "
                                     "'.[study]'") from None
    return et_def_pb2


def comm_size(record: dict[str, Any]) -> int:
    """Bytes as ASTRA-sim reads ``comm_size`` for this collective (see the module doc)."""
    if record["kind"] == IssuedOp.ALL_GATHER:
        return record["bytes"] // max(1, len(record["ranks"]))
    if record["kind"] == IssuedOp.ALL_TO_ALLV and record["splits"]:
        return sum(record["splits"])
    return int(record["bytes"])


class _Rounder:
    """ns -> whole µs per chain, carrying the residual (a chain's total stays exact to 1 µs)."""

    def __init__(self) -> None:
        self._residual: dict[Any, int] = defaultdict(int)

    def us(self, chain: Any, ns: int) -> int:
        total = ns + self._residual[chain]
        whole = total // 1000
        self._residual[chain] = total - whole * 1000
        return whole


class _RankGraph:
    """Builds one rank's nodes from its records."""

    def __init__(self, pb: Any, rank: int, world: int, groups: dict[tuple[int, ...], str]) -> None:
        self.pb = pb
        self.rank = rank
        self.world = world
        self.groups = groups
        self.nodes: list[Any] = []
        self._host: int | None = None
        self._host_waits: list[int] = []
        self._stream_last: dict[int, int] = {}
        self._stream_waits: dict[int, list[int]] = defaultdict(list)
        self._events: dict[int, int] = {}
        self._round = _Rounder()

    def add(self, record: dict[str, Any]) -> None:
        if record["cpu_ns"] > 0 or self._host_waits:
            self._host_node(record["cpu_ns"])
        kind = record["op"]
        if kind in GPU_OPS and kind not in ("event_record", "stream_wait"):
            self._gpu_node(record)
        elif kind == "event_record":
            last = self._stream_last.get(record["stream"])
            if last is not None:
                self._events[record["event"]] = last
            else:
                self._events.pop(record["event"], None)
        elif kind == "stream_wait":
            node = self._events.get(record["event"])
            if node is not None:
                self._stream_waits[record["stream"]].append(node)
        elif kind == "sync":
            self._host_waits.extend(self._sync_targets(record))

    def _sync_targets(self, record: dict[str, Any]) -> list[int]:
        if record["kind"] == "device":
            return list(self._stream_last.values())
        if record["kind"] == "stream":
            last = self._stream_last.get(record["target"])
            return [] if last is None else [last]
        node = self._events.get(record["target"])
        return [] if node is None else [node]

    def _node(self, name: str, node_type: str, deps: list[int]) -> Any:
        node = self.pb.Node(id=len(self.nodes), name=name, type=self.pb.NodeType.Value(node_type))
        node.data_deps.extend(sorted(set(deps)))
        self.nodes.append(node)
        return node

    def _attr(self, node: Any, name: str, **value: Any) -> None:
        node.attr.append(self.pb.AttributeProto(name=name, **value))

    def _host_node(self, cpu_ns: int) -> None:
        deps = ([] if self._host is None else [self._host]) + self._host_waits
        node = self._node("cpu", "COMP_NODE", deps)
        node.duration_micros = self._round.us("host", cpu_ns)
        self._attr(node, "is_cpu_op", bool_val=True)
        self._host = node.id
        self._host_waits = []

    def _gpu_node(self, record: dict[str, Any]) -> None:
        stream = record["stream"]
        deps = self._stream_waits.pop(stream, [])
        if stream in self._stream_last:
            deps.append(self._stream_last[stream])
        if self._host is not None:
            deps.append(self._host)
        if record["op"] == "kernel":
            node = self._node(record["name"], "COMP_NODE", deps)
            node.duration_micros = self._round.us(stream, record["duration_ns"])
            self._attr(node, "is_cpu_op", bool_val=False)
        elif record["kind"] in P2P_OPS:
            src, dst = record["ranks"]
            node = self._node(f"{record['kind']} {src}->{dst}", "COMM_SEND_NODE"
                              if record["kind"] == IssuedOp.SEND else "COMM_RECV_NODE", deps)
            self._attr(node, "comm_src", int32_val=src)
            self._attr(node, "comm_dst", int32_val=dst)
            self._attr(node, "comm_tag", int32_val=(record["seq"] * self.world + src)
                       * self.world + dst)
            self._attr(node, "comm_size", int64_val=int(record["bytes"]))
        else:
            comm = COMM_TYPES.get(record["kind"])
            if comm is None:
                raise ValueError(f"no Chakra collective type for {record['kind']!r}")
            node = self._node(f"{record['kind']} {record['group']}#{record['seq']}",
                              "COMM_COLL_NODE", deps)
            self._attr(node, "comm_type", int64_val=self.pb.CollectiveCommType.Value(comm))
            self._attr(node, "comm_size", int64_val=comm_size(record))
            self._attr(node, "pg_name", string_val=self.groups[tuple(record["ranks"])])
            if record["kind"] in REPLAYED_BY_DURATION and "end_ns" in record:
                node.duration_micros = self._round.us(stream,
                                                      record["end_ns"] - record["start_ns"])
        if record["op"] == "collective" and "algorithm" in record:
            self._attr(node, "phantora_algorithm", string_val=record["algorithm"])
            self._attr(node, "phantora_protocol", string_val=record["protocol"])
        self._stream_last[stream] = node.id


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def rank_records(recording: Recording) -> list[list[dict[str, Any]]]:
    """Every rank's records: a live rank's as recorded, a mirror's its representative's with
    each collective on the mirror's own groups."""
    classes = recording.classes
    expanded = list(recording.ranks)
    for mirror, representative in classes.mirrors().items():
        moving = Mirror(classes, mirror, representative)
        expanded[mirror] = [_mirrored(record, moving) for record in recording.ranks[representative]]
    return expanded


def _mirrored(record: dict[str, Any], mirror: Mirror) -> dict[str, Any]:
    if record["op"] != "collective":
        return record
    moved = mirror.collective(record_op(record, 0))
    return {**record, "group": moved.group, "ranks": list(moved.ranks),
            "splits": None if moved.splits is None else list(moved.splits)}


def comm_groups(ranks: list[list[dict[str, Any]]]) -> dict[tuple[int, ...], str]:
    """Every collective's rank set -> its ``pg_name`` ("1", "2", ... in order of first use)."""
    groups: dict[tuple[int, ...], str] = {}
    for records in ranks:
        for record in records:
            if record["op"] == "collective" and record["kind"] not in P2P_OPS:
                groups.setdefault(tuple(record["ranks"]), str(len(groups) + 1))
    return groups


def export_chakra(recording: Recording, out_dir: Path, prefix: str = "trace") -> list[Path]:
    """Write the ETs (one per rank, mirrored ranks included) and ``comm_group.json`` to
    ``out_dir``; the paths written."""
    pb = proto()
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(f"{prefix}.*.et"):  # an earlier export, maybe of more ranks
        stale.unlink()
    ranks = rank_records(recording)
    groups = comm_groups(ranks)
    written = []
    for rank, records in enumerate(ranks):
        graph = _RankGraph(pb, rank, recording.world_size, groups)
        for record in records:
            graph.add(record)
        path = out_dir / f"{prefix}.{rank}.et"
        with path.open("wb") as out:
            for message in [pb.GlobalMetadata(version=CHAKRA_VERSION), *graph.nodes]:
                data = message.SerializeToString()
                out.write(_varint(len(data)) + data)
        written.append(path)
    groups_path = out_dir / "comm_group.json"
    groups_path.write_text(json.dumps({name: list(ranks) for ranks, name in groups.items()},
                                      indent=1) + "\n")
    return [*written, groups_path]
