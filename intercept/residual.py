"""The measured residual of a rank's host time, made robust against this machine's load.

What the host-cost table (``intercept.host_cost``) does not charge is the script's own work
between two intercepted operations: its Python (module calls, hooks, optimizer loops), measured
as the thread's CPU time that counts as the script's (``intercept.shim.thread_counted_ns``) and
converted to the reference host by the clock's host-speed ratio. A single reading moves with
what else runs on the machine (cache and sibling-thread contention inflate CPU time by up to
2-3x on 2 shared cores; a garbage collection lands in one segment); a training script repeats
the same segments every step. So each *segment* (the work between two consecutive intercepted
operations of one thread) is keyed by what it sits between and where the script issued the
second one: ``(previous op, op, script frame, line)``. Its charge is the **median of the last**
:data:`WINDOW` readings of that key, each converted with the ratio in force when it was read,
instead of the reading itself. The first step of a script charges what it measured; from then
on a segment's charge moves only when most of its recent readings move.

The correction (median less the reading) is applied to the clock at the segment's end, before
the operation is stamped: readings of the clock stay monotonic (``VirtualClock.correct``).
"""

import importlib.util
import statistics
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import FrameType

WINDOW = 5
"""Readings per segment key the median is taken over: drops two spoilt readings in five."""

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
    converts this machine's ns into the reference host's with the ratio in force.
    """

    def __init__(self, counted_ns: Callable[[], int], to_ref: Callable[[int], int],
                 window: int = WINDOW) -> None:
        self._counted_ns = counted_ns
        self._to_ref = to_ref
        self._window = window
        self._local = threading.local()
        self._lock = threading.Lock()
        self._readings: dict[_Key, deque[int]] = {}

    def boundary(self, op: str) -> int:
        """An intercepted op ``op`` ends the calling thread's current segment: returns the
        correction, in reference ns, to add to the clock (median less this reading; 0 for a
        thread's first op)."""
        local = self._local
        now = self._counted_ns()
        previous_ns = getattr(local, "counted_ns", None)
        previous_op = getattr(local, "op", "")
        local.counted_ns, local.op = now, op
        if previous_ns is None:
            return 0
        reading = self._to_ref(now - previous_ns)
        key = (previous_op, op, script_site(sys._getframe(1)))
        with self._lock:
            readings = self._readings.get(key)
            if readings is None:
                readings = self._readings[key] = deque(maxlen=self._window)
            readings.append(reading)
            estimate = int(statistics.median(readings))
        return estimate - reading
