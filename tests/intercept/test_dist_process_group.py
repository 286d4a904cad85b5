"""The phantora process group: every c10d and functional collective becomes the right
``Collective`` message (nccl-tests sizes, per-group sequence numbers, sub-groups, p2p pairs),
work and futures wait on streams, and init needs no network.

Each test plays one rank of a larger job in this process: nothing is exchanged between ranks,
so ``init_process_group`` with world size 4 works with no other process.
"""

import os
import time
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._subclasses.fake_tensor import FakeTensorMode

from intercept.distributed import process_group
from intercept.runtime import RankRuntime
from tests.intercept.dist_coordinator import FakeCoordinator, make_runtime
from wire.messages import Collective, EventRecord, Op, StreamWait, Sync

WORLD = 4
RANK = 1


@pytest.fixture
def rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RankRuntime, FakeCoordinator]]:
    """Rank 1 of 4 with ``init_process_group("nccl")`` done the torchrun way (env://)."""
    for name, value in {"RANK": str(RANK), "WORLD_SIZE": str(WORLD),
                        "MASTER_ADDR": "192.0.2.1", "MASTER_PORT": "9"}.items():
        monkeypatch.setenv(name, value)  # an unroutable address: any connect would hang
    runtime, coordinator = make_runtime(rank=RANK, world_size=WORLD)
    runtime.make_current()
    with process_group.installed():
        dist.init_process_group("nccl")
        try:
            yield runtime, coordinator
        finally:
            dist.destroy_process_group()
            RankRuntime._current = None


def all_ops(runtime: RankRuntime, coordinator: FakeCoordinator) -> list[Op]:
    """Everything the rank sent, once it has exited."""
    runtime.finish(0)
    coordinator.join()
    return coordinator.ops


def collectives(ops: list[Op]) -> list[Collective]:
    return [op for op in ops if isinstance(op, Collective)]


def summary(ops: list[Op]) -> list[tuple[object, ...]]:
    return [(c.op, c.nbytes, c.dtype_bytes, c.root, c.splits) for c in collectives(ops)]


def test_init_needs_no_rendezvous_and_reports_the_job(rank: tuple) -> None:
    start = time.monotonic()
    assert (dist.get_rank(), dist.get_world_size()) == (RANK, WORLD)
    assert dist.is_nccl_available()
    assert dist.get_backend() == process_group.BACKEND_NAME
    assert isinstance(dist.group.WORLD, process_group.PhantomProcessGroup)
    assert time.monotonic() - start < 1.0


def test_sizes_follow_nccl_tests(rank: tuple) -> None:
    runtime, coordinator = rank
    t = torch.ones(6, dtype=torch.bfloat16)  # 12 bytes
    dist.all_reduce(t)
    dist.broadcast(t, src=2)
    dist.reduce(t, dst=3)
    dist.all_gather_single(torch.empty(24, dtype=torch.bfloat16), t)
    dist.all_gather([torch.empty(6, dtype=torch.bfloat16) for _ in range(WORLD)], t)
    dist.reduce_scatter_single(torch.empty(6, dtype=torch.bfloat16),
                               torch.ones(24, dtype=torch.bfloat16))
    dist.reduce_scatter(torch.empty(6, dtype=torch.bfloat16),
                        [torch.ones(6, dtype=torch.bfloat16) for _ in range(WORLD)])
    dist.all_to_all_single(torch.empty(8), torch.ones(8))
    dist.all_to_all_single(torch.empty(8), torch.ones(8, 3), [2] * 4, [1, 0, 4, 3])
    dist.all_to_all([torch.empty(2) for _ in range(WORLD)], [torch.ones(2) for _ in range(WORLD)])
    dist.gather(torch.ones(5), dst=0)
    dist.scatter(torch.empty(5), None, src=0)
    dist.barrier()
    ops = all_ops(runtime, coordinator)
    assert summary(ops) == [
        ("all_reduce", 12, 2, 0, None),
        ("broadcast", 12, 2, 2, None),
        ("reduce", 12, 2, 3, None),
        ("all_gather", 48, 2, 0, None),       # the gathered output
        ("all_gather", 48, 2, 0, None),
        ("reduce_scatter", 48, 2, 0, None),   # the full input
        ("reduce_scatter", 48, 2, 0, None),
        ("all_to_all", 32, 4, 0, None),       # what each rank sends
        ("all_to_allv", 96, 4, 0, (12, 0, 48, 36)),  # bytes to each group rank (rows of 12 B)
        # a list of tensors is an all_to_allv even when this rank's row is even: whether the
        # whole split matrix is, only the coordinator sees
        ("all_to_allv", 32, 4, 0, (8, 8, 8, 8)),
        ("all_to_allv", 20, 4, 0, (20, 0, 0, 0)),    # gather: everything to the root
        ("all_to_allv", 0, 4, 0, (0, 0, 0, 0)),      # scatter: a non-root sends nothing
        ("all_reduce", process_group.BARRIER_NBYTES, 4, 0, None),
    ]
    # and the bytes each all_to_allv receives from each group rank (checked against the rows)
    assert [c.recv_splits for c in collectives(ops) if c.op == "all_to_allv"] == [
        (8, 8, 8, 8), (8, 8, 8, 8), (0, 0, 0, 0), (20, 0, 0, 0)]


def test_sequence_numbers_count_per_group_and_subgroups_name_their_ranks(rank: tuple) -> None:
    runtime, coordinator = rank
    pair = dist.new_group([1, 2])
    others = dist.new_group([0, 3])  # not a member: every rank creates every group
    gloo = dist.new_group([0, 1, 2], backend="gloo")  # mapped to phantora too
    assert others == dist.GroupMember.NON_GROUP_MEMBER
    assert dist.get_backend(gloo) == process_group.BACKEND_NAME
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.all_reduce(t, group=pair)
    dist.all_reduce(t)
    dist.broadcast(t, src=2, group=pair)  # global rank 2 is group rank 1
    dist.all_reduce(t, group=gloo)
    ops = collectives(all_ops(runtime, coordinator))
    world, sub = dist.group.WORLD.group_name, pair.group_name
    assert [(c.group, c.seq, c.ranks) for c in ops] == [
        (world, 0, (0, 1, 2, 3)), (sub, 0, (1, 2)), (world, 1, (0, 1, 2, 3)),
        (sub, 1, (1, 2)), (gloo.group_name, 0, (0, 1, 2))]
    assert ops[3].root == 1
    assert len({world, sub, gloo.group_name}) == 3
    assert ops[0].stream == ops[2].stream != ops[1].stream  # one NCCL stream per group
    assert all(c.stream < 0 for c in ops)  # never one of the device's streams


def test_p2p_is_numbered_per_ordered_pair_on_its_own_stream(rank: tuple) -> None:
    runtime, coordinator = rank
    t = torch.ones(3)
    dist.send(t, dst=2)
    dist.recv(t, src=2)
    dist.send(t, dst=2)
    dist.send(t, dst=0)
    ops = [dist.P2POp(dist.irecv, t, 0), dist.P2POp(dist.isend, t, 0)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    ops = collectives(all_ops(runtime, coordinator))
    assert [(c.op, c.ranks, c.seq, c.nbytes) for c in ops] == [
        ("send", (1, 2), 0, 12), ("recv", (2, 1), 0, 12), ("send", (1, 2), 1, 12),
        ("send", (1, 0), 0, 12), ("recv", (0, 1), 0, 12), ("send", (1, 0), 1, 12)]
    streams = {c.ranks: c.stream for c in ops}
    assert len(set(streams.values())) == 4  # each direction of each pair
    assert ops[0].stream == ops[2].stream


def test_the_collective_stream_waits_for_the_caller_and_wait_makes_the_caller_wait(
        rank: tuple) -> None:
    runtime, coordinator = rank
    work = dist.all_reduce(torch.ones(4), async_op=True)
    assert isinstance(work, process_group.PhantomWork)
    before_wait = runtime.clock.now_ns()
    work.wait()
    assert runtime.clock.now_ns() - before_wait < 10_000  # no host block: one op's cost
    ops = all_ops(runtime, coordinator)
    ready, comm_wait, coll, done, caller_wait = ops[:5]
    assert ready == EventRecord(ready.event, 0, ready.at_ns)  # the caller's (default) stream
    assert comm_wait == StreamWait(coll.stream, ready.event, comm_wait.at_ns)
    assert done == EventRecord(work.event, coll.stream, done.at_ns)
    assert caller_wait == StreamWait(0, work.event, caller_wait.at_ns)
    assert all(not b.sync for b in coordinator.batches)


def test_barrier_blocks_the_host_until_the_collective_completes(rank: tuple) -> None:
    runtime, coordinator = rank
    dist.barrier()
    syncs = [b.sync for b in coordinator.batches if b.sync]
    assert len(syncs) == 1 and syncs[0].kind == "event"
    assert runtime.clock.now_ns() >= syncs[0].at_ns + coordinator.reply_delay_ns


def test_is_completed_asks_the_coordinator(rank: tuple) -> None:
    runtime, coordinator = rank
    work = dist.all_reduce(torch.ones(4), async_op=True)
    assert work.is_completed()  # the fake coordinator answers every query with 1
    assert [b.sync for b in coordinator.batches if b.sync] == [
        Sync("query", work.event, coordinator.batches[-1].sync.at_ns)]


def test_futures_are_done_at_once_and_synchronise_streams_like_cuda_futures(rank: tuple) -> None:
    runtime, coordinator = rank
    t = torch.ones(4)
    work = dist.all_reduce(t, async_op=True)
    future = work.get_future()
    assert future.done() and future.value()[0] is t
    seen = []
    chained = future.then(lambda fut: seen.append(fut.value()[0]) or "next")
    assert chained.wait() == "next" and seen == [t]
    future.wait()
    waits = [op for op in all_ops(runtime, coordinator)
             if isinstance(op, StreamWait) and op.event == work.event]
    assert len(waits) == 2  # before the then-callback, and in wait()


def test_ddp_gradients_wait_for_their_all_reduce_at_the_end_of_backward(rank: tuple) -> None:
    runtime, coordinator = rank
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)), bucket_cap_mb=1e-4)
    for _ in range(2):  # step 2 runs with rebuilt buckets
        model(torch.randn(2, 8)).sum().backward()
    ops = all_ops(runtime, coordinator)
    reduces = [c for c in collectives(ops) if c.op == "all_reduce"]
    assert [c.nbytes for c in reduces] == [576, 288, 288]  # one bucket, then two per layer
    done = {op.event for op in ops if isinstance(op, EventRecord) and op.stream < 0}
    end_waits = [op.event for op in ops if isinstance(op, StreamWait) and op.stream == 0
                 and op.event in done]
    assert len(end_waits) == len(collectives(ops))  # the broadcasts wait() too


class _FunctionalMode(FakeTensorMode):
    """What SimFakeMode does with functional collectives: compute the fake result, report it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if func.namespace == "_c10d_functional":
            process_group.handle_functional_collective(func, args, kwargs or {}, out)
        return out


def test_functional_collectives_are_issued_and_wait_tensor_waits(rank: tuple) -> None:
    runtime, coordinator = rank
    group = dist.group.WORLD
    with _FunctionalMode(allow_non_fake_inputs=True):
        x = torch.ones(8, 4)  # 128 bytes
        summed = funcol.all_reduce(x, "sum", group)
        _ = summed + 1  # first use waits
        gathered = funcol.all_gather_single(x, 0, group)
        _ = gathered * 2
        scattered = funcol.reduce_scatter_single(x, "sum", 0, group)
        _ = scattered * 2
        shuffled = funcol.all_to_all_single(x, [2, 2, 2, 2], [2, 2, 2, 2], group)
        _ = shuffled * 2
    ops = all_ops(runtime, coordinator)
    assert summary(ops) == [("all_reduce", 128, 4, 0, None), ("all_gather", 512, 4, 0, None),
                            ("reduce_scatter", 128, 4, 0, None),
                            ("all_to_allv", 128, 4, 0, (32, 32, 32, 32))]
    done = [op.event for op in ops if isinstance(op, EventRecord) and op.stream < 0]
    waited = [op.event for op in ops if isinstance(op, StreamWait) and op.stream == 0]
    assert waited == done


def test_device_mesh_groups_are_phantora_groups(rank: tuple) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    runtime, coordinator = rank
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dist.all_reduce(torch.ones(2), group=mesh["tp"].get_group())
    dist.all_reduce(torch.ones(2), group=mesh["dp"].get_group())
    ops = collectives(all_ops(runtime, coordinator))
    assert [c.ranks for c in ops] == [(0, 1), (1, 3)]  # rank 1: tp row 0, dp column 1


def test_init_from_a_url_and_explicit_arguments_also_stays_local(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    with process_group.installed():
        dist.init_process_group("nccl", init_method="tcp://192.0.2.1:9", rank=2, world_size=3)
        try:
            assert (dist.get_rank(), dist.get_world_size()) == (2, 3)
        finally:
            dist.destroy_process_group()
    with process_group.installed(), pytest.raises(ValueError, match="RANK is not set"):
        dist.init_process_group("nccl")


def test_patches_are_removed_on_exit() -> None:
    original = dist.distributed_c10d.rendezvous
    with process_group.installed():
        assert dist.distributed_c10d.rendezvous is not original
    assert dist.distributed_c10d.rendezvous is original
    assert not os.environ.get("PHANTORA_LEFTOVER")
