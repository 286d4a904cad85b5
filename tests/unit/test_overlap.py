"""Compute/communication overlap: the stretch rule, the measured curves and the stream engine."""

import csv
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from hwmodel.compute.spec import MEMCPY_HTOD
from phantora.engine.overlap import (
    MEASURED_OVERLAP,
    OverlapModel,
    SlowdownCurve,
    collective_end_ns,
    stretched_end_ns,
)
from phantora.engine.streams import Completion, RankDevice
from wire.messages import Collective, Kernel

RESULTS = Path(__file__).parents[2] / "scripts/measure/data/overlap/h200x2/results.csv"
FLAT = OverlapModel(SlowdownCurve(((1, 2.0),)), SlowdownCurve(((1, 1.5),)))
"""Factor 2 for compute kernels, 1.5 for memory-bound ones, whatever their duration; collectives
are not slowed by kernels."""
MUTUAL = OverlapModel(SlowdownCurve(((1, 2.0),)), SlowdownCurve(((1, 1.5),)),
                      SlowdownCurve(((1, 2.0),)), SlowdownCurve(((1, 4.0),)))
"""FLAT, and kernels slow a collective beside them 2x (compute) or 4x (memory-bound)."""


class Port:
    """A collective's share as the stream sees it; the test resolves its start and end."""

    def __init__(self) -> None:
        self.started = Completion()
        self.done = Completion()
        self.ready_ns: int | None = None

    def ready(self, ready_ns: int) -> None:
        self.ready_ns = ready_ns

    def describe(self) -> str:
        return "all_reduce (test)"


def device(overlap: OverlapModel | None = FLAT) -> tuple[RankDevice, list[Port]]:
    ports: list[Port] = []

    def issue(rank: int, op: Collective) -> Port:
        ports.append(Port())
        return ports[-1]

    return RankDevice(0, issue, overlap, kernel_gap_ns=0), ports


def collective(at_ns: int, stream: int = 7) -> Collective:
    return Collective(stream, at_ns, "world", (0, 1), 0, "all_reduce", 1 << 20, 2)


def mm(at_ns: int, duration_ns: int, stream: int = 0) -> Kernel:
    return Kernel(stream, at_ns, duration_ns, "aten::mm", flops=10**9)


# --- the rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("busy", "end_ns"), [
    ([], 100),                               # no collective
    ([(-50, -10)], 100),                     # ended before the kernel started
    ([(-10, 1000)], 200),                    # in flight throughout: all of it slowed
    ([(-10, 50)], 125),                      # ends inside: 25 of work by 50, 75 after
    ([(30, 1000)], 170),                     # starts inside: 30 at full speed first
    ([(20, 40)], 110),                       # a window inside the kernel
    ([(0, 40), (20, 60)], 130),              # overlapping windows count once
    ([(0, 10), (90, 300)], 120),             # 5 of work by 10, 85 by 90, 15 left at half
])
def test_stretched_end(busy: list[tuple[int, int]], end_ns: int) -> None:
    assert stretched_end_ns(0, 100, 2.0, busy) == end_ns


def test_no_stretch_at_factor_one_or_zero_duration() -> None:
    assert stretched_end_ns(5, 100, 1.0, [(0, 1000)]) == 105
    assert stretched_end_ns(5, 0, 2.0, [(0, 1000)]) == 5


def test_curve_interpolates_in_log_duration_and_clamps() -> None:
    curve = SlowdownCurve(((1_000, 2.0), (100_000, 1.0)))
    assert curve.factor(10) == 2.0
    assert curve.factor(10_000) == pytest.approx(1.5)
    assert curve.factor(10**9) == 1.0
    with pytest.raises(ValueError, match="ascend"):
        SlowdownCurve(((2, 1.5), (1, 1.2)))
    with pytest.raises(ValueError, match="below 1"):
        SlowdownCurve(((1, 0.9),))


def test_factor_by_kind() -> None:
    assert FLAT.factor("aten::mm", 10**9, 1000) == 2.0
    assert FLAT.factor("aten::add_.Tensor", 0, 1000) == 1.5
    assert FLAT.factor("aten::some_unknown_op", 0, 1000) == 1.5  # costed by bytes too
    assert FLAT.factor(MEMCPY_HTOD, 0, 1000) == 1.0  # copy engine over PCIe


def measured_points(column: str, coll_bytes: int | None = None
                    ) -> dict[str, list[tuple[int, float]]]:
    """Per kernel kind: (kernel alone ns, mean of ``column``) from results.csv, over every
    collective (of ``coll_bytes`` if given)."""
    alone: defaultdict[str, list[float]] = defaultdict(list)
    slowdown: defaultdict[str, list[float]] = defaultdict(list)
    kind: dict[str, str] = {}
    with RESULTS.open(newline="") as handle:
        for row in csv.DictReader(handle):
            alone[row["kernel"]].append(float(row["k_alone_mean_us"]))
            if coll_bytes is None or int(row["coll_bytes"]) == coll_bytes:
                slowdown[row["kernel"]].append(float(row[column]))
            kind[row["kernel"]] = row["kind"]
    return {
        which: sorted((round(statistics.fmean(alone[name]) * 1000),
                       round(statistics.fmean(slowdown[name]), 3))
                      for name in alone if kind[name] == which)
        for which in ("compute", "memory")
    }


def test_measured_curves_match_the_measurement() -> None:
    """Each kernel curve point is the kernel's alone time and slowdown averaged over
    results.csv; each collective curve point the collectives' slowdown beside that kernel,
    averaged over the 256 MiB calls."""
    kernels = measured_points("k_slowdown")
    assert list(MEASURED_OVERLAP.compute.points) == kernels["compute"]
    assert list(MEASURED_OVERLAP.memory.points) == kernels["memory"]
    collectives = measured_points("c_slowdown", coll_bytes=256 << 20)
    assert list(MEASURED_OVERLAP.collective_by_compute.points) == collectives["compute"]
    assert list(MEASURED_OVERLAP.collective_by_memory.points) == collectives["memory"]


@pytest.mark.parametrize(("kernels", "end_ns"), [
    ([], 1000),                                  # nothing beside it
    ([(-500, 0, 2.0)], 1000),                    # ended as the collective started
    ([(-500, 300, 2.0)], 1300),                  # no SMs until the running kernel ends
    ([(200, 400, 2.0)], 1100),                   # 200 alone, 200 at half speed (100), 700 left
    ([(-100, 100, 2.0), (100, 300, 4.0)], 1250),  # waits to 100, 50 of work by 300, 950 left
    ([(2000, 3000, 2.0)], 1000),                 # starts after the collective ended
])
def test_collective_end(kernels: list[tuple[int, int, float]], end_ns: int) -> None:
    assert collective_end_ns(0, 1000, kernels) == end_ns


# --- on the simulated GPU ---------------------------------------------------------------------


def test_kernel_overlapping_a_collective_in_flight_is_slowed() -> None:
    gpu, ports = device()
    gpu.apply(collective(0))
    ports[0].done.resolve(5000)
    gpu.apply(mm(10, 1000))
    assert ports[0].ready_ns == 0
    assert (gpu.spans[0].start_ns, gpu.spans[0].end_ns) == (10, 2010)
    assert (gpu.slowed_kernels, gpu.overlap_extra_ns) == (1, 1000)


def test_kernel_after_the_collective_ended_is_not_slowed() -> None:
    gpu, ports = device()
    gpu.apply(collective(0))
    ports[0].done.resolve(500)
    gpu.apply(mm(600, 1000))
    assert (gpu.spans[0].start_ns, gpu.spans[0].end_ns) == (600, 1600)
    assert gpu.slowed_kernels == 0


def test_pending_collective_lasts_as_long_as_its_last_occurrence() -> None:
    gpu, ports = device()
    gpu.apply(collective(0))
    ports[0].done.resolve(300)  # in flight 0..300 on this GPU
    gpu.apply(collective(1000))  # the same op again, end pending: expected 1000..1300
    gpu.apply(mm(1100, 1000))  # 1100..1300 at half speed (100 of work), 900 left after
    assert gpu.spans[0].end_ns == 2200


def test_pending_collective_never_seen_before_is_left_out() -> None:
    gpu, ports = device()
    gpu.apply(collective(0))
    ports[0].done.resolve(300)
    gpu.apply(Collective(7, 1000, "world", (0, 1), 1, "all_reduce", 2 << 20, 2))  # other size
    gpu.apply(mm(1100, 1000))
    assert gpu.spans[0].end_ns == 2100


def test_collective_ending_inside_the_kernel_slows_only_the_overlap() -> None:
    gpu, ports = device()
    gpu.apply(collective(0))
    ports[0].done.resolve(500)
    gpu.apply(mm(100, 1000))  # 100..500 at half speed (200 of work), 800 left after
    assert gpu.spans[0].end_ns == 1300


def test_waiting_for_a_late_peer_slows_kernels_but_is_not_expected_again() -> None:
    """NCCL's blocks hold their SMs from this GPU's reach on, waiting included; a pending
    occurrence is expected to last as long as the last one moved data, not waited."""
    gpu, ports = device()
    gpu.apply(collective(0))
    ports[0].started.resolve(1000)  # the peer reached it at 1000
    ports[0].done.resolve(1300)
    gpu.apply(mm(10, 1000))  # 10..1300 at half speed (645 of work), 355 left after
    assert gpu.spans[0].end_ns == 1655
    gpu.apply(collective(2000))  # pending: expected 2000..2300, not 2000..3300
    gpu.apply(mm(2200, 1000))  # 2200..2300 at half speed (50 of work), 950 left after
    assert gpu.spans[1].end_ns == 3250


def test_collective_queued_behind_a_pending_one_is_expected_in_flight() -> None:
    """DDP's next bucket all-reduce and FSDP2's next all-gather wait in their stream behind a
    collective whose end the network has not reached yet; they still slow the kernels that
    run when their stream should reach them."""
    gpu, ports = device()
    gpu.apply(collective(0))
    ports[0].done.resolve(300)  # lasted 300
    gpu.apply(collective(1000))  # pending: expected 1000..1300
    gpu.apply(collective(1100))  # queued behind it: expected 1300..1600
    gpu.apply(mm(1400, 1000))  # 1400..1600 at half speed (100 of work), 900 left after
    assert gpu.spans[0].end_ns == 2500


def test_memory_bound_kernel_uses_its_own_factor() -> None:
    gpu, ports = device()
    gpu.apply(collective(0))
    ports[0].done.resolve(5000)
    gpu.apply(Kernel(0, 0, 1000, "aten::add.Tensor"))
    assert gpu.spans[0].end_ns == 1500


def test_kernel_behind_the_collective_on_its_stream_is_not_slowed() -> None:
    gpu, ports = device()
    gpu.apply(collective(0, stream=0))
    gpu.apply(mm(10, 1000, stream=0))
    assert gpu.spans == []  # queued behind the collective
    ports[0].done.resolve(400)
    assert (gpu.spans[0].start_ns, gpu.spans[0].end_ns) == (400, 1400)


def test_collective_reached_after_the_kernel_was_placed_is_missed() -> None:
    """The documented limit: the kernel's end is fixed before the later collective exists."""
    gpu, ports = device()
    gpu.apply(mm(0, 1000))
    gpu.apply(collective(100))
    ports[0].done.resolve(5000)
    assert gpu.spans[0].end_ns == 1000


def test_kernels_placed_beside_a_collective_slow_it() -> None:
    gpu, _ = device(MUTUAL)
    gpu.apply(mm(0, 400))  # runs 0..400: the collective gets SMs at 400
    gpu.apply(Kernel(0, 0, 100, "aten::add.Tensor"))  # 400..500 memory-bound: 4x
    assert gpu.collective_end_ns(100, 1100) == 500 + 975  # 25 of work beside the add
    assert device(FLAT)[0].collective_end_ns(100, 1100) == 1100


def test_no_model_leaves_kernels_alone() -> None:
    gpu, ports = device(overlap=None)
    gpu.apply(collective(0))
    ports[0].done.resolve(5000)
    gpu.apply(mm(10, 1000))
    assert gpu.spans[0].end_ns == 1010
