"""The measured residual of a rank's host time, made robust against this machine's load.

What the host-cost table (``intercept.host_time.host_cost``) does not charge is the script's own
work between two intercepted operations: its Python (module calls, hooks, optimizer loops), measured
as the thread's CPU time that counts as the script's (``intercept.process.shim.thread_counted_ns``).
A single reading moves with what else runs on the machine: contention for caches and sibling
hyper-threads inflates CPU time by up to 2-3x on 2 shared cores, more than the host-speed
benchmark (``intercept.host_time.host_benchmark``, small hot loops) inflates at the same moment, so
scaling each reading by the ratio in force leaves the estimate of a host-bound step 30-50% high on a
busy machine. A training script repeats the same segments every step; so each *segment* (the
work between two consecutive intercepted operations of one thread) is keyed by what it sits
between and where the script issued the second one: ``(previous op, op, script frame, line)``,
and charged as its **quietest** recent reading: the smallest of the last :data:`WINDOW` readings
of that key, in this machine's ns, converted with the ratio of the fastest host-speed
measurement so far (``VirtualClock.quietest_to_reference_ns``). Both are taken at the least
contended moments the run has seen, where this machine's speed against the reference host is
what the benchmark says. The first step of a script charges what it measured; later steps
converge down as quieter readings come.

NB: segments of the autograd engine's thread have no script frame; those with the same pair of
ops share a key, whose smallest reading then stands for all of them (a low bias).

The correction (estimate less the reading as converted now) is applied to the clock at the
segment's end, before the operation is stamped: readings of the clock stay monotonic
(``VirtualClock.correct``), so a correction to a segment whose partial time a heartbeat already
promised is partly lost.
"""

import importlib.util
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import FrameType

WINDOW = 8
"""Readings per segment key the smallest is taken of: a step's worth of history per key that
still follows a segment whose work changes (a growing list, a new branch)."""

_INTERNAL_PREFIXES = tuple(str(Path(spec.origin).parent) for spec in
                           map(importlib.util.find_spec, ("torch", "intercept", "phantora"))
                           if spec is not None and spec.origin)
"""Folders of torch and the simulator: frames there are not the script's."""
_SiteKey = tuple[object, int] | None
_Key = tuple[str, str, _SiteKey]


def script_site(frame: FrameType | None) -> _SiteKey:
    """The innermost frame outside torch and the simulator (the script's line that issued the
    current op), as ``(code, line)``; ``None`` on a thread with no such frame (the autograd
    engine's)."""
    while frame is not None:
        if not frame.f_code.co_filename.startswith(_INTERNAL_PREFIXES):
            return frame.f_code, frame.f_lineno
        frame = frame.f_back
    return None


class ResidualSmoother:
    """Per thread, the segments between intercepted ops; see the module doc.

    ``counted_ns``: the calling thread's counted CPU (``shim.thread_counted_ns``); ``to_ref``:
    converts this machine's ns into the reference host's with the ratio in force,
    ``quietest_to_ref`` with the ratio of the fastest host-speed measurement so far.
    """

    def __init__(self, counted_ns: Callable[[], int], to_ref: Callable[[int], int],
                 quietest_to_ref: Callable[[int], int], window: int = WINDOW) -> None:
        self._counted_ns = counted_ns
        self._to_ref = to_ref
        self._quietest_to_ref = quietest_to_ref
        self._window = window
        self._local = threading.local()
        self._lock = threading.Lock()
        self._readings: dict[_Key, deque[int]] = {}

    def boundary(self, op: str) -> int:
        """An intercepted op ``op`` ends the calling thread's current segment: returns the
        correction, in reference ns, to add to the clock (the segment's estimate less this
        reading; 0 for a thread's first op)."""
        local = self._local
        now = self._counted_ns()
        previous_ns = getattr(local, "counted_ns", None)
        previous_op = getattr(local, "op", "")
        local.counted_ns, local.op = now, op
        if previous_ns is None:
            return 0
        local_ns = now - previous_ns
        reading = self._to_ref(local_ns)
        key = (previous_op, op, script_site(sys._getframe(1)))
        with self._lock:
            readings = self._readings.get(key)
            if readings is None:
                readings = self._readings[key] = deque(maxlen=self._window)
            readings.append(local_ns)
            estimate = self._quietest_to_ref(min(readings))
        return estimate - reading
