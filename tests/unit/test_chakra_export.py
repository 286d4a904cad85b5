"""Chakra export of a recording, decoded with protobuf (the fields ASTRA-sim's feeder reads),
and the import of Chakra traces into replay."""

import json
from pathlib import Path

import pytest

from phantora.engine.rank_classes import RankClasses
from phantora.record.graph import RecordingError, load_recording
from phantora.study.chakra.export import export_chakra
from phantora.study.chakra.importer import _issued, load_chakra
from tests.unit.fixed_rate import FixedRateBackend
from tests.unit.test_live_engine import NCCL_STREAM, ScriptedRank
from tests.unit.test_record_replay import record, replay_on_recording

pytest.importorskip("google.protobuf")
from google.protobuf.internal.decoder import _DecodeVarint32  # noqa: E402

from phantora.study.chakra import et_def_pb2 as pb  # noqa: E402


def step(r: ScriptedRank) -> None:
    r.kernel(12_345)
    r.record(1)
    r.wait_event(NCCL_STREAM, 1)
    r.collective("all_gather", [0, 1], 4 << 20)
    r.p2p("send" if r.rank == 0 else "recv", 0, 1, 1 << 20)
    r.cpu(2_500)
    r.sync()
    r.cpu(40_000)
    r.kernel(1_000)


def decode(path: Path) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    data = path.read_bytes()
    messages, at = [], 0
    while at < len(data):
        size, at = _DecodeVarint32(data, at)
        messages.append(data[at:at + size])
        at += size
    meta = pb.GlobalMetadata.FromString(messages[0])
    return meta, [pb.Node.FromString(raw) for raw in messages[1:]]


def attrs(node: pb.Node) -> dict[str, object]:
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}


def test_export_writes_one_et_per_rank_with_the_fields_astra_sim_reads(tmp_path: Path) -> None:
    record([step, step], FixedRateBackend(gbps=100.0, latency_ns=500), tmp_path)
    written = export_chakra(load_recording(tmp_path), tmp_path / "et")
    assert [p.name for p in written] == ["trace.0.et", "trace.1.et", "comm_group.json"]
    assert json.loads(written[-1].read_text()) == {"1": [0, 1]}
    meta, nodes = decode(written[0])
    assert meta.version == "0.0.4"
    assert [n.id for n in nodes] == list(range(len(nodes)))
    assert all(dep < node.id for node in nodes for dep in node.data_deps)
    kinds = [pb.NodeType.Name(n.type) for n in nodes]
    assert kinds.count("COMM_COLL_NODE") == 1 and kinds.count("COMM_SEND_NODE") == 1
    coll = next(n for n in nodes if n.type == pb.COMM_COLL_NODE)
    assert attrs(coll)["comm_type"] == pb.ALL_GATHER
    assert attrs(coll)["comm_size"] == (4 << 20) // 2  # all_gather: the per-rank shard
    assert attrs(coll)["pg_name"] == "1"
    kernel = nodes[0]
    assert kernel.type == pb.COMP_NODE and kernel.duration_micros == 12
    assert attrs(kernel)["is_cpu_op"] is False
    assert coll.data_deps == [kernel.id]  # the NCCL stream waited for the kernel's event
    send = next(n for n in nodes if n.type == pb.COMM_SEND_NODE)
    assert (attrs(send)["comm_src"], attrs(send)["comm_dst"]) == (0, 1)
    _, peer = decode(written[1])
    recv = next(n for n in peer if n.type == pb.COMM_RECV_NODE)
    assert attrs(recv)["comm_tag"] == attrs(send)["comm_tag"]
    # After the sync, the host's 40 us depends on the stream the sync waited for.
    cpu = [n for n in nodes if attrs(n).get("is_cpu_op") is True]
    after_sync = cpu[-1]
    assert after_sync.duration_micros == 40 and kernel.id in after_sync.data_deps
    assert nodes[-1].data_deps[-1] == after_sync.id  # the last kernel launched after it


def test_an_exported_trace_imports_and_replays_close_to_the_live_run(tmp_path: Path) -> None:
    """The round trip: live -> Chakra ET -> import -> replay on the same network. Chakra has
    whole-µs durations and one stream per kind of work, so the match is close, not exact."""
    live = record([step, step], FixedRateBackend(gbps=100.0, latency_ns=500), tmp_path)
    export_chakra(load_recording(tmp_path), tmp_path / "et")
    imported = load_chakra(tmp_path / "et")
    assert imported.world_size == 2
    kinds = [r.get("kind") for r in imported.ranks[0] if r["op"] == "collective"]
    assert kinds == ["all_gather", "send"]
    gather = next(r for r in imported.ranks[1] if r.get("kind") == "all_gather")
    assert gather["bytes"] == 4 << 20 and gather["ranks"] == [0, 1]
    _, replayed = replay_on_recording(imported, FixedRateBackend(gbps=100.0, latency_ns=500))
    assert replayed.result.simulated_ns == pytest.approx(live.simulated_ns, rel=0.05)
    assert len(replayed.result.collectives) == len(live.collectives)


def test_a_damaged_trace_is_refused(tmp_path: Path) -> None:
    (tmp_path / "trace.0.et").write_bytes(b"\x05abc")
    with pytest.raises(RecordingError, match="trace.0.et"):
        load_chakra(tmp_path)


def test_barrier_gather_and_scatter_import_as_the_ops_a_rank_issues() -> None:
    """As the process group issues them: an all-reduce, and all_to_allv rows with one non-zero
    column (gather) or, on the root, one non-zero row (scatter)."""
    assert _issued("BARRIER", 4, 1, [0, 1]) == {"kind": "all_reduce", "bytes": 4, "splits": None}
    assert _issued("GATHER", 30, 2, [0, 1, 2]) == {"kind": "all_to_allv", "bytes": 10,
                                                   "splits": [10, 0, 0]}
    assert _issued("SCATTER", 30, 0, [0, 1, 2]) == {"kind": "all_to_allv", "bytes": 30,
                                                    "splits": [10, 10, 10]}
    assert _issued("SCATTER", 30, 2, [0, 1, 2])["splits"] == [0, 0, 0]


def test_a_deduplicated_recording_exports_every_rank_with_its_own_groups(tmp_path: Path) -> None:
    """A 1 x 4 x 2 grid (TP pairs inside, DP across): ranks 2-5 are mirrors; each gets its
    representative's nodes, its TP collective on its own pair and the DP one unchanged."""
    def script(r: ScriptedRank) -> None:
        pair = [r.rank - r.rank % 2, r.rank - r.rank % 2 + 1]
        r.kernel(20_000)
        r.collective("all_reduce", pair, 1 << 20, group=f"tp{pair[0]}")
        r.collective("all_reduce", [r.rank % 2 + 2 * i for i in range(4)], 1 << 20,
                     group=f"dp{r.rank % 2}")
        r.collective("broadcast", [r.rank % 2 + 2 * i for i in range(4)], 1 << 20,
                     group=f"dp{r.rank % 2}")
        r.sync()

    classes = RankClasses(1, 4, 2)
    record([script] * 8, FixedRateBackend(gbps=100.0, latency_ns=500), tmp_path, classes)
    recording = load_recording(tmp_path)
    assert recording.classes.deduplicated
    written = export_chakra(recording, tmp_path / "et")
    assert [p.name for p in written[:-1]] == [f"trace.{rank}.et" for rank in range(8)]
    groups = {name: tuple(ranks) for name, ranks in json.loads(written[-1].read_text()).items()}
    pg_of = {ranks: name for name, ranks in groups.items()}
    for rank in range(8):
        _, nodes = decode(written[rank])
        colls = [attrs(n)["pg_name"] for n in nodes if n.type == pb.COMM_COLL_NODE]
        pair = (rank - rank % 2, rank - rank % 2 + 1)
        dp = tuple(rank % 2 + 2 * i for i in range(4))
        assert colls == [pg_of[pair], pg_of[dp], pg_of[dp]], rank
        broadcast = [n for n in nodes if n.type == pb.COMM_COLL_NODE][-1]
        assert attrs(broadcast)["comm_type"] == pb.BROADCAST
        assert broadcast.duration_micros > 0  # ASTRA-sim replays it as this duration
    assert len(groups) == 4 + 2  # four TP pairs, two DP groups
