"""The virtual clock of one rank, and the ``time.*`` patches that let the script read it.

A rank's virtual time is what a real GPU host would have spent on the script so far::

    now = start + CPU time of the process's threads outside excluded() sections (the residual)
                + corrections of that residual to robust estimates (correct)
                + table-charged host costs of intercepted ops (charge_table)
                + other charged costs (time.sleep) + jumps forward to sync replies (advance_to)

The table-charged part (``intercept.host_time.host_cost``, per op family and per collective,
measured on the reference hosts) does not depend on this machine; the residual (the script's own
Python between intercepted ops) is measured here, converted to the reference host's speed, and per
segment replaced by its quietest recent reading (``intercept.host_time.residual``).
:meth:`VirtualClock.host_split` reports the two.

*Process* CPU time (all threads: the script's main thread, the autograd engine's device thread,
DataLoader pin-memory threads, ...) counts because a real host spends it too; wall time does not,
so ranks that time-share the simulation machine's few cores do not slow each other down, and a
rank blocked on the coordinator gains nothing. The interceptor's own work (fake-tensor dispatch,
recording, pickling, IPC) runs inside :meth:`VirtualClock.excluded` and is subtracted per thread.

Where the fake-CUDA shim is loaded (every rank process) the excluded CPU is the shim's account
(``intercept.process.shim.NativeExclusion``; elsewhere, in tests and tools, the clock keeps its own
per-thread account). It holds what no Python section can reach, so that an intercepted op costs
about what a plain Python call costs, plus the runtime's modelled launch overhead:

* timed (each thread's CPU clock around the call): every call torch's C++ makes into Python
  (the ``__torch_dispatch__`` trampoline, ~7,400 ``prim.device`` queries of FakeTensors per
  GPT-2 step, the decrefs that deallocate FakeTensors C++ kept, with the GIL hand-overs), the
  stream/event callback, and the simulator's Python bookkeeping outside the fake mode
  (``shim.simulator_time()``). Real CPU work a callback runs for the script (small all-CPU
  ops) is cut out of it again (``shim.script_time()``), and so is a tensor subclass's own
  dispatch (DTensor's sharding propagation and redistribution, ``shim.count_rest_of_dispatch``)
  that torch runs in the same call into Python after the fake mode deferred to it.
* deducted, as measured once per process before ranks that measure CPU time fork
  (``intercept.dispatch.dispatch_glue.measure_deductions``; ``shim.Deductions``): per outermost
  section, what timing it costs outside it (two clock reads, ~0.25 us); per outermost op
  dispatch, the C++ glue around the call into Python (the binding's argument parsing, the
  dispatcher up to the Python key, the fallback's argument conversion): counted CPU per ``x.add_(y)`` minus per plain Python call of two arguments,
  the smallest of 10 rounds of 100 (``dispatch_glue.measure_dispatch_glue``; 2.0-2.7 us on the
  2-core development machine). A deduction takes at most the CPU time its thread spent counted
  since the previous one of its kind, so it never takes another thread's time, nor more than
  was spent; readings stay monotonic (below).

What is left of the interceptor per op, measured (``tests/intercept/test_overhead.py``):
``docs/models/host.md``.

*Host speed.* The script's counted CPU time is this machine's; a real GPU host runs the same
Python at its own speed, and this machine's speed drifts with its load (on 2 shared cores the same
code can cost 2-3x the CPU time when the box is busy). Given a :class:`CpuScale` (normally an
``intercept.host_time.host_speed.HostSpeed`` for the scenario's reference host,
``simulation.host_cpu``), the clock counts the script's CPU time times ``reference_ns / local_ns``
of a short benchmark, re-measured every :data:`REMEASURE_EVERY_CPU_NS` of process CPU time (by the
thread that made the clock, at its next reading; the measurement's own CPU time is skipped) to
follow load changes. A new ratio applies from the moment it was measured on: the CPU counted before
keeps the ratio it was counted with, so readings stay continuous and monotonic.

In *counted* mode (``script_work``, the default of a scenario: ``simulation.host_time``) the
CPU is not measured either: the script's part is its counted Python work, already in the
reference host's ns (``intercept.host_time.python_work``), so the reading is the same on any
machine, loaded or idle, however many ranks share it. No host-speed ratio, no residual smoothing.

In *reproducible* mode the CPU is not measured at all: every intercepted op (see
:meth:`VirtualClock.tick`) costs a fixed ``op_cost_ns`` instead, so two runs give bit-identical
times.

The clock never goes backwards: every reading is at least the previous one, which is what lets a
rank promise the coordinator that nothing it sends later is earlier (:mod:`wire`).
"""

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Protocol

from hwmodel.measured.host_references import UNSCALED, SpeedRatio
from intercept.process import shim
from wire.messages import HostTimeSplit

_NS_PER_S = 1_000_000_000
REMEASURE_EVERY_CPU_NS = 50_000_000
"""Process CPU time between two host-speed measurements of a rank: one benchmark round per
50 ms, ~10% of the simulation's CPU, often enough to follow a shared machine's speed changes
(``docs/models/host.md`` has the measurements)."""

# The real functions, captured before any patching: the clock and the client must keep using them.
_process_time_ns = time.process_time_ns
_clock_gettime_ns = time.clock_gettime_ns
_pthread_getcpuclockid = time.pthread_getcpuclockid
_real_sleep = time.sleep
POLL_SLEEP_MAX_S = 0.1
"""Main-thread sleeps up to this long also sleep for real (polls); longer ones are deliberate
waits and pass in virtual time only (see ``_time_functions``)."""


class ExcludedCpu(Protocol):
    """An account of excluded CPU time: sections to enter, and their total over all threads."""

    def __enter__(self) -> None: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...

    def total_ns(self) -> int:
        """Excluded CPU of all threads so far, open sections up to now included (any origin)."""
        ...


class CpuScale(Protocol):
    """Converts this machine's CPU time into a reference host's
    (``intercept.host_time.host_speed``)."""

    def ratio(self) -> SpeedRatio:
        """The ratio in force (measured last)."""
        ...

    def remeasure(self) -> SpeedRatio:
        """Measure again, now, on the calling thread; the new ratio."""
        ...


class VirtualClock:
    """One rank's virtual time in integer ns; thread-safe.

    ``start_ns``: the reading at construction. ``epoch_ns``: what ``time.time_ns()`` reads at
    virtual time 0 (give every rank the same value so their wall clocks agree; default: the real
    wall clock now). ``op_cost_ns``: ``None`` measures the script's CPU time; an int switches to
    reproducible mode, where each :meth:`tick` costs that much and nothing is measured.
    ``excluded_cpu``: where excluded CPU is accounted; default the shim's account if the shim is
    loaded in this process (there is one per process, shared by every clock in it), else one of
    the clock's own. ``cpu_scale``: converts the script's CPU time into the reference host's
    (see the module doc); ``None`` counts it as measured here. Not with ``op_cost_ns``.
    ``remeasure_every_cpu_ns``: process CPU time between two calls of its ``remeasure``.
    """

    def __init__(self, *, start_ns: int = 0, epoch_ns: int | None = None,
                 op_cost_ns: int | None = None, excluded_cpu: ExcludedCpu | None = None,
                 cpu_scale: CpuScale | None = None,
                 remeasure_every_cpu_ns: int = REMEASURE_EVERY_CPU_NS,
                 script_work: Callable[[], int] | None = None) -> None:
        if script_work is not None and (op_cost_ns is not None or cpu_scale is not None):
            raise ValueError("counted mode (script_work) measures no CPU time: not with "
                             "op_cost_ns or cpu_scale")
        if op_cost_ns is not None and op_cost_ns < 0:
            raise ValueError(f"op_cost_ns is {op_cost_ns}; a cost is >= 0 ns")
        if op_cost_ns is not None and cpu_scale is not None:
            raise ValueError("reproducible mode (op_cost_ns) measures no CPU time to scale")
        if remeasure_every_cpu_ns <= 0:
            raise ValueError(f"remeasure_every_cpu_ns is {remeasure_every_cpu_ns}; it is > 0")
        self.epoch_ns = time.time_ns() if epoch_ns is None else epoch_ns
        self.op_cost_ns = op_cost_ns
        # reentrant: a garbage collection can start while the lock is held (the counted work's
        # reading allocates), and a script's gc callback that reads a timer comes back here
        self._lock = threading.RLock()
        self._offset_ns = start_ns
        """Everything that is not measured CPU time: start, charges, ticks, jumps."""
        self._last_ns = start_ns
        if excluded_cpu is None:
            excluded_cpu = shim.native_exclusion() or ThreadCpuExclusion()
        self._excluded_cpu = excluded_cpu
        self._excluded_origin_ns = excluded_cpu.total_ns()
        self._cpu_origin_ns = _process_time_ns()
        self._exclusion: AbstractContextManager[None] = (
            excluded_cpu if op_cost_ns is None else _NO_EXCLUSION)
        self._cpu_scale = cpu_scale
        self._ratio = UNSCALED if cpu_scale is None else cpu_scale.ratio()
        self._best_ratio = self._ratio
        """The ratio of the fastest host-speed measurement so far (the quietest moment)."""
        self._scaled_before_ns = 0
        """Script CPU counted under earlier ratios, already scaled."""
        self._script_before_ns = 0
        """Script CPU (as measured) at the last change of ratio."""
        self._remeasure_every_ns = remeasure_every_cpu_ns
        self._next_measure_cpu_ns = self._cpu_origin_ns + remeasure_every_cpu_ns
        self._measure_due = False
        self._frozen_script_ns: int | None = None
        """While a measurement runs: the script's CPU reading when it started."""
        self._skipped_ns = 0
        """CPU time of measurements that counted as the script's and was skipped."""
        self._measuring_thread: int | None = threading.get_ident()
        """Only the thread that made the clock (a rank's main thread) measures."""
        self._table_ns = 0
        """Host time charged from the host-cost table (``charge_table``)."""
        self._fixed_ns = 0
        """Reproducible mode's fixed costs (``tick``)."""
        self._script_work = script_work
        self._work_origin_ns = 0 if script_work is None else script_work()
        os.register_at_fork(after_in_child=self._forget_threads)

    def _forget_threads(self) -> None:
        """In a forked child (a DataLoader worker) the lock may have been held by a thread that
        is gone, and the child measures nothing more (it is not the rank)."""
        self._lock = threading.RLock()
        self._measuring_thread = None

    @property
    def reproducible(self) -> bool:
        """Whether script CPU time is replaced by a fixed cost per intercepted op."""
        return self.op_cost_ns is not None

    @property
    def counted(self) -> bool:
        """Whether the script's time is its counted Python work (no CPU time is measured)."""
        return self._script_work is not None

    @property
    def speed_ratio(self) -> SpeedRatio:
        """The host-speed ratio the script's CPU time is counted with now (1/1 unscaled)."""
        return self._ratio

    def now_ns(self) -> int:
        """The current virtual time; never less than any earlier reading."""
        with self._lock:
            raw = self._raw_ns()
            if raw > self._last_ns:
                self._last_ns = raw
            reading = self._last_ns
        if self._measure_due and threading.get_ident() == self._measuring_thread:
            self._remeasure()
        return reading

    def _remeasure(self) -> None:
        """Take a new host-speed ratio; it applies from now on. The measurement's own CPU time
        is skipped: the script's CPU reading stays where it was until it is over (the scale
        may time the benchmark as script time, to time it as the script is timed)."""
        assert self._cpu_scale is not None
        with self._lock:
            self._frozen_script_ns = frozen_ns = self._script_cpu_ns()
            self._measure_due = False  # also while it runs: a reading inside must not recurse
        ratio = self._ratio
        try:
            ratio = self._cpu_scale.remeasure()
        finally:
            with self._lock:
                self._frozen_script_ns = None
                self._next_measure_cpu_ns = _process_time_ns() + self._remeasure_every_ns
                script_ns = self._script_cpu_ns()
                self._skipped_ns += script_ns - frozen_ns
                self._scaled_before_ns += self._ratio.scale(frozen_ns - self._script_before_ns)
                self._script_before_ns = script_ns
                self._ratio = ratio
                if ratio.factor > self._best_ratio.factor:
                    self._best_ratio = ratio

    def excluded(self) -> AbstractContextManager[None]:
        """A context manager: CPU time the calling thread spends inside is not the script's.

        Nestable (only the outermost section counts) and usable from any thread at once.
        """
        return self._exclusion

    def charge(self, duration_ns: int) -> None:
        """Add a modelled CPU cost (a kernel launch, a sleep) to the clock."""
        if duration_ns < 0:
            raise ValueError(f"cannot charge {duration_ns} ns; a duration is >= 0")
        with self._lock:
            self._offset_ns += duration_ns

    def charge_table(self, duration_ns: int) -> None:
        """Add a host cost from the host-cost table (``intercept.host_time.host_cost``): like
        :meth:`charge`, and counted as table-charged host time in :meth:`host_split`."""
        if duration_ns < 0:
            raise ValueError(f"cannot charge {duration_ns} ns; a duration is >= 0")
        with self._lock:
            self._offset_ns += duration_ns
            self._table_ns += duration_ns

    def tick(self) -> None:
        """An intercepted op was issued: in reproducible mode it costs ``op_cost_ns``."""
        if self.op_cost_ns is not None:
            with self._lock:
                self._offset_ns += self.op_cost_ns
                self._fixed_ns += self.op_cost_ns

    def to_reference_ns(self, local_cpu_ns: int) -> int:
        """This machine's CPU ns as the reference host's, with the host-speed ratio in force."""
        return self._ratio.scale(local_cpu_ns)

    def quietest_to_reference_ns(self, local_cpu_ns: int) -> int:
        """This machine's CPU ns as the reference host's, with the ratio of the fastest
        host-speed measurement so far (for a reading taken at the quietest moment too)."""
        return self._best_ratio.scale(local_cpu_ns)

    def correct(self, reference_ns: int) -> None:
        """Add ``reference_ns`` (either sign) to the script's counted time, already converted to
        the reference host (``intercept.host_time.residual``: a robust estimate in place of a
        reading). Readings stay monotonic: a reading never falls below an earlier one."""
        if self.op_cost_ns is not None or self._script_work is not None:
            return
        with self._lock:
            self._scaled_before_ns += reference_ns

    def host_split(self) -> "HostTimeSplit":
        """The host time so far by origin (table-charged, residual: counted or measured, fixed)."""
        with self._lock:
            if self.op_cost_ns is not None:
                residual_ns = 0
            elif self._script_work is not None:
                residual_ns = self._script_work() - self._work_origin_ns
            else:
                residual_ns = (self._scaled_before_ns
                               + self._ratio.scale(self._script_cpu_ns() - self._script_before_ns))
            return HostTimeSplit(self._table_ns, residual_ns, self._fixed_ns)

    def advance_to(self, t_ns: int) -> None:
        """Jump forward to ``t_ns`` (a sync reply's completion time); the past changes nothing.
        Counts as a reading: no later reading is below ``t_ns``, even where the CPU counted so
        far had already passed it and a :meth:`correct` lowers the raw count afterwards (the
        coordinator counts the rank as at ``t_ns`` from its reply on)."""
        with self._lock:
            raw = self._raw_ns()
            reading = max(raw, self._last_ns)
            if t_ns > reading:
                self._offset_ns += t_ns - raw
                reading = t_ns
            self._last_ns = reading

    def cpu_split_ns(self) -> tuple[int, int]:
        """``(script, simulator)``: process CPU since the clock started, split into what counted
        as the script's and what the excluded sections and host-speed measurements took
        (unscaled: CPU time of this machine). Reproducible mode measures no script CPU, so all
        of it is reported as the simulator's."""
        cpu_ns = _process_time_ns() - self._cpu_origin_ns
        if self.op_cost_ns is not None:
            return 0, cpu_ns
        simulator_ns = (self._excluded_cpu.total_ns() - self._excluded_origin_ns
                        + self._skipped_ns)
        return cpu_ns - simulator_ns, simulator_ns

    def _script_cpu_ns(self) -> int:
        """The script's CPU time as measured here since the clock started, call with the lock
        held. Frozen while a host-speed measurement runs; what measurements counted is in it
        (the scaling skips it). Excluded sections first, process CPU last: CPU that runs
        between the two reads is counted as the script's (a few ns), never subtracted twice."""
        if self._frozen_script_ns is not None:
            return self._frozen_script_ns
        excluded_ns = self._excluded_cpu.total_ns() - self._excluded_origin_ns
        cpu_now_ns = _process_time_ns()
        if self._cpu_scale is not None and cpu_now_ns >= self._next_measure_cpu_ns:
            self._measure_due = True
        return cpu_now_ns - self._cpu_origin_ns - excluded_ns

    def _raw_ns(self) -> int:
        """The unclamped reading; call with the lock held."""
        if self.op_cost_ns is not None:
            return self._offset_ns
        if self._script_work is not None:
            return self._offset_ns + self._script_work() - self._work_origin_ns
        script_ns = self._script_cpu_ns()
        return (self._offset_ns + self._scaled_before_ns
                + self._ratio.scale(script_ns - self._script_before_ns))


class ThreadCpuExclusion:
    """An :class:`ExcludedCpu` kept in Python: each thread's outermost section is timed with that
    thread's CPU clock. A reusable context manager (a class, not a generator: it runs on every
    intercepted op, so it must be cheap)."""

    __slots__ = ("_closed_ns", "_local", "_lock", "_open")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._closed_ns = 0
        """CPU time of closed sections, all threads."""
        self._open: dict[int, tuple[int, int]] = {}
        """Thread ident -> (its CPU clock id, its CPU time at entry) for open sections."""
        os.register_at_fork(after_in_child=self._forget_threads)

    def _forget_threads(self) -> None:
        """In a forked child (a DataLoader worker) only the forking thread lives on, with a new
        thread id and CPU clock, and the lock may have been held by a thread that is gone."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self._open.clear()

    def total_ns(self) -> int:
        """Excluded CPU of all threads so far, open sections up to now included."""
        with self._lock:
            open_ns = sum(_clock_gettime_ns(clock_id) - entry_ns
                          for clock_id, entry_ns in self._open.values())
            return self._closed_ns + open_ns

    def __enter__(self) -> None:
        local = self._local
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        if depth == 0:
            ident = threading.get_ident()
            clock_id = getattr(local, "clock_id", None)
            if clock_id is None:
                clock_id = local.clock_id = _pthread_getcpuclockid(ident)
            entry_ns = _clock_gettime_ns(clock_id)
            with self._lock:
                self._open[ident] = (clock_id, entry_ns)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        local = self._local
        local.depth -= 1
        if local.depth == 0:
            with self._lock:
                clock_id, entry_ns = self._open.pop(threading.get_ident())
                self._closed_ns += _clock_gettime_ns(clock_id) - entry_ns


class _NoExclusion:
    """Reproducible mode measures no CPU time, so there is nothing to exclude."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


_NO_EXCLUSION = _NoExclusion()


def _time_functions(clock: VirtualClock) -> dict[str, Callable[..., object]]:
    """Replacements for the ``time`` module's clocks, reading ``clock``. A reading runs
    excluded: on a real host it is one C call (tens of ns), not the clock's Python."""
    excluded = clock.excluded()
    epoch_ns = clock.epoch_ns
    owner_pid = os.getpid()

    def now_ns() -> int:
        with excluded:
            return clock.now_ns()

    def seconds() -> float:
        with excluded:
            return clock.now_ns() / _NS_PER_S

    def wall_ns() -> int:
        with excluded:
            return epoch_ns + clock.now_ns()

    def wall() -> float:
        with excluded:
            return (epoch_ns + clock.now_ns()) / _NS_PER_S

    def sleep(secs: float) -> None:
        # Only the script's main thread sleeps in virtual time: a background thread that polls
        # with sleep() would otherwise spin and push the whole rank's clock forward, and a forked
        # child (a DataLoader worker) is not the rank. A short sleep of the main thread is a
        # poll, mostly for something outside the simulation (a file lock another rank holds
        # while it builds a dataset cache), so it also sleeps for real: the polls then move
        # the clock about as far as the wait lasts, not once per spin.
        if secs < 0:
            raise ValueError("sleep length must be non-negative")
        if threading.current_thread() is threading.main_thread() and os.getpid() == owner_pid:
            clock.charge(round(secs * _NS_PER_S))
            if secs <= POLL_SLEEP_MAX_S:
                _real_sleep(secs)
        else:
            _real_sleep(secs)

    return {"perf_counter": seconds, "perf_counter_ns": now_ns, "monotonic": seconds,
            "monotonic_ns": now_ns, "time": wall, "time_ns": wall_ns, "sleep": sleep}


@contextmanager
def patched_time(clock: VirtualClock) -> Iterator[None]:
    """While inside, ``time.perf_counter[_ns]``, ``time.monotonic[_ns]`` and ``time.time[_ns]``
    read ``clock`` (``time`` = epoch + virtual time) and ``time.sleep`` advances it (sleeping
    for real too when it is a short poll, up to :data:`POLL_SLEEP_MAX_S`). Code that bound a
    function earlier (``from time import perf_counter``) keeps the real one: the standard library's
    own timeouts (threading, queue) stay real on purpose.
    """
    replacements = _time_functions(clock)
    saved = {name: getattr(time, name) for name in replacements}
    for name, function in replacements.items():
        setattr(time, name, function)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(time, name, function)
