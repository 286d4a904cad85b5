"""CoordinatorClient against an in-process fake coordinator: batching, syncs, heartbeats, exit."""

import os
import threading
import time
from multiprocessing import Pipe

import numpy as np
import pytest

from intercept.host_time.clock import VirtualClock
from intercept.host_time.host_spread import load_host_spread
from intercept.process.client import CoordinatorClient
from tests.intercept.dist_coordinator import FakeCoordinator
from wire.messages import (Collective, EventRecord, Exit, IssuedOp, Kernel, Reply, Sync,
                           ValuePayload, ValueUpdate)


def make_client(op_cost_ns: int | None = 10, **kwargs: object,
                ) -> tuple[CoordinatorClient, VirtualClock, FakeCoordinator]:
    ours, theirs = Pipe()
    clock = VirtualClock(epoch_ns=0, op_cost_ns=op_cost_ns)
    client = CoordinatorClient(ours, clock, **kwargs)  # type: ignore[arg-type]
    return client, clock, FakeCoordinator(theirs)


def add_kernel(client: CoordinatorClient, clock: VirtualClock, stream: int = 0) -> None:
    clock.tick()
    client.add(Kernel, stream=stream, duration_ns=5, name="aten::mm")


def test_ops_wait_in_the_buffer_until_a_flush_and_carry_their_launch_time() -> None:
    client, clock, coordinator = make_client()
    for _ in range(3):
        add_kernel(client, clock)
    time.sleep(0.05)
    assert coordinator.batches == []  # no heartbeat thread started, no flush yet
    client.flush()
    coordinator.wait_for_batches(1)
    [batch] = coordinator.batches
    assert [op.at_ns for op in batch.ops] == [10, 20, 30]
    assert batch.clock_ns == 30 and batch.sync is None and batch.exit is None


def test_a_full_buffer_is_sent_at_once() -> None:
    client, clock, coordinator = make_client(max_buffered_ops=4)
    for _ in range(9):
        add_kernel(client, clock)
    coordinator.wait_for_batches(2)
    assert [len(b.ops) for b in coordinator.batches] == [4, 4]


def test_sync_sends_pending_ops_blocks_for_the_reply_and_moves_the_clock() -> None:
    client, clock, coordinator = make_client()
    add_kernel(client, clock)
    reply = client.sync("event", 7)
    [batch] = coordinator.batches
    assert batch.ops[0].at_ns == 10
    assert batch.sync == Sync("event", 7, 10)
    assert reply.time_ns == 10 + coordinator.reply_delay_ns
    assert clock.now_ns() == reply.time_ns


def test_query_does_not_move_the_clock() -> None:
    client, clock, coordinator = make_client()
    reply = client.sync("query", 3)
    assert reply.value == 1
    assert clock.now_ns() == 0


def test_close_sends_the_rest_with_the_exit_and_nothing_may_follow() -> None:
    client, clock, coordinator = make_client()
    add_kernel(client, clock)
    client.close(Exit(2, "Traceback ..."))
    coordinator.join()
    [batch] = coordinator.batches
    assert len(batch.ops) == 1 and batch.exit == Exit(2, "Traceback ...")
    with pytest.raises(RuntimeError, match="Exit"):
        add_kernel(client, clock)


def test_heartbeat_raises_the_promise_while_the_script_computes() -> None:
    client, clock, coordinator = make_client(op_cost_ns=None, heartbeat_interval_s=0.002)
    client.start()
    end = time.process_time() + 0.1
    while time.process_time() < end:
        pass  # the script busy on the CPU, no ops
    coordinator.wait_for_batches(2)
    client.close(Exit(0))
    coordinator.join()
    promises = [b.clock_ns for b in coordinator.batches]
    assert promises == sorted(promises)
    assert promises[-2] > 0  # a heartbeat promised progress before the exit


def test_heartbeat_sends_pending_ops_and_is_silent_when_nothing_changes() -> None:
    client, clock, coordinator = make_client(heartbeat_interval_s=0.002)
    client.start()
    add_kernel(client, clock)
    coordinator.wait_for_batches(1)
    time.sleep(0.05)  # reproducible clock: it does not move, nothing pending
    assert len(coordinator.batches) == 1
    assert len(coordinator.batches[0].ops) == 1


def test_nothing_is_sent_while_a_sync_is_outstanding() -> None:
    """A blocked rank promises nothing: the heartbeat stays quiet until the reply."""
    ours, theirs = Pipe()
    clock = VirtualClock(epoch_ns=0, op_cost_ns=None)
    client = CoordinatorClient(ours, clock, heartbeat_interval_s=0.002)
    client.start()
    replied = threading.Event()

    quiet: list[bool] = []

    def slow_coordinator() -> None:
        batch = theirs.recv()
        while batch.sync is None:  # heartbeats sent before the sync are fine
            batch = theirs.recv()
        time.sleep(0.05)
        quiet.append(not theirs.poll(0))  # no heartbeat came while the rank was blocked
        theirs.send(Reply(batch.sync.at_ns))  # always reply: a failure must not hang the rank
        replied.set()

    thread = threading.Thread(target=slow_coordinator)
    thread.start()
    client.sync("device", 0)
    thread.join()
    assert replied.is_set()
    assert quiet == [True]


def test_every_op_is_at_or_after_the_previous_batch_promise() -> None:
    """The protocol's promise holds with a busy heartbeat racing the script's ops."""
    client, clock, coordinator = make_client(op_cost_ns=None, heartbeat_interval_s=0.0005,
                                             max_buffered_ops=7)
    client.start()
    for i in range(2_000):
        client.add(EventRecord, event=i, stream=0)
    client.close(Exit(0))
    coordinator.join()
    promise = -1
    for batch in coordinator.batches:
        assert all(op.at_ns >= promise for op in batch.ops)
        assert all(op.at_ns <= batch.clock_ns for op in batch.ops)
        promise = batch.clock_ns
    assert sum(len(b.ops) for b in coordinator.batches) == 2_000


def test_a_forked_child_may_not_use_the_rank_connection() -> None:
    client, clock, coordinator = make_client()
    pid = os.fork()
    if pid == 0:
        try:
            add_kernel(client, clock)
        except RuntimeError as error:
            os._exit(0 if "forked child" in str(error) else 2)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert coordinator.batches == []


def test_ops_and_collectives_charge_the_host_cost_table() -> None:
    from hwmodel.compute import KernelSpec
    from tests.intercept.dist_coordinator import make_runtime

    runtime, _ = make_runtime(op_cost_ns=0)
    table = runtime.host_costs
    charged = []
    for issue in (lambda: runtime.kernel(KernelSpec("aten::add_"), stream=0),
                  lambda: runtime.kernel(KernelSpec("aten::mm"), stream=0),
                  lambda: runtime.kernel(KernelSpec("aten::_foreach_add_"), stream=0, tensors=9),
                  lambda: runtime.host_op("view"),
                  lambda: runtime.collective(group="0", ranks=(0,), op="all_reduce", nbytes=64,
                                             dtype_bytes=4, stream=0)):
        before = runtime.clock.now_ns()
        issue()
        charged.append(runtime.clock.now_ns() - before)
    assert charged == [table.op_ns("add_", launches=True), table.op_ns("mm", launches=True),
                       table.op_ns("_foreach_add_", launches=True, tensors=9),
                       table.op_ns("view", launches=False), table.collective_ns("all_reduce")]
    # a view < an in-place add < a matrix product < a collective's call path, as measured
    assert charged[3] < charged[0] < charged[1] < charged[4]
    assert charged[2] == table.families_ns["foreach"] + 8 * table.foreach_per_tensor_ns \
        - table.script_call_ns
    assert runtime.clock.host_split().table_ns == sum(charged)


def test_a_collective_on_two_ranks_costs_more_the_more_host_work_since_the_last() -> None:
    from tests.intercept.dist_coordinator import make_runtime

    runtime, _ = make_runtime(op_cost_ns=0)
    model = runtime.host_costs.group_collectives

    def charged() -> int:
        before = runtime.clock.now_ns()
        runtime.collective(group="0", ranks=(0, 1), op="all_reduce", nbytes=64, dtype_bytes=4,
                           stream=0)
        return runtime.clock.now_ns() - before

    first, back_to_back = charged(), charged()
    runtime.clock.charge(2_000_000)  # 2 ms waiting (a sleep, a synchronize): nothing goes cold
    after_wait = charged()
    runtime.clock.charge_table(2_000_000)  # 2 ms of other host work
    after_work = charged()
    call = runtime.host_costs.script_call_ns
    assert first == model.call_ns("all_reduce", None) - call
    assert back_to_back == after_wait == model.call_ns("all_reduce", 0) - call
    wait = load_host_spread().wait_ns(2_000_000, 2)  # for the slower host, after that work
    assert after_work == model.call_ns("all_reduce", 2_000_000) - call + wait
    assert back_to_back < after_work - wait < first


def test_a_collective_waits_for_the_slowest_host_of_its_group_after_host_work() -> None:
    from tests.intercept.dist_coordinator import make_runtime

    runtime, coordinator = make_runtime(op_cost_ns=0)
    spread = load_host_spread()

    def charged(ranks: tuple[int, ...], work_ns: int = 0) -> int:
        runtime.clock.charge_table(work_ns)  # host work since the last collective
        before = runtime.clock.now_ns()
        runtime.collective(group=str(len(ranks)), ranks=ranks, op="all_reduce", nbytes=64,
                           dtype_bytes=4, stream=0)
        return runtime.clock.now_ns() - before

    charged((0, 1))
    after_waits = charged((0, 1), 2_000_000)
    call_only = charged((0, 1))  # back to back: no work, no wait
    four = charged((0, 1, 2, 3), 2_000_000) - charged((0, 1, 2, 3))
    one = charged((0,), 2_000_000) - charged((0,))
    assert after_waits - call_only > spread.wait_ns(2_000_000, 2) * 0.9
    assert four > after_waits - call_only > 0 and one <= 0
    runtime.finish(0)
    coordinator.join()
    waited = coordinator.batches[-1].exit.stats.host_time.lockstep_wait_ns
    assert waited == spread.wait_ns(2_000_000, 2) + spread.wait_ns(2_000_000, 4)


def test_the_exit_reports_the_host_speed_factor_in_force() -> None:
    from tests.intercept.dist_coordinator import make_runtime

    runtime, coordinator = make_runtime()  # reproducible: the script's CPU is not converted
    runtime.finish(0, peak_memory_bytes=5, peak_reserved_bytes=8)
    coordinator.join()
    stats = coordinator.batches[-1].exit.stats
    assert (stats.peak_memory_bytes, stats.peak_reserved_bytes, stats.host_speed_factor) == (
        5, 8, 1.0)


class _SlowAdvanceClock(VirtualClock):
    """Takes a while to jump to a sync reply, as a loaded machine may: widens the window
    between the reply's arrival and the clock's jump, where a batch could promise too little."""

    def advance_to(self, t_ns: int) -> None:
        time.sleep(0.01)
        super().advance_to(t_ns)


def test_no_heartbeat_promises_less_than_a_sync_reply_already_gave() -> None:
    """The coordinator raises a blocked rank's promise to the reply's time when it answers a
    sync, so a heartbeat sent after the reply arrived but before the clock jumped to it must not
    promise the earlier clock (the engine would stop with "rank N's clock went back"). The
    engine's own rule (``LiveEngine._ingest``) is checked here."""
    ours, theirs = Pipe()
    clock = _SlowAdvanceClock(epoch_ns=0, op_cost_ns=None)
    client = CoordinatorClient(ours, clock, heartbeat_interval_s=0.0005)
    coordinator = FakeCoordinator(theirs, reply_delay_ns=1_000_000_000)
    client.start()
    for _ in range(5):
        client.sync("device", 0)
    client.close(Exit(0))
    coordinator.join()
    promise = -1
    for batch in coordinator.batches:
        assert batch.clock_ns >= promise, f"promise went back from {promise} to {batch.clock_ns}"
        promise = batch.clock_ns
        if batch.sync is not None:
            promise = max(promise, batch.sync.at_ns + coordinator.reply_delay_ns)


def test_ops_of_another_thread_during_a_sync_are_stamped_after_its_reply() -> None:
    """The same window from a second thread: an op it stamps while a sync is outstanding is
    stamped after the reply moved the clock, never earlier than the promise the coordinator
    counts from its answer."""
    ours, theirs = Pipe()
    clock = _SlowAdvanceClock(epoch_ns=0, op_cost_ns=None)
    client = CoordinatorClient(ours, clock, max_buffered_ops=1)
    coordinator = FakeCoordinator(theirs, reply_delay_ns=1_000_000_000)
    stop = threading.Event()

    def other_thread() -> None:  # an autograd or DDP thread issuing ops meanwhile
        i = 0
        while not stop.is_set():
            client.add(EventRecord, event=i, stream=1)
            i += 1

    thread = threading.Thread(target=other_thread)
    thread.start()
    for _ in range(5):
        client.sync("device", 0)
    stop.set()
    thread.join()
    client.close(Exit(0))
    coordinator.join()
    promise = -1
    for batch in coordinator.batches:
        assert batch.clock_ns >= promise, f"promise went back from {promise} to {batch.clock_ns}"
        assert all(op.at_ns >= promise for op in batch.ops)
        promise = batch.clock_ns
        if batch.sync is not None:
            promise = max(promise, batch.sync.at_ns + coordinator.reply_delay_ns)


def add_pending_collective(client: CoordinatorClient, value_id: int) -> None:
    """A collective whose inputs await an earlier collective's values."""
    client.add(Collective, stream=-1, group="0", ranks=(0, 1), seq=value_id,
               op=IssuedOp.ALL_REDUCE, nbytes=4, dtype_bytes=4,
               values=ValuePayload(value_id, None, True, pending=True))


def kinds(messages: list[object]) -> list[str]:
    return [type(m).__name__ for m in messages]


@pytest.mark.parametrize("computed", ["before the collective is added",
                                      "while it waits in the buffer",
                                      "after it was sent"])
def test_a_value_update_follows_the_collective_it_completes(computed: str) -> None:
    """Megatron on 8 ranks: the receiver thread computed a pending collective's inputs while
    the collective was still buffered, the update overtook it, and the coordinator stopped
    ("sent values for collective value id ..., which awaits none")."""
    client, clock, coordinator = make_client()
    values = np.ones(1, dtype=np.float32)
    if computed == "before the collective is added":
        client.send_values(7, values)
    add_pending_collective(client, 7)
    if computed == "while it waits in the buffer":
        client.send_values(7, values)
    client.flush()
    if computed == "after it was sent":
        client.send_values(7, values)
    client.close(Exit(0))
    coordinator.join()
    assert kinds(coordinator.messages) == ["Batch", "ValueUpdate", "Batch"]
    update = coordinator.messages[1]
    assert isinstance(update, ValueUpdate) and update.value_id == 7
    assert update.data is not None and update.data.tolist() == [1.0]
