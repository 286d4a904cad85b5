"""Rank deduplication: the grid of replica classes, and mirrored ranks in the live engine.

The engine tests run scripted ranks (``tests.unit.test_live_engine.ScriptedRank``) twice, every
rank live and deduplicated, and compare what the engine reports.
"""

import threading
from collections.abc import Callable
from multiprocessing import Pipe

import pytest

from hwmodel.catalogue import lookup_gpu
from hwmodel.errors import RegroupRanks
from phantora.collectives import NcclConfig, SystemInfo
from phantora.engine.live import LiveEngine
from phantora.engine.rank_classes import RankClasses
from phantora.engine.results import LiveResult
from phantora.network.flow import FluidBackend
from tests.unit.test_live_engine import ScriptedRank, make_topology

# -- the grid ---------------------------------------------------------------------------------


def mesh_groups(dp: int, tp: int, pp: int = 1) -> list[tuple[int, ...]]:
    """The groups of a row-major [pp, dp, tp] DeviceMesh."""
    def rank(p: int, d: int, t: int) -> int:
        return (p * dp + d) * tp + t
    groups = [tuple(rank(p, d, t) for t in range(tp)) for p in range(pp) for d in range(dp)]
    groups += [tuple(rank(p, d, t) for d in range(dp)) for p in range(pp) for t in range(tp)]
    groups += [tuple(rank(p, d, t) for p in range(pp)) for d in range(dp) for t in range(tp)]
    return groups


def test_pure_data_parallel_runs_two_ranks_live() -> None:
    classes = RankClasses.choose(1024, [tuple(range(1024))])
    assert classes == RankClasses(1, 1024, 1)
    assert classes.live_ranks() == [0, 1023]
    assert classes.mirrors() == {rank: 0 for rank in range(1, 1023)}


def test_tensor_parallel_inside_data_parallel_keeps_one_replica_of_each_tp_rank() -> None:
    classes = RankClasses.choose(8, mesh_groups(dp=4, tp=2))
    assert classes == RankClasses(1, 4, 2)
    assert classes.live_ranks() == [0, 1, 6, 7]
    assert classes.mirrors() == {2: 0, 3: 1, 4: 0, 5: 1}


def test_pipeline_stages_are_classes_of_their_own() -> None:
    groups = mesh_groups(dp=4, tp=1, pp=2) + [(0, 4), (4, 0)]  # a stage-to-stage send
    classes = RankClasses.choose(8, groups)
    assert classes == RankClasses(2, 4, 1)
    assert classes.live_ranks() == [0, 3, 4, 7]
    assert classes.representative(5) == 4


def test_groups_that_fit_no_grid_leave_every_rank_live() -> None:
    ring = [(r, (r + 1) % 8) for r in range(8)]  # context-parallel ring passing
    assert not RankClasses.choose(8, ring).deduplicated
    assert RankClasses.choose(8, ring).live_ranks() == list(range(8))
    assert not RankClasses.choose(2, [(0, 1)]).deduplicated  # two replicas: both run anyway


def test_a_grid_found_wrong_is_not_chosen_again() -> None:
    first = RankClasses.choose(8)
    assert first == RankClasses(1, 8, 1)
    second = RankClasses.choose(8, excluded=[first])
    assert second != first and second.live_count == 4


def test_shift_stays_in_the_class() -> None:
    classes = RankClasses(2, 4, 3)  # 24 ranks
    for rank in range(24):
        twin = classes.shifted(rank, 3)
        assert classes.representative(twin) == classes.representative(rank)
        assert classes.shifted(twin, -3) == rank


# -- the engine -------------------------------------------------------------------------------

Script = Callable[[ScriptedRank], None]


def run_ranks(scripts: list[Script], classes: RankClasses | None) -> LiveResult:
    """Run the live ranks' scripts (all when ``classes`` is None) in threads; the engine
    mirrors the others."""
    world = len(scripts)
    live = (classes or RankClasses.all_live(world)).live_ranks()
    pipes = {rank: Pipe() for rank in live}
    ranks = {rank: ScriptedRank(rank, child) for rank, (_, child) in pipes.items()}
    topology = make_topology(world)
    engine = LiveEngine(topology, SystemInfo.from_topology(topology, lookup_gpu("h100")),
                        NcclConfig(), FluidBackend(topology),
                        {rank: parent for rank, (parent, _) in pipes.items()},
                        list(range(world)), kernel_gap_ns=0, classes=classes)

    def body(rank: ScriptedRank) -> None:
        try:
            scripts[rank.rank](rank)
            rank.exit()
        except (EOFError, OSError):
            pass

    threads = [threading.Thread(target=body, args=(ranks[r],), daemon=True) for r in live]
    for thread in threads:
        thread.start()
    try:
        return engine.run()
    finally:
        for parent, _ in pipes.values():
            parent.close()
        for thread in threads:
            thread.join(timeout=5)


def data_parallel_step(r: ScriptedRank) -> None:
    for step in range(3):
        for layer in range(4):
            r.kernel(40_000 + 1000 * layer)
            r.cpu(3_000)
        r.record(event=step)
        r.wait_event(stream=7, event=step)
        r.collective("all_reduce", range(8), 64 << 20)
        r.kernel(20_000, stream=7, name="optimizer")
        r.cpu(5_000)
        r.sync()


def tp_dp_step(r: ScriptedRank) -> None:
    tp_group = (r.rank - r.rank % 2, r.rank - r.rank % 2 + 1)
    dp_group = tuple(range(r.rank % 2, 8, 2))
    for step in range(2):
        r.kernel(30_000)
        r.collective("all_reduce", tp_group, 8 << 20, group=f"tp{tp_group[0] // 2}")
        r.kernel(30_000)
        r.collective("all_reduce", dp_group, 32 << 20, group=f"dp{r.rank % 2}")
        r.cpu(2_000)
        r.sync()


def send_to_next_rank(r: ScriptedRank) -> None:
    """An all_to_allv whose row is relative to the rank (its neighbour gets everything): a
    mirror's row must move with it."""
    row = tuple((4 << 20) if j == (r.rank + 1) % 8 else (1 << 10) for j in range(8))
    for _ in range(2):
        r.kernel(10_000)
        r.collective("all_to_allv", range(8), sum(row), splits=row)
        r.sync()


@pytest.mark.parametrize(("script", "classes"), [
    (data_parallel_step, RankClasses(1, 8, 1)),
    (tp_dp_step, RankClasses(1, 4, 2)),
    (send_to_next_rank, RankClasses(1, 8, 1)),
])
def test_mirrored_ranks_give_what_live_ranks_give(script: Script, classes: RankClasses) -> None:
    live = run_ranks([script] * 8, None)
    mirrored = run_ranks([script] * 8, classes)
    assert [r.clock_ns for r in mirrored.ranks] == [r.clock_ns for r in live.ranks]
    assert [r.gpu_end_ns for r in mirrored.ranks] == [r.gpu_end_ns for r in live.ranks]
    assert [r.kernels for r in mirrored.ranks] == [r.kernels for r in live.ranks]
    def timeline(result: LiveResult) -> list[tuple[object, ...]]:  # mirrors' group names differ
        return sorted((c.op, c.ranks, c.seq, c.bytes, c.start_ns, c.end_ns)
                      for c in result.collectives)

    assert timeline(mirrored) == timeline(live)
    assert mirrored.counts["mirrored_collectives"] == \
        sum(r.collectives for r in live.ranks if r.rank not in classes.live_ranks())
    assert {span.rank for span in mirrored.kernels} == set(classes.live_ranks())


def test_a_witness_with_other_gpu_work_makes_the_run_regroup() -> None:
    def rank0_validates(r: ScriptedRank) -> None:
        r.collective("all_reduce", range(8), 1 << 20)
        r.kernel(1_000_000)
        if r.rank == 0:
            r.kernel(800_000, name="validation")
        r.collective("all_reduce", range(8), 1 << 20)
        r.sync()

    with pytest.raises(RegroupRanks, match=r"rank 7 ran other GPU work than rank 0.*before "
                                           r"collective #2, 1 kernels of 1000.0 us against 2 "
                                           r"kernels of 1800.0 us") as raised:
        run_ranks([rank0_validates] * 8, RankClasses(1, 8, 1))
    assert raised.value.wrong == RankClasses(1, 8, 1)


def test_a_witness_with_other_collectives_makes_the_run_regroup() -> None:
    def rank0_broadcasts(r: ScriptedRank) -> None:
        if r.rank == 0:
            r.collective("broadcast", range(8), 1 << 20)
        r.collective("all_reduce", range(8), 1 << 20, seq=0 if r.rank else 1)
        r.sync()

    with pytest.raises(RegroupRanks, match=r"rank 7 ran other collectives than rank 0.*"
                                           r"#1 is all_reduce .* rank 0's is broadcast"):
        run_ranks([rank0_broadcasts] * 8, RankClasses(1, 8, 1))


def test_small_differences_in_kernels_are_tolerated() -> None:
    def rank0_logs(r: ScriptedRank) -> None:
        for _ in range(2):
            r.kernel(500_000)
            if r.rank == 0:
                r.kernel(2_000, name="Memcpy DtoH")  # loss.item() for a log line
            r.collective("all_reduce", range(8), 1 << 20)
            r.sync()

    result = run_ranks([rank0_logs] * 8, RankClasses(1, 8, 1))
    assert result.classes == RankClasses(1, 8, 1)


def test_a_group_the_grid_does_not_fit_makes_the_run_regroup() -> None:
    def pairs(r: ScriptedRank) -> None:
        pair = (r.rank - r.rank % 2, r.rank - r.rank % 2 + 1)
        r.collective("all_reduce", pair, 1 << 20, group=f"pair{pair[0]}")
        r.sync()

    with pytest.raises(RegroupRanks, match=r"ranks \[0, 1\], a group the grid 1 x 8 x 1") \
            as raised:
        run_ranks([pairs] * 8, RankClasses(1, 8, 1))
    assert (0, 1) in raised.value.groups
    assert RankClasses.choose(8, raised.value.groups) == RankClasses(1, 4, 2)
