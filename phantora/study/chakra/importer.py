"""Chakra ETs from other tools as a recording that ``phantora-ns3 replay`` runs.

``replay DIR SCENARIO`` takes a folder of ``<prefix>.<rank>.et`` files (plus ``comm_group.json``
when collectives name a ``pg_name``) in place of a recorded run. Each rank's nodes, in
dependency order (ids break ties), become records of :mod:`phantora.record.graph`:

- CPU COMP nodes (``is_cpu_op``) are host time: their duration is the gap before the next op;
- GPU COMP nodes are kernels on stream 0; COMM_COLL / COMM_SEND / COMM_RECV nodes go on one
  communication stream (so a rank's collectives run one at a time, as on one NCCL stream);
- a dependency on a GPU node of the other stream is an event record plus a stream wait; a CPU
  node's dependency on a GPU node is a host sync on that node's event.

Chakra's collective types become issued ops (:class:`~wire.ops.IssuedOp`) here, as
ProcessGroupNCCL runs them: BARRIER is an all-reduce of its buffer, GATHER and SCATTER grouped
send/recv to and from the root (group rank 0): an all_to_allv with one non-zero column or row.
Sizes invert the export's reading of ``comm_size`` (all_gather: the per-rank shard). Chakra
carries no dtype: collectives are taken as 2-byte elements (bf16). Collectives are matched per
``pg_name`` in issue order, as ASTRA-sim does; send/recv per (src, dst) pair in order.
"""

import heapq
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from phantora.record.graph import Recording, RecordingError
from phantora.study.chakra.export import COMM_TYPES, proto
from wire.ops import IssuedOp

DTYPE_BYTES = 2
COMPUTE_STREAM = 0
COMM_STREAM = 1
_KINDS = {name: kind for kind, name in COMM_TYPES.items() if kind != IssuedOp.ALL_TO_ALLV}
_KINDS["BARRIER"] = IssuedOp.ALL_REDUCE
_ROOTED_EXCHANGES = ("GATHER", "SCATTER")


def chakra_files(folder: Path) -> list[Path]:
    """The ``<prefix>.<rank>.et`` files of ``folder`` in rank order (empty if none)."""
    found = {}
    for path in folder.glob("*.et"):
        prefix, _, rank = path.stem.rpartition(".")
        if prefix and rank.isdigit():
            found[int(rank)] = path
    if found and sorted(found) != list(range(len(found))):
        raise RecordingError(f"{folder}: Chakra traces for ranks {sorted(found)}; expected "
                             f"0..{len(found) - 1} (<prefix>.<rank>.et)")
    return [found[rank] for rank in sorted(found)]


def read_nodes(path: Path) -> list[Any]:
    """The nodes of one Chakra ET file (after its ``GlobalMetadata``); RecordingError if it is
    not one."""
    pb = proto()
    data = path.read_bytes()
    messages, at = [], 0
    while at < len(data):
        size = shift = 0
        while True:
            if at >= len(data):
                raise RecordingError(f"{path}: truncated record at byte {at}")
            byte = data[at]
            at += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if at + size > len(data):
            raise RecordingError(f"{path}: truncated: a record of {size} bytes at byte {at} "
                                 f"runs past the end ({len(data)} bytes)")
        messages.append(data[at:at + size])
        at += size
    if not messages:
        raise RecordingError(f"{path}: empty; expected a GlobalMetadata record, then nodes")
    try:
        return [pb.Node.FromString(raw) for raw in messages[1:]]
    except Exception as error:  # noqa: BLE001 - protobuf's DecodeError, reported as bad input
        raise RecordingError(f"{path}: not a Chakra ET ({error})") from None


def _attrs(node: Any) -> dict[str, Any]:
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr if a.WhichOneof("value")}


def _ordered(nodes: list[Any], path: Path) -> list[Any]:
    """Kahn's order over ``data_deps`` and ``ctrl_deps``, smallest id first."""
    by_id = {node.id: node for node in nodes}
    waiting = {}
    users: dict[int, list[int]] = defaultdict(list)
    for node in nodes:
        deps = set(node.data_deps) | set(node.ctrl_deps)
        missing = deps - by_id.keys()
        if missing:
            raise RecordingError(f"{path}: node {node.id} depends on unknown nodes "
                                 f"{sorted(missing)[:5]}")
        waiting[node.id] = len(deps)
        for dep in deps:
            users[dep].append(node.id)
    ready = [node_id for node_id, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        node_id = heapq.heappop(ready)
        order.append(by_id[node_id])
        for user in users[node_id]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(nodes):
        raise RecordingError(f"{path}: the dependencies form a cycle")
    return order


def _rank_records(rank: int, path: Path, groups: dict[str, list[int]], world: int
                  ) -> list[dict[str, Any]]:
    pb = proto()
    records: list[dict[str, Any]] = []
    stream_of: dict[int, int] = {}
    seqs: dict[Any, int] = defaultdict(int)
    gap_ns = 0
    for node in _ordered(read_nodes(path), path):
        attrs = _attrs(node)
        deps = sorted(set(node.data_deps) | set(node.ctrl_deps))
        if node.type == pb.COMP_NODE and attrs.get("is_cpu_op"):
            for dep in deps:
                if dep in stream_of:
                    records.append({"op": "sync", "kind": "event", "target": dep, "t_ns": 0,
                                    "cpu_ns": gap_ns})
                    gap_ns = 0
            gap_ns += node.duration_micros * 1000
            continue
        stream = COMPUTE_STREAM if node.type == pb.COMP_NODE else COMM_STREAM
        for dep in deps:
            if stream_of.get(dep, stream) != stream:
                records.append({"op": "stream_wait", "stream": stream, "event": dep, "t_ns": 0,
                                "cpu_ns": gap_ns})
                gap_ns = 0
        base = {"t_ns": 0, "cpu_ns": gap_ns, "stream": stream}
        gap_ns = 0
        if node.type == pb.COMP_NODE:
            records.append({**base, "op": "kernel", "name": node.name or "chakra comp",
                            "duration_ns": max(1, node.duration_micros * 1000), "flops": 0,
                            "bytes": 0, "source": ""})
        elif node.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
            src, dst = int(attrs["comm_src"]), int(attrs["comm_dst"])
            kind = IssuedOp.SEND if node.type == pb.COMM_SEND_NODE else IssuedOp.RECV
            records.append({**base, "op": "collective", "kind": kind, "group": "chakra-p2p",
                            "ranks": [src, dst], "seq": seqs[(src, dst)],
                            "bytes": int(attrs["comm_size"]), "dtype_bytes": DTYPE_BYTES,
                            "root": 0, "splits": None})
            seqs[(src, dst)] += 1
        elif node.type == pb.COMM_COLL_NODE:
            comm_type = pb.CollectiveCommType.Name(int(attrs["comm_type"]))
            if comm_type not in _KINDS and comm_type not in _ROOTED_EXCHANGES:
                raise RecordingError(f"{path}: node {node.id}: collective type "
                                     f"{attrs['comm_type']} has no phantora-ns3 equivalent")
            pg_name = str(attrs.get("pg_name", ""))
            ranks = groups.get(pg_name) if pg_name not in ("", "0") else list(range(world))
            if ranks is None:
                raise RecordingError(f"{path}: node {node.id}: pg_name {pg_name!r} is not in "
                                     "comm_group.json")
            records.append({**base, "op": "collective", "group": pg_name or "0",
                            "ranks": ranks, "seq": seqs[pg_name], "dtype_bytes": DTYPE_BYTES,
                            "root": 0, **_issued(comm_type, int(attrs["comm_size"]), rank,
                                                 ranks)})
            seqs[pg_name] += 1
        else:
            raise RecordingError(f"{path}: node {node.id}: type {pb.NodeType.Name(node.type)} "
                                 "is not replayed (COMP, COMM_COLL, COMM_SEND, COMM_RECV are)")
        records.append({"op": "event_record", "stream": stream, "event": node.id, "t_ns": 0,
                        "cpu_ns": 0})
        stream_of[node.id] = stream
    records.append({"op": "exit", "t_ns": 0, "cpu_ns": gap_ns})
    return records


def _issued(comm_type: str, size: int, rank: int, ranks: list[int]) -> dict[str, Any]:
    """``kind``, ``bytes`` and ``splits`` of ``rank``'s share of a Chakra collective of type
    ``comm_type`` and ``comm_size`` ``size`` on group ``ranks`` (see the module doc)."""
    if comm_type in _ROOTED_EXCHANGES:
        share = size // len(ranks)
        if comm_type == "GATHER":
            row = [share] + [0] * (len(ranks) - 1)
        else:
            row = [share if rank == ranks[0] else 0] * len(ranks)
        return {"kind": IssuedOp.ALL_TO_ALLV, "bytes": sum(row), "splits": row}
    kind = _KINDS[comm_type]
    return {"kind": kind, "bytes": size * len(ranks) if kind == IssuedOp.ALL_GATHER else size,
            "splits": None}


def load_chakra(folder: Path) -> Recording:
    """The Chakra ETs in ``folder`` as a recording (``meta.gpu`` is None: any GPU)."""
    files = chakra_files(folder)
    groups_path = folder / "comm_group.json"
    groups = json.loads(groups_path.read_text()) if groups_path.is_file() else {}
    world = len(files)
    ranks = [_rank_records(rank, path, groups, world) for rank, path in enumerate(files)]
    meta = {"world_size": world, "gpu": None, "gpus_of_rank": list(range(world)),
            "simulated_ns": 0, "rank_clock_ns": [], "collectives": 0,
            "rank_stats": [{} for _ in files], "source": "chakra"}
    return Recording(folder, meta, ranks)
