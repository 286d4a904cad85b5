"""Compute/communication overlap: a kernel runs slower while NCCL works on the same GPU, and
the collective slower beside kernels.

NCCL runs a collective as a kernel of one CUDA block per channel that holds its SM and streams
through HBM for the whole call, so a kernel on another stream gets what is left. The factors
come from measurements on 2x H200 (``scripts/measure/measure_overlap.py``,
``scripts/measure/data/overlap/``; the measured points and their source:
``hwmodel.measured.gpu``); what was measured, how the rule below was chosen and what it
misses: ``docs/models/compute.md``.

* A kernel's factor is read off a curve of its alone duration (linear in log duration between
  measured kernels, flat beyond), one curve for compute-bound kernels (FLOPs counted: matrix
  products, attention) and one for memory-bound ones; host copies (copy engines) are not slowed.
* :class:`CommWindows` (applied by ``phantora.engine.streams``): a kernel's start and end are
  fixed when it reaches the head of its stream, from what the simulation knows at its start
  (the live engine applies every GPU's work in time order with the network: a kernel sees the
  collectives reached, started and ended by then, and no later fact). A collective is
  in flight on a GPU from when its stream reaches it (waiting for late peers included) until its
  end; the kernel runs at ``1 / factor`` of its alone speed while any collective is in flight.
  A collective whose end is not known yet is expected to move data for as long as its latest
  occurrence (same op, group and size) did once every member had reached it, and is left out
  when there was none; one its stream has not reached because it waits for an earlier
  collective counts from when the stream should reach it (``RankDevice.expected_windows``).
* :func:`collective_end_ns`: NCCL's blocks get SMs once the kernels running at the collective's
  start have ended, then progress at ``1 / factor`` beside each kernel (the 256 MiB curves) that
  started by the time the network model finished it; the collective ends when its most slowed
  member does.

Both rules read only what the simulation knows at an instant, never what had arrived or
completed when an op came in (which hangs on how far the other ranks and the network had run in
wall time), so two runs of a scenario give the same numbers, bit for bit. The cost: a
collective still in flight at a kernel's start is always expected from its latest occurrence,
never its actual end, and a kernel that starts in a collective's stretched tail does not slow it
further.
"""

import itertools
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from hwmodel.measured.gpu import (
    COLLECTIVE_BY_COMPUTE,
    COLLECTIVE_BY_MEMORY,
    KERNEL_BY_COLLECTIVE_COMPUTE,
    KERNEL_BY_COLLECTIVE_MEMORY,
)
from hwmodel.compute.ops import is_memory_bound
from hwmodel.compute.spec import MEMCPY_DTOH, MEMCPY_HTOD

Busy = tuple[int, int]
"""``(start_ns, end_ns)`` of a collective in flight on the device."""


@dataclass(frozen=True, slots=True)
class SlowdownCurve:
    """Slowdown factor by a kernel's alone duration: ``(duration_ns, factor)`` points."""

    points: tuple[tuple[int, float], ...]
    """Ascending in duration, at least one point, every factor >= 1."""

    def __post_init__(self) -> None:
        durations = [duration for duration, _ in self.points]
        if not self.points or durations != sorted(set(durations)) or durations[0] <= 0:
            raise ValueError(f"curve points must ascend strictly in duration: {self.points}")
        if any(factor < 1.0 for _, factor in self.points):
            raise ValueError(f"a slowdown factor below 1 in {self.points}")

    def factor(self, duration_ns: int) -> float:
        """Linear in ``log(duration)`` between points, the end points' factor beyond them."""
        points = self.points
        if duration_ns <= points[0][0]:
            return points[0][1]
        for (lo_ns, lo), (hi_ns, hi) in itertools.pairwise(points):
            if duration_ns <= hi_ns:
                share = math.log(duration_ns / lo_ns) / math.log(hi_ns / lo_ns)
                return lo + share * (hi - lo)
        return points[-1][1]


@dataclass(frozen=True, slots=True)
class OverlapModel:
    """How much a collective in flight slows a kernel (``compute``, ``memory``), and how much
    a kernel slows a collective in flight (``collective_*``), by the kernel's kind and
    duration alone."""

    compute: SlowdownCurve
    memory: SlowdownCurve
    collective_by_compute: SlowdownCurve = SlowdownCurve(((1, 1.0),))
    collective_by_memory: SlowdownCurve = SlowdownCurve(((1, 1.0),))

    def factor(self, name: str, flops: int, duration_ns: int) -> float:
        """The slowdown of kernel ``name`` (``duration_ns`` alone) under a collective."""
        return _read(self.compute, self.memory, name, flops, duration_ns)

    def collective_factor(self, name: str, flops: int, duration_ns: int) -> float:
        """The slowdown of a collective while kernel ``name`` (``duration_ns`` alone) runs."""
        return _read(self.collective_by_compute, self.collective_by_memory, name, flops,
                     duration_ns)


def _read(compute: SlowdownCurve, memory: SlowdownCurve, name: str, flops: int,
          duration_ns: int) -> float:
    """The factor of kernel ``name`` off the curve of its kind (FLOPs counted and not a
    memory-bound op: compute); copies between host and GPU run on the copy engines, 1."""
    if name in (MEMCPY_HTOD, MEMCPY_DTOH):
        return 1.0
    curve = compute if flops > 0 and not is_memory_bound(name) else memory
    return curve.factor(duration_ns)


Slowing = tuple[int, int, float]
"""``(start_ns, end_ns, factor)`` of a kernel as placed, and how much it slows a collective."""


def collective_end_ns(start_ns: int, end_ns: int, kernels: Iterable[Slowing]) -> int:
    """End of a collective that moves data from ``start_ns`` to ``end_ns`` alone (the network
    model's time), on a GPU running ``kernels`` beside it. NCCL's blocks get SMs only as the
    blocks of the kernels running when it starts retire, so it moves nothing until those end;
    then it progresses at ``1 / factor`` of its speed while a kernel runs beside it (where
    kernels overlap each other, each counts from where the one before it ended)."""
    beside = sorted(k for k in kernels if k[1] > start_ns)
    moving_ns = max((hi for lo, hi, _ in beside if lo <= start_ns), default=start_ns)
    return _slowed_end_ns(moving_ns, end_ns - start_ns, beside)


def stretched_end_ns(start_ns: int, duration_ns: int, factor: float,
                     busy: Iterable[Busy]) -> int:
    """End of a kernel that runs ``duration_ns`` alone from ``start_ns``, progressing at
    ``1 / factor`` of its speed inside the ``busy`` intervals (which may overlap)."""
    if factor <= 1.0 or duration_ns <= 0:
        return start_ns + duration_ns
    return _slowed_end_ns(start_ns, duration_ns,
                          sorted((lo, hi, factor) for lo, hi in busy if hi > start_ns))


def _slowed_end_ns(start_ns: int, duration_ns: int, spans: list[Slowing]) -> int:
    """End of work of ``duration_ns`` alone, started at ``start_ns``, that progresses at
    ``1 / factor`` inside each of the ``spans`` (sorted by start; where they overlap, each
    counts from where the one before it ended)."""
    now: float = start_ns
    left: float = duration_ns
    """Alone-time work still to do."""
    for lo, hi, factor in spans:
        if hi <= now:
            continue  # inside a span already passed (spans overlap)
        if lo > now:
            if left <= lo - now:
                break
            left -= lo - now
            now = lo
        if left * factor <= hi - now:
            return round(now + left * factor)
        left -= (hi - now) / factor
        now = hi
    return round(now + left)


class CommWindow:
    """One collective on this GPU: reached by its stream, moving data once every member has
    reached it, ended. Feed it :meth:`moving` and :meth:`ended` as those times become known."""

    __slots__ = ("_windows", "end_ns", "key", "moving_ns", "reached_ns")

    def __init__(self, windows: "CommWindows", reached_ns: int, key: Hashable) -> None:
        self._windows = windows
        self.reached_ns = reached_ns
        self.key = key
        self.moving_ns: int | None = None
        self.end_ns: int | None = None

    def moving(self, start_ns: int) -> None:
        """Every member reached the collective at ``start_ns``: its data moves from then."""
        self.moving_ns = start_ns

    def ended(self, end_ns: int) -> None:
        self.end_ns = end_ns
        self._windows.record(self.key, end_ns - self.transfer_start_ns)

    @property
    def transfer_start_ns(self) -> int:
        """When its data moves: every member has reached it, or, while that is not known yet,
        when this GPU reached it (as if no peer were late)."""
        return self.reached_ns if self.moving_ns is None else self.moving_ns


class CommWindows:
    """The collectives in flight on one GPU, as far as the engine knows them when it places a
    kernel: each from when its stream reached it (NCCL's blocks hold their SMs from then on,
    also while they wait for a late peer) to its end. A collective whose end is still pending
    is assumed to move data as long as the latest one with the same key (op, group, size) did
    on this GPU, from when every member reached it, or, while that is not known, from when this
    GPU did; with no such one it is left out (see the module docstring for why not "for
    ever")."""

    def __init__(self) -> None:
        self._open: list[CommWindow] = []
        self._last_ns: dict[Hashable, int] = {}
        """Key -> how long its latest occurrence moved data here."""

    def reached(self, reached_ns: int, key: Hashable) -> CommWindow:
        """A stream reached a collective at ``reached_ns``."""
        window = CommWindow(self, reached_ns, key)
        self._open.append(window)
        return window

    def record(self, key: Hashable, lasted_ns: int) -> None:
        self._last_ns[key] = lasted_ns

    def open_since_ns(self) -> int:
        """The earliest reach of a collective whose end is not known yet (far future: none)."""
        return min((w.reached_ns for w in self._open if w.end_ns is None), default=1 << 62)

    def lasted_ns(self, key: Hashable) -> int | None:
        """How long the latest collective with ``key`` moved data here, if one ended."""
        return self._last_ns.get(key)

    def busy(self, since_ns: int) -> list[Busy]:
        """Every window not known to have ended by ``since_ns``, with its expected end.

        Windows that ended by ``since_ns`` are forgotten: call it with a time that later
        queries never precede (a kernel's launch time: the rank launches in program order).
        """
        self._open = [w for w in self._open if w.end_ns is None or w.end_ns > since_ns]
        spans: list[Busy] = []
        for window in self._open:
            end_ns = window.end_ns
            if end_ns is None and window.key in self._last_ns:
                end_ns = window.transfer_start_ns + self._last_ns[window.key]
            if end_ns is not None:
                spans.append((window.reached_ns, end_ns))
        return spans


MEASURED_OVERLAP = OverlapModel(
    compute=SlowdownCurve(KERNEL_BY_COLLECTIVE_COMPUTE.value),
    memory=SlowdownCurve(KERNEL_BY_COLLECTIVE_MEMORY.value),
    collective_by_compute=SlowdownCurve(COLLECTIVE_BY_COMPUTE.value),
    collective_by_memory=SlowdownCurve(COLLECTIVE_BY_MEMORY.value),
)
"""The curves measured on 2x H200 (``hwmodel.measured.gpu``, with their source)."""
