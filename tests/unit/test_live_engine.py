"""The live engine driven by scripted fake ranks (threads over real Pipe pairs, no processes).

Each rank is a short script against :class:`ScriptedRank`, which speaks the rank side of
:mod:`wire` the way the real client does: ops buffered with the rank's virtual
clock, a batch sent at each sync (then the clock moves to the reply), heartbeats on demand.
"""

import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing import Pipe
from multiprocessing.connection import Connection

import pytest

from hwmodel.catalogue import lookup_gpu
from hwmodel.errors import DeadlockError, RankCrashed, SimulationError
from phantora.cluster.topology import HostSpec, Topology, single_host
from phantora.collectives import NcclConfig, SystemInfo
from phantora.engine.live import LiveEngine
from phantora.engine.results import LiveResult
from phantora.network.base import NetworkBackend
from phantora.network.flow import FluidBackend
from tests.unit.fixed_rate import FixedRateBackend
from wire.messages import Batch, Collective, EventRecord, Exit, Kernel, Op, Reply, StreamWait, Sync

NCCL_STREAM = 7


class ScriptedRank:
    """The rank side of the protocol, for a test script running in a thread."""

    def __init__(self, rank: int, conn: Connection, jitter: random.Random | None = None) -> None:
        self.rank = rank
        self.conn = conn
        self.clock_ns = 0
        self.ops: list[Op] = []
        self.seqs: dict[tuple[str, ...], int] = defaultdict(int)
        self.replies: list[Reply] = []
        self.exited = False
        self._jitter = jitter

    def cpu(self, ns: int) -> None:
        """The script computes on the CPU for ``ns`` of virtual time."""
        self.clock_ns += ns

    def kernel(self, duration_ns: int, stream: int = 0, name: str = "aten::mm") -> None:
        self.ops.append(Kernel(stream, self.clock_ns, duration_ns, name))

    def record(self, event: int, stream: int = 0) -> None:
        self.ops.append(EventRecord(event, stream, self.clock_ns))

    def wait_event(self, stream: int, event: int) -> None:
        self.ops.append(StreamWait(stream, event, self.clock_ns))

    def collective(self, op: str, ranks: Sequence[int], nbytes: int, *, group: str = "world",
                   stream: int = NCCL_STREAM, dtype_bytes: int = 4, root: int = 0,
                   splits: tuple[int, ...] | None = None, seq: int | None = None) -> None:
        if seq is None:
            seq = self.seqs[(group,)]
            self.seqs[(group,)] += 1
        self.ops.append(Collective(stream, self.clock_ns, group, tuple(ranks), seq, op, nbytes,
                                   dtype_bytes, root, splits))

    def p2p(self, op: str, src: int, dst: int, nbytes: int, *, stream: int = NCCL_STREAM) -> None:
        seq = self.seqs[("p2p", str(src), str(dst))]
        self.seqs[("p2p", str(src), str(dst))] += 1
        self.ops.append(Collective(stream, self.clock_ns, "world", (src, dst), seq, op, nbytes,
                                   4))

    def flush(self) -> None:
        """Send buffered ops (or a heartbeat when there are none) with the current clock."""
        self._send(Batch(self.clock_ns, self.ops))

    def sync(self, kind: str = "device", target: int = 0) -> int:
        """Block until the target completed; returns the reply's time."""
        self._send(Batch(self.clock_ns, self.ops, sync=Sync(kind, target, self.clock_ns)))  # type: ignore[arg-type]
        reply = self.conn.recv()
        self.replies.append(reply)
        self.clock_ns = max(self.clock_ns, reply.time_ns)
        return int(reply.time_ns)

    def query(self, event: int) -> int:
        self._send(Batch(self.clock_ns, self.ops, sync=Sync("query", event, self.clock_ns)))
        reply = self.conn.recv()
        self.replies.append(reply)
        return int(reply.value)

    def exit(self, status: int = 0, traceback: str = "") -> None:
        self._send(Batch(self.clock_ns, self.ops, exit=Exit(status, traceback)))
        self.exited = True

    def _send(self, batch: Batch) -> None:
        if self._jitter is not None:
            time.sleep(self._jitter.random() * 0.002)
        self.conn.send(batch)
        self.ops = []


Script = Callable[[ScriptedRank], None]


@dataclass
class Run:
    result: LiveResult
    ranks: list[ScriptedRank] = field(default_factory=list)


def make_topology(gpus: int) -> Topology:
    return single_host(HostSpec(gpus_per_host=gpus, nvlink_gbps=3600.0, nvlink_latency_ns=300,
                                nic_gbps=400.0))


def start(scripts: Sequence[Script], backend: NetworkBackend | None = None, *,
          jitter_seed: int | None = None, **engine_kwargs: object
          ) -> tuple[LiveEngine, list[ScriptedRank], list[threading.Thread], list[BaseException],
                     list[Connection]]:
    """An engine and one thread per script (not started); scripts exit at their end."""
    topology = make_topology(len(scripts))
    system = SystemInfo.from_topology(topology, lookup_gpu("h100"))
    pipes = [Pipe() for _ in scripts]
    jitter = None if jitter_seed is None else random.Random(jitter_seed)
    ranks = [ScriptedRank(rank, child, None if jitter is None else random.Random(jitter.random()))
             for rank, (_, child) in enumerate(pipes)]
    errors: list[BaseException] = []

    def body(script: Script, rank: ScriptedRank) -> None:
        try:
            script(rank)
            if not rank.exited:
                rank.exit()
        except (EOFError, OSError):
            pass  # the engine stopped (an error under test) and closed the pipe
        except BaseException as error:  # noqa: BLE001 - re-raised by the caller
            errors.append(error)
            rank.conn.close()  # the engine sees the rank vanish instead of waiting for it

    threads = [threading.Thread(target=body, args=(script, rank), daemon=True)
               for script, rank in zip(scripts, ranks, strict=True)]
    engine = LiveEngine(topology, system, NcclConfig(),
                        backend or FixedRateBackend(gbps=8.0, latency_ns=100),
                        {rank: parent for rank, (parent, _) in enumerate(pipes)},
                        list(range(len(scripts))),
                        **{"kernel_gap_ns": 0, **engine_kwargs})  # type: ignore[arg-type]
    return engine, ranks, threads, errors, [parent for parent, _ in pipes]


def run(scripts: Sequence[Script], backend: NetworkBackend | None = None, *,
        jitter_seed: int | None = None, **engine_kwargs: object) -> Run:
    """Run ``scripts`` as ranks 0..n-1 to the end; the engine's errors propagate."""
    engine, ranks, threads, errors, parents = start(scripts, backend, jitter_seed=jitter_seed,
                                                    **engine_kwargs)
    for thread in threads:
        thread.start()
    try:
        result = engine.run()
    except SimulationError:
        if errors:  # a script's own assertion failed: that is the error to show
            raise errors[0] from None
        raise
    finally:
        for parent in parents:
            parent.close()
        for thread in threads:
            thread.join(timeout=5)
    if errors:
        raise errors[0]
    return Run(result, ranks)


def fluid(gpus: int) -> FluidBackend:
    return FluidBackend(make_topology(gpus))


# -- streams and events ---------------------------------------------------------------------

def test_kernels_on_one_stream_run_in_order_and_start_no_earlier_than_launch() -> None:
    def script(r: ScriptedRank) -> None:
        r.kernel(1000, name="a")
        r.cpu(10)
        r.kernel(500, name="b")  # launched at 10, waits for a
        r.cpu(5000)
        r.kernel(200, name="c")  # launched at 5010, stream idle since 1500
        assert r.sync() == 5210

    result = run([script]).result
    spans = [(k.name, k.start_ns, k.end_ns) for k in result.kernels]
    assert spans == [("a", 0, 1000), ("b", 1000, 1500), ("c", 5010, 5210)]
    assert result.ranks[0].gpu_end_ns == 5210
    assert result.ranks[0].blocked_ns == 200


def test_streams_run_concurrently_and_event_waits_order_them() -> None:
    def script(r: ScriptedRank) -> None:
        r.kernel(1000, stream=1, name="producer")
        r.record(event=5, stream=1)
        r.kernel(300, stream=2, name="independent")  # not ordered after the producer
        r.wait_event(stream=2, event=5)
        r.kernel(100, stream=2, name="consumer")
        r.wait_event(stream=3, event=99)  # never recorded: a no-op
        r.kernel(50, stream=3, name="free")
        assert r.sync("event", 5) == 1000
        assert r.sync("stream", 2) == 1100
        assert r.sync("stream", 3) == 50  # launched at 0, finished long ago

    result = run([script]).result
    spans = {k.name: (k.stream, k.start_ns, k.end_ns) for k in result.kernels}
    assert spans == {"producer": (1, 0, 1000), "independent": (2, 0, 300),
                     "consumer": (2, 1000, 1100), "free": (3, 0, 50)}


def test_a_wait_refers_to_the_record_before_it_in_program_order() -> None:
    def script(r: ScriptedRank) -> None:
        r.kernel(100, stream=1, name="first")
        r.record(event=1, stream=1)
        r.wait_event(stream=2, event=1)  # waits for "first" only
        r.kernel(1000, stream=1, name="second")
        r.record(event=1, stream=1)  # re-recorded after "second"
        r.kernel(10, stream=2, name="after_first")
        assert r.sync("event", 1) == 1100  # the latest record

    spans = {k.name: (k.start_ns, k.end_ns) for k in run([script]).result.kernels}
    assert spans["after_first"] == (100, 110)


def test_work_behind_a_collective_waits_for_it_and_query_reads_its_state() -> None:
    nbytes = 1 << 20

    def script(r: ScriptedRank) -> None:
        r.collective("all_reduce", [0, 1], nbytes)
        r.record(event=3, stream=NCCL_STREAM)
        r.kernel(100, stream=NCCL_STREAM, name="after")
        assert r.query(3) == 0  # at clock 0 the all-reduce cannot have finished
        r.cpu(10_000_000)
        assert r.query(3) == 1  # finished while the engine simulated up to 10 ms
        end = r.sync("event", 3)
        assert end < r.clock_ns == 10_000_000
        assert r.sync("stream", NCCL_STREAM) == end + 100

    result = run([script, script]).result
    (record,) = result.collectives
    assert (record.op, record.group, record.seq, record.bytes, record.ranks) == (
        "all_reduce", "world", 0, nbytes, (0, 1))
    after = [k for k in result.kernels if k.name == "after"]
    assert [(k.start_ns, k.end_ns) for k in after] == [(record.end_ns, record.end_ns + 100)] * 2
    assert record.end_ns > record.start_ns == 0


# -- the protocol's guarantees ----------------------------------------------------------------

def _lateness_scripts(late_ns: int, nbytes: int) -> list[Script]:
    def rank(lateness: int) -> Script:
        def script(r: ScriptedRank) -> None:
            r.kernel(20_000, stream=0)
            r.cpu(1_000 + lateness)
            r.record(event=1, stream=0)
            r.wait_event(stream=NCCL_STREAM, event=1)
            r.collective("all_reduce", [0, 1, 2], nbytes)
            r.record(event=2, stream=NCCL_STREAM)
            r.sync("event", 2)
        return script
    return [rank(0), rank(late_ns), rank(0)]


@pytest.mark.parametrize("backend_kind", ["fixed", "fluid"])
def test_a_late_rank_delays_everyones_completion_by_exactly_its_lateness(backend_kind: str) -> None:
    nbytes, late_ns = 4 << 20, 123_457

    def backend() -> NetworkBackend:
        return FixedRateBackend(gbps=800.0, latency_ns=500) if backend_kind == "fixed" else fluid(3)

    on_time = run(_lateness_scripts(0, nbytes), backend())
    late = run(_lateness_scripts(late_ns, nbytes), backend())
    # Everyone's stream reaches the collective when its kernel ends (20 us), except the late one.
    assert on_time.result.collectives[0].start_ns == 20_000
    assert late.result.collectives[0].start_ns == 1_000 + late_ns
    assert late.result.collectives[0].start_ns > 20_000  # the lateness is really on the path
    shift = late.result.collectives[0].start_ns - 20_000
    for before, after in zip(on_time.ranks, late.ranks, strict=True):
        assert after.replies[-1].time_ns - before.replies[-1].time_ns == shift
    duration = [r.result.collectives[0].end_ns - r.result.collectives[0].start_ns
                for r in (on_time, late)]
    assert duration[0] == duration[1] > 0


class InstrumentedBackend:
    """Wraps a backend and records the clock whenever something is injected or advanced."""

    def __init__(self, inner: NetworkBackend) -> None:
        self.inner = inner
        self.injections: list[tuple[int, int]] = []  # (start_ns, backend now at injection)
        self.clocks: list[int] = []  # backend clock after each advance

    def add_flow(self, src: int, dst: int, nbytes: int, start_ns: int, tag: int = 0) -> int:
        self.injections.append((start_ns, self.inner.now_ns()))
        return self.inner.add_flow(src, dst, nbytes, start_ns, tag)

    def advance_to(self, t_ns: int):  # type: ignore[no-untyped-def]
        done = self.inner.advance_to(t_ns)
        self.clocks.append(self.inner.now_ns())
        return done

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


class SerialBackend(FixedRateBackend):
    """One shared link, taken in the order flows are added: results depend on that order, so
    any nondeterminism in the engine's injections shows up in the times."""

    def __init__(self) -> None:
        super().__init__(gbps=80.0, latency_ns=200)
        self._link_free_ns = 0

    def add_flow(self, src: int, dst: int, nbytes: int, start_ns: int, tag: int = 0) -> int:
        begin_ns = max(start_ns, self._link_free_ns)
        self._link_free_ns = begin_ns + self.duration_ns(nbytes) - self.latency_ns
        return super().add_flow(src, dst, nbytes, begin_ns, tag)


def _busy_scripts() -> list[Script]:
    """Four ranks: overlapping groups, p2p, staggered CPU work, several streams."""
    def script(r: ScriptedRank) -> None:
        pair = [0, 1] if r.rank < 2 else [2, 3]
        # Both pairs start an all-gather at the same instant: a tie the engine must break
        # the same way whichever pair's messages arrive first.
        r.kernel(5_000, stream=8)
        r.collective("all_gather", pair, 1 << 20, group=f"pair{pair[0]}", stream=8)
        r.flush()
        for step in range(3):
            r.kernel(5_000 + 1_000 * r.rank, stream=0)
            r.cpu(700 * (r.rank + 1) + 50 * step)
            r.record(event=10 + step, stream=0)
            r.wait_event(stream=NCCL_STREAM, event=10 + step)
            r.collective("all_reduce", [0, 1, 2, 3], 1 << 20)
            r.collective("all_gather", pair, 1 << 18, group=f"pair{pair[0]}", stream=8)
            peer = r.rank ^ 1
            if r.rank % 2 == 0:
                r.p2p("send", r.rank, peer, 1 << 16, stream=9)
            else:
                r.p2p("recv", peer, r.rank, 1 << 16, stream=9)
            r.record(event=20 + step, stream=NCCL_STREAM)
            r.wait_event(stream=0, event=20 + step)
            if step == 1:
                r.sync("device")
            else:
                r.flush()
        r.sync("device")
    return [script] * 4


def test_nothing_is_injected_before_the_backend_clock() -> None:
    backend = InstrumentedBackend(fluid(4))
    result = run(_busy_scripts(), backend, jitter_seed=1).result  # type: ignore[arg-type]
    assert len(result.collectives) == 2 + 3 * (1 + 2 + 2)
    assert backend.injections, "the scenario must put flows on the network"
    assert all(start >= now for start, now in backend.injections)
    assert backend.clocks == sorted(backend.clocks)


@pytest.mark.parametrize("backend", [fluid, lambda _: SerialBackend()], ids=["fluid", "serial"])
def test_two_runs_give_identical_results_whatever_the_message_timing(
        backend: Callable[[int], NetworkBackend]) -> None:
    results = [run(_busy_scripts(), backend(4), jitter_seed=seed, record_flows=True).result
               for seed in (1, 2, 3)]
    assert results[0].flows and results[0].kernels and results[0].collective_spans
    assert results[0] == results[1] == results[2]


def _overlap_scripts(late: int) -> list[Script]:
    """Rank 0 reaches an all-reduce and launches kernels beside it; rank 1 reaches it later
    in virtual time. ``late`` names the rank whose messages come 0.3 s late in wall time: with
    rank 1 late, rank 0's kernels arrive before anyone knows when the all-reduce moves data."""
    def rank0(r: ScriptedRank) -> None:
        for _ in range(2):  # the second all-reduce is expected to last as long as the first
            r.collective("all_reduce", [0, 1], 1 << 22)
            for _ in range(16):
                r.cpu(2_000)
                r.kernel(3_000, stream=0)
            if late == 0:
                time.sleep(0.3)
            r.sync("device")

    def rank1(r: ScriptedRank) -> None:
        for _ in range(2):
            r.cpu(20_000)
            r.collective("all_reduce", [0, 1], 1 << 22)
            if late == 1:
                time.sleep(0.3)
            r.sync("device")
    return [rank0, rank1]


def test_kernels_beside_a_collective_do_not_depend_on_which_rank_reports_first() -> None:
    """The overlap model reads what the simulation knows at a kernel's start, not what had
    arrived when its op came in (it once placed rank 0's kernels against the all-reduce's
    reach by rank 1 only when rank 1's message happened to come first)."""
    results = [run(_overlap_scripts(late), fluid(2), record_flows=True).result
               for late in (0, 1)]
    assert results[0].ranks[0].overlap_extra_ns > 0, "the kernels must overlap the all-reduce"
    assert results[0] == results[1]


def test_a_rank_that_breaks_its_clock_promise_is_rejected_before_anything_runs() -> None:
    backend = InstrumentedBackend(FixedRateBackend(gbps=8.0, latency_ns=0))

    def script(r: ScriptedRank) -> None:
        r.cpu(5_000)
        r.flush()
        r.clock_ns = 1_000  # a broken clock stamps the op...
        r.collective("all_reduce", [0], 64)
        r.clock_ns = 6_000  # ...while the batch looks fine
        r.sync()

    with pytest.raises(SimulationError, match=r"rank 0 sent Collective.* at 1000 ns, earlier "
                                              r"than its clock had promised \(5000 ns\)"):
        run([script], backend)  # type: ignore[arg-type]
    assert backend.injections == []


# -- conservative sync: heartbeats release blocked ranks ---------------------------------------

def test_heartbeats_of_a_busy_rank_let_blocked_ranks_go() -> None:
    """Ranks 0 and 1 all-reduce and block on it; rank 2 is outside the group, busy on the CPU.
    The all-reduce's end may only be simulated once rank 2's clock has passed it."""
    backend = InstrumentedBackend(FixedRateBackend(gbps=8.0, latency_ns=100))
    released = threading.Event()
    end_ns: list[int] = []

    def member(r: ScriptedRank) -> None:
        r.collective("all_reduce", [0, 1], 1 << 16, group="pair")
        end_ns.append(r.sync())
        released.set()

    def busy(r: ScriptedRank) -> None:
        r.cpu(1_000)
        r.flush()  # heartbeat: clock 1 us, long before the all-reduce can end
        assert not released.wait(0.3), "a rank was released before the horizon passed its event"
        assert max(backend.clocks, default=0) < 1_000
        r.cpu(10_000_000)
        r.flush()  # heartbeat: 10 ms, past the end
        assert released.wait(5), "the heartbeat did not release the blocked ranks"
        r.cpu(1_000)

    result = run([member, member, busy], backend).result  # type: ignore[arg-type]
    (record,) = result.collectives
    assert end_ns == [record.end_ns] * 2 and 1_000 < record.end_ns < 10_000_000
    assert result.counts["heartbeats"] == 2
    assert result.ranks[2].clock_ns == 10_002_000


# -- failures -----------------------------------------------------------------------------------

def test_a_missing_rank_is_a_deadlock_with_a_report() -> None:
    def waits(r: ScriptedRank) -> None:
        r.cpu(2_000)
        r.collective("all_reduce", [0, 1], 4096)
        r.sync()

    def leaves(r: ScriptedRank) -> None:
        r.cpu(500)

    started = time.monotonic()
    with pytest.raises(DeadlockError) as caught:
        run([waits, leaves])
    assert time.monotonic() - started < 5
    assert str(caught.value) == (
        "deadlock: every rank is blocked or has exited and nothing is left to simulate\n"
        "ranks:\n"
        "  rank 0: blocked since 2000 ns in sync(device); stream 7 waits for all_reduce "
        "(group 'world', seq 0, 4096 bytes)\n"
        "  rank 1: exited at 500 ns\n"
        "incomplete collectives:\n"
        "  all_reduce (group 'world', seq 0, 4096 bytes), group ranks [0, 1]: issued by ranks "
        "[0]; not issued by ranks [1]")


def test_a_collective_stuck_behind_a_missing_one_is_reported_as_queued() -> None:
    def rank0(r: ScriptedRank) -> None:
        r.collective("all_reduce", [0, 1], 4096, seq=0)
        r.collective("all_reduce", [0, 1], 4096, seq=1)
        r.sync()

    def rank1(r: ScriptedRank) -> None:  # skipped seq 0
        r.collective("all_reduce", [0, 1], 4096, seq=1)
        r.sync()

    with pytest.raises(DeadlockError) as caught:
        run([rank0, rank1])
    lines = str(caught.value).splitlines()
    assert lines[2:] == [
        "  rank 0: blocked since 0 ns in sync(device); stream 7 waits for all_reduce (group "
        "'world', seq 0, 4096 bytes)",
        "  rank 1: blocked since 0 ns in sync(device); stream 7 waits for all_reduce (group "
        "'world', seq 1, 4096 bytes)",
        "incomplete collectives:",
        "  all_reduce (group 'world', seq 0, 4096 bytes), group ranks [0, 1]: issued by ranks "
        "[0]; not issued by ranks [1]",
        "  all_reduce (group 'world', seq 1, 4096 bytes), group ranks [0, 1]: issued by ranks "
        "[0, 1]; not issued by ranks []; still queued behind earlier GPU work on ranks [0]",
    ]


def test_send_and_recv_of_different_sizes_are_a_mismatch() -> None:
    with pytest.raises(DeadlockError, match=(
            r"collective mismatch in group 'world' between ranks 0 -> 1 seq 0: rank 0 issued "
            r"send \(1024 bytes, dtype 4 bytes, ranks \[0, 1\]\); rank 1 issued recv \(2048 "
            r"bytes")):
        run([lambda r: r.p2p("send", 0, 1, 1024),
             lambda r: (r.cpu(10), r.p2p("recv", 0, 1, 2048), r.sync())])


def test_mismatched_collectives_are_reported_at_once() -> None:
    def rank0(r: ScriptedRank) -> None:
        r.collective("all_reduce", [0, 1], 4096)
        r.sync()

    def rank1(r: ScriptedRank) -> None:
        r.cpu(100)
        r.collective("all_reduce", [0, 1], 8192)
        r.sync()

    with pytest.raises(DeadlockError, match=(
            r"collective mismatch in group 'world' seq 0: rank 0 issued all_reduce \(4096 bytes, "
            r"dtype 4 bytes, ranks \[0, 1\]\); rank 1 issued all_reduce \(8192 bytes, dtype 4 "
            r"bytes, ranks \[0, 1\]\)")):
        run([rank0, rank1])


def test_different_ops_at_one_sequence_number_are_a_mismatch() -> None:
    def rank0(r: ScriptedRank) -> None:
        r.collective("all_reduce", [0, 1], 4096)
        r.sync()

    def rank1(r: ScriptedRank) -> None:
        r.cpu(100)
        r.collective("broadcast", [0, 1], 4096)
        r.sync()

    with pytest.raises(DeadlockError, match=r"rank 1 issued broadcast \(4096 bytes, dtype 4 "
                                            r"bytes, ranks \[0, 1\], root 0\)"):
        run([rank0, rank1])


def test_ranks_that_exit_with_a_collective_pending_are_reported() -> None:
    def issues(r: ScriptedRank) -> None:
        r.collective("all_gather", [0, 1], 1024, group="tp")  # async, never waited for

    with pytest.raises(DeadlockError, match=(
            r"every rank exited, but some collectives never completed(.|\n)*all_gather \(group "
            r"'tp', seq 0, 1024 bytes\), group ranks \[0, 1\]: issued by ranks \[0\]; not "
            r"issued by ranks \[1\]")):
        run([issues, lambda r: None])


def test_a_rank_that_raises_stops_the_run_with_its_traceback() -> None:
    traceback = 'Traceback (most recent call last):\n  File "train.py", line 3\nValueError: boom\n'

    def waits(r: ScriptedRank) -> None:
        r.collective("all_reduce", [0, 1], 4096)
        r.sync()

    def crashes(r: ScriptedRank) -> None:
        r.cpu(100)
        r.exit(status=1, traceback=traceback)

    with pytest.raises(RankCrashed) as caught:
        run([waits, crashes])
    assert caught.value.rank == 1
    assert caught.value.traceback == traceback
    assert str(caught.value).startswith("rank 1 failed:\nTraceback")


def test_a_rank_whose_process_vanishes_is_a_crash() -> None:
    def waits(r: ScriptedRank) -> None:
        r.collective("all_reduce", [0, 1], 4096)
        r.sync()

    def vanishes(r: ScriptedRank) -> None:
        r.flush()
        r.conn.close()
        r.exited = True

    with pytest.raises(RankCrashed, match="rank 1 failed:\nthe rank's process ended without an "
                                          "exit message"):
        run([waits, vanishes])


# -- p2p, all_to_allv, barrier --------------------------------------------------------------------

def test_send_and_recv_pair_up_and_complete_together() -> None:
    def sender(r: ScriptedRank) -> None:
        r.p2p("send", 0, 1, 1 << 20)
        r.sync()

    def receiver(r: ScriptedRank) -> None:
        r.cpu(3_000)
        r.p2p("recv", 0, 1, 1 << 20)
        r.sync()

    result = run([sender, receiver]).result
    (record,) = result.collectives
    assert (record.op, record.ranks, record.start_ns) == ("send_recv", (0, 1), 3_000)
    assert [s.op for s in result.collective_spans] == ["send", "recv"]
    assert {s.end_ns for s in result.collective_spans} == {record.end_ns}
    assert record.end_ns > 3_000 and record.flows > 0


def test_all_to_allv_uses_every_members_row_and_barrier_synchronises() -> None:
    rows = {0: (0, 1 << 20, 0), 1: (0, 0, 1 << 10), 2: (1 << 12, 0, 0)}

    def script(r: ScriptedRank) -> None:
        r.cpu(1_000 * r.rank)
        r.collective("all_to_allv", [0, 1, 2], 0, splits=rows[r.rank])
        r.collective("all_reduce", [0, 1, 2], 0)  # a barrier: an empty all-reduce
        r.sync()

    result = run([script] * 3).result
    a2a, barrier = result.collectives
    assert (a2a.op, a2a.bytes, a2a.start_ns) == ("all_to_allv", 1 << 20, 2_000)
    assert barrier.op == "all_reduce" and barrier.start_ns == barrier.end_ns == a2a.end_ns
    assert [r.clock_ns for r in result.ranks] == [a2a.end_ns] * 3


def test_unknown_ops_and_malformed_groups_are_named() -> None:
    with pytest.raises(SimulationError, match="rank 0 issued unknown collective op 'allreduce'"):
        run([lambda r: r.collective("allreduce", [0], 4)])
    with pytest.raises(SimulationError, match=r"with group ranks \[1\], which must hold each "
                                              "rank once and include the issuing rank"):
        run([lambda r: r.collective("all_reduce", [1], 4), lambda r: None])


def test_back_to_back_kernels_leave_the_front_end_gap_between_them() -> None:
    def script(r: "ScriptedRank") -> None:
        r.kernel(1000, name="a")
        r.kernel(500, name="b")  # queued behind a: starts the gap after a ends
        r.cpu(10_000)
        r.kernel(200, name="c")  # launched long after b ended: starts at its launch
        r.sync()

    result = run([script], kernel_gap_ns=300).result
    spans = {span.name: span for span in result.kernels}
    assert spans["b"].start_ns == spans["a"].end_ns + 300
    assert spans["c"].start_ns > spans["b"].end_ns + 300
