"""The virtual clock of one rank, and the ``time.*`` patches that let the script read it.

A rank's virtual time is what a real GPU host would have spent on the script so far::

    now = start + CPU time of the process's threads outside excluded() sections
                + charged model costs (kernel launches, time.sleep)
                + jumps forward to sync replies (advance_to)

*Process* CPU time (all threads: the script's main thread, the autograd engine's device thread,
DataLoader pin-memory threads, ...) counts because a real host spends it too; wall time does not,
so ranks that time-share the simulation machine's few cores do not slow each other down, and a
rank blocked on the coordinator gains nothing. The interceptor's own work (fake-tensor dispatch,
recording, pickling, IPC) runs inside :meth:`VirtualClock.excluded` and is subtracted per thread.

In *reproducible* mode the CPU is not measured at all: every intercepted op (see
:meth:`VirtualClock.tick`) costs a fixed ``op_cost_ns`` instead, so two runs give bit-identical
times.

The clock never goes backwards: every reading is at least the previous one, which is what lets a
rank promise the coordinator that nothing it sends later is earlier (``intercept.protocol``).
"""

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType

_NS_PER_S = 1_000_000_000

# The real functions, captured before any patching: the clock and the client must keep using them.
_process_time_ns = time.process_time_ns
_clock_gettime_ns = time.clock_gettime_ns
_pthread_getcpuclockid = time.pthread_getcpuclockid
_real_sleep = time.sleep


class VirtualClock:
    """One rank's virtual time in integer ns; thread-safe.

    ``start_ns``: the reading at construction. ``epoch_ns``: what ``time.time_ns()`` reads at
    virtual time 0 (give every rank the same value so their wall clocks agree; default: the real
    wall clock now). ``op_cost_ns``: ``None`` measures the script's CPU time; an int switches to
    reproducible mode, where each :meth:`tick` costs that much and nothing is measured.
    """

    def __init__(self, *, start_ns: int = 0, epoch_ns: int | None = None,
                 op_cost_ns: int | None = None) -> None:
        if op_cost_ns is not None and op_cost_ns < 0:
            raise ValueError(f"op_cost_ns is {op_cost_ns}; a cost is >= 0 ns")
        self.epoch_ns = time.time_ns() if epoch_ns is None else epoch_ns
        self.op_cost_ns = op_cost_ns
        self._lock = threading.Lock()
        self._offset_ns = start_ns
        """Everything that is not measured CPU time: start, charges, ticks, jumps."""
        self._last_ns = start_ns
        self._cpu_origin_ns = _process_time_ns()
        self._excluded_cpu_ns = 0
        """CPU time of closed excluded sections, all threads."""
        self._open: dict[int, tuple[int, int]] = {}
        """Thread ident -> (its CPU clock id, its CPU time at entry) for open excluded sections."""
        self._exclusion = _Exclusion(self) if op_cost_ns is None else _NO_EXCLUSION
        os.register_at_fork(after_in_child=self._forget_threads)

    def _forget_threads(self) -> None:
        """In a forked child (a DataLoader worker) only the forking thread lives on, with a new
        thread id and CPU clock, and the lock may have been held by a thread that is gone."""
        self._lock = threading.Lock()
        self._open.clear()
        if isinstance(self._exclusion, _Exclusion):
            self._exclusion.forget_threads()

    @property
    def reproducible(self) -> bool:
        """Whether script CPU time is replaced by a fixed cost per intercepted op."""
        return self.op_cost_ns is not None

    def now_ns(self) -> int:
        """The current virtual time; never less than any earlier reading."""
        with self._lock:
            raw = self._raw_ns()
            if raw > self._last_ns:
                self._last_ns = raw
            return self._last_ns

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

    def tick(self) -> None:
        """An intercepted op was issued: in reproducible mode it costs ``op_cost_ns``."""
        if self.op_cost_ns is not None:
            self.charge(self.op_cost_ns)

    def advance_to(self, t_ns: int) -> None:
        """Jump forward to ``t_ns`` (a sync reply's completion time); the past changes nothing."""
        with self._lock:
            raw = self._raw_ns()
            if t_ns > max(raw, self._last_ns):
                self._offset_ns += t_ns - raw
                self._last_ns = t_ns

    def _raw_ns(self) -> int:
        """The unclamped reading; call with the lock held."""
        if self.op_cost_ns is not None:
            return self._offset_ns
        # Open sections first, process CPU last: CPU that runs between the two reads is
        # counted as the script's (a few ns), never subtracted twice.
        open_ns = sum(_clock_gettime_ns(clock_id) - entry_ns
                      for clock_id, entry_ns in self._open.values())
        cpu_ns = _process_time_ns() - self._cpu_origin_ns
        return self._offset_ns + cpu_ns - self._excluded_cpu_ns - open_ns

    def _enter_excluded(self, ident: int, clock_id: int) -> None:
        entry_ns = _clock_gettime_ns(clock_id)
        with self._lock:
            self._open[ident] = (clock_id, entry_ns)

    def _exit_excluded(self, ident: int) -> None:
        with self._lock:
            clock_id, entry_ns = self._open.pop(ident)
            self._excluded_cpu_ns += _clock_gettime_ns(clock_id) - entry_ns


class _Exclusion:
    """The reusable context manager behind :meth:`VirtualClock.excluded` (a class, not a
    generator: it runs on every intercepted op, so it must be cheap)."""

    __slots__ = ("_clock", "_local")

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._local = threading.local()

    def forget_threads(self) -> None:
        """Drop every thread's cached CPU clock id and nesting depth (after a fork)."""
        self._local = threading.local()

    def __enter__(self) -> None:
        local = self._local
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        if depth == 0:
            ident = threading.get_ident()
            clock_id = getattr(local, "clock_id", None)
            if clock_id is None:
                clock_id = local.clock_id = _pthread_getcpuclockid(ident)
            self._clock._enter_excluded(ident, clock_id)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        local = self._local
        local.depth -= 1
        if local.depth == 0:
            self._clock._exit_excluded(threading.get_ident())


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
    """Replacements for the ``time`` module's clocks, reading ``clock``."""
    now_ns = clock.now_ns
    epoch_ns = clock.epoch_ns
    owner_pid = os.getpid()

    def seconds() -> float:
        return now_ns() / _NS_PER_S

    def wall_ns() -> int:
        return epoch_ns + now_ns()

    def wall() -> float:
        return (epoch_ns + now_ns()) / _NS_PER_S

    def sleep(secs: float) -> None:
        # Only the script's main thread sleeps in virtual time: a background thread that polls
        # with sleep() would otherwise spin and push the whole rank's clock forward, and a forked
        # child (a DataLoader worker) is not the rank.
        if secs < 0:
            raise ValueError("sleep length must be non-negative")
        if threading.current_thread() is threading.main_thread() and os.getpid() == owner_pid:
            clock.charge(round(secs * _NS_PER_S))
        else:
            _real_sleep(secs)

    return {"perf_counter": seconds, "perf_counter_ns": now_ns, "monotonic": seconds,
            "monotonic_ns": now_ns, "time": wall, "time_ns": wall_ns, "sleep": sleep}


@contextmanager
def patched_time(clock: VirtualClock) -> Iterator[None]:
    """While inside, ``time.perf_counter[_ns]``, ``time.monotonic[_ns]`` and ``time.time[_ns]``
    read ``clock`` (``time`` = epoch + virtual time) and ``time.sleep`` advances it without
    sleeping. Code that bound a function earlier (``from time import perf_counter``) keeps the
    real one: the standard library's own timeouts (threading, queue) stay real on purpose.
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
