"""Recording a live run's execution graph and replaying it (scripted ranks, no processes)."""

import json
import threading
from collections.abc import Sequence
from multiprocessing import Pipe
from pathlib import Path

import pytest

from hwmodel.catalogue import lookup_gpu
from hwmodel.errors import RankCrashed
from phantora.collectives import NcclConfig, SystemInfo
from phantora.engine.live import LiveEngine
from phantora.engine.rank_classes import RankClasses
from phantora.engine.results import LiveResult
from phantora.network.base import NetworkBackend
from phantora.record.graph import VERSION, Recording, RecordingError, load_recording
from phantora.record.recorder import tap, write_recording
from phantora.record.replay import ReplayResult, comparison, replay
from tests.unit.fixed_rate import FixedRateBackend
from tests.unit.test_live_engine import NCCL_STREAM, Script, ScriptedRank, make_topology


def record(scripts: Sequence[Script], backend: NetworkBackend, out: Path,
           classes: RankClasses | None = None) -> LiveResult:
    """Run ``scripts`` live through tapped connections (only the live ranks' when ``classes``
    deduplicates them) and write the recording to ``out``."""
    topology = make_topology(len(scripts))
    classes = classes or RankClasses.all_live(len(scripts))
    pipes = {rank: Pipe() for rank in classes.live_ranks()}
    ranks = [ScriptedRank(rank, child) for rank, (_, child) in pipes.items()]

    def body(script: Script, rank: ScriptedRank) -> None:
        script(rank)
        rank.exit()

    threads = [threading.Thread(target=body, args=(scripts[rank.rank], rank), daemon=True)
               for rank in ranks]
    connections, logs = tap({rank: parent for rank, (parent, _) in pipes.items()})
    system = SystemInfo.from_topology(topology, lookup_gpu("h100"))
    engine = LiveEngine(topology, system, NcclConfig(), backend,
                        connections,  # type: ignore[arg-type]
                        list(range(len(scripts))), classes=classes)
    for thread in threads:
        thread.start()
    result = engine.run()
    for thread in threads:
        thread.join(5)
    write_recording(out, logs, result, "h100", list(range(len(scripts))), classes)
    return result


def replay_on(out: Path, backend: NetworkBackend) -> tuple[Recording, ReplayResult]:
    return replay_on_recording(load_recording(out), backend)


def replay_on_recording(recording: Recording, backend: NetworkBackend
                        ) -> tuple[Recording, ReplayResult]:
    topology = make_topology(recording.world_size)
    gpu = lookup_gpu("h100")
    return recording, replay(recording, topology, SystemInfo.from_topology(topology, gpu),
                             NcclConfig(), backend, list(range(recording.world_size)),
                             coverage=None, overlap=None)


def ddp_step(r: ScriptedRank) -> None:
    """Compute, an all_reduce on the NCCL stream after an event, a sync, then CPU work."""
    for _ in range(2):
        r.kernel(50_000)
        r.record(1, stream=0)
        r.wait_event(NCCL_STREAM, 1)
        r.collective("all_reduce", [0, 1], 8 << 20)
        r.record(2, stream=NCCL_STREAM)
        r.wait_event(0, 2)
        r.cpu(7_000 + 3_000 * r.rank)
        r.sync()
        r.cpu(20_000)  # the optimizer's host work after the sync


def test_recording_holds_ops_host_gaps_and_choices(tmp_path: Path) -> None:
    live = record([ddp_step, ddp_step], FixedRateBackend(gbps=100.0, latency_ns=500), tmp_path)
    recording = load_recording(tmp_path)
    assert recording.meta["version"] == VERSION and recording.world_size == 2
    assert recording.meta["simulated_ns"] == live.simulated_ns
    ops = [r["op"] for r in recording.ranks[1]]
    assert ops[:7] == ["kernel", "event_record", "stream_wait", "collective", "event_record",
                       "stream_wait", "sync"]
    assert ops[-1] == "exit"
    sync = recording.ranks[1][6]
    assert sync["cpu_ns"] == 10_000  # script CPU time before the sync
    assert sync["blocked_ns"] == sync["reply_ns"] - sync["t_ns"] > 0
    assert recording.ranks[1][7]["cpu_ns"] == 20_000  # the gap after the sync, from its reply
    coll = recording.ranks[0][3]
    assert coll["kind"] == "all_reduce" and coll["bytes"] == 8 << 20
    assert coll["algorithm"] == live.collectives[0].algorithm
    assert coll["end_ns"] == live.collectives[0].end_ns


def test_replay_on_the_same_network_reproduces_the_live_run(tmp_path: Path) -> None:
    live = record([ddp_step, ddp_step], FixedRateBackend(gbps=100.0, latency_ns=500), tmp_path)
    recording, replayed = replay_on(tmp_path, FixedRateBackend(gbps=100.0, latency_ns=500))
    assert replayed.result.simulated_ns == live.simulated_ns
    assert replayed.result.kernels == live.kernels
    assert replayed.result.collectives == live.collectives
    assert comparison(recording, replayed)["difference_pct"] == 0.0


def test_replay_on_a_slower_network_waits_then_keeps_the_recorded_cpu_gap(tmp_path: Path
                                                                           ) -> None:
    fast = record([ddp_step, ddp_step], FixedRateBackend(gbps=100.0, latency_ns=500), tmp_path)
    recording, replayed = replay_on(tmp_path, FixedRateBackend(gbps=10.0, latency_ns=500))
    slow = replayed.result
    assert slow.simulated_ns > fast.simulated_ns
    first = slow.collectives[0]
    assert first.end_ns - first.start_ns > 5 * (fast.collectives[0].end_ns
                                                - fast.collectives[0].start_ns)
    # Rank 0's second kernel is launched 20 us of CPU after its first sync returned.
    sync_end = min(b.end_ns for b in slow.blocked if b.rank == 0)
    second = [k for k in slow.kernels if k.rank == 0 and k.stream == 0][1]
    assert second.start_ns == sync_end + 20_000
    assert comparison(recording, replayed)["difference_pct"] > 0


def test_old_or_missing_recordings_are_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="no execution graph"):
        load_recording(tmp_path)
    record([ddp_step, ddp_step], FixedRateBackend(gbps=100.0, latency_ns=500), tmp_path)
    meta_path = tmp_path / "graph" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "version": 0}))
    with pytest.raises(RecordingError, match="format version 0"):
        load_recording(tmp_path)
    meta_path.write_text(json.dumps(meta))
    (tmp_path / "graph" / "rank1.jsonl").write_text("{not json\n")
    with pytest.raises(RecordingError, match="rank1.jsonl:1"):
        load_recording(tmp_path)


def test_a_truncated_rank_stops_the_replay_with_its_reason(tmp_path: Path) -> None:
    record([ddp_step, ddp_step], FixedRateBackend(gbps=100.0, latency_ns=500), tmp_path)
    rank0 = tmp_path / "graph" / "rank0.jsonl"
    rank0.write_text("".join(rank0.read_text().splitlines(keepends=True)[:-1]))  # no exit
    with pytest.raises(RankCrashed, match="without an 'exit' record"):
        replay_on(tmp_path, FixedRateBackend(gbps=100.0, latency_ns=500))


def test_a_deduplicated_run_replays_with_its_mirrors(tmp_path: Path) -> None:
    def step(r: ScriptedRank) -> None:
        for _ in range(2):
            r.kernel(50_000)
            r.collective("all_reduce", range(8), 8 << 20, stream=0)  # after the kernel
            r.cpu(7_000)
            r.sync()

    classes = RankClasses(1, 8, 1)
    live = record([step] * 8, FixedRateBackend(gbps=100.0, latency_ns=500), tmp_path, classes)
    assert sorted(p.name for p in (tmp_path / "graph").glob("rank*.jsonl")) == \
        ["rank0.jsonl", "rank7.jsonl"]
    recording, replayed = replay_on(tmp_path, FixedRateBackend(gbps=100.0, latency_ns=500))
    assert recording.classes == classes
    assert [r.clock_ns for r in replayed.result.ranks] == [r.clock_ns for r in live.ranks]
    assert len(replayed.result.collectives) == len(live.collectives) == 2
