"""How fast this machine runs a training script's host work, against a reference GPU host.

The script's counted CPU time (``intercept.host_time.clock``) is scaled by
``reference_ns / local_ns`` of the host-speed benchmark (``intercept.host_time.host_benchmark``):
what the reference host (``hwmodel.measured.host_references``) spent on it over what this
machine spends on it now. A rank follows its own speed with :class:`HostSpeed`: single rounds, timed
as the clock times the script.
"""

import statistics
from collections import deque
from collections.abc import Callable, Mapping

from hwmodel.measured.host_references import (NATIVE, ReferenceHost, SpeedRatio,
                                                  host_cpu_choices, references)
from intercept.host_time.host_benchmark import measure, measure_as_script
from intercept.process import shim

WINDOW = 3
"""Single rounds a rank's :class:`HostSpeed` takes the median of: enough to drop one spoilt
round, few enough to follow a change of speed within two more (see
``intercept.host_time.clock.REMEASURE_EVERY_CPU_NS``)."""


class HostSpeed:
    """Follows this machine's speed against one reference host, for a rank's clock.

    Keeps the last ``window`` single-round measurements (the first ``window`` taken at
    construction); the ratio compares the reference with each component's median over them:
    one round is cheap enough to repeat while a rank runs (~5 ms), the median drops a round
    that a cold cache or a burst of load spoilt, and it moves with load that lasts. ``measure_fn``
    (rounds -> component ns) is :func:`measure` unless a test injects another.
    """

    def __init__(self, reference: ReferenceHost, *, window: int = WINDOW,
                 measure_fn: Callable[[int], Mapping[str, int]] = measure) -> None:
        if window < 1:
            raise ValueError(f"window is {window}; at least 1")
        self.reference = reference
        self._measure = measure_fn
        self._rounds: deque[Mapping[str, int]] = deque(
            (measure_fn(1) for _ in range(window)), maxlen=window)
        self._ratio = self._current()

    def ratio(self) -> SpeedRatio:
        """The ratio of the latest measurement."""
        return self._ratio

    def remeasure(self) -> SpeedRatio:
        """One more round (its CPU time is the caller's to keep out of virtual time); the new
        ratio."""
        self._rounds.append(self._measure(1))
        self._ratio = self._current()
        return self._ratio

    def _current(self) -> SpeedRatio:
        names = set.intersection(*(set(r) for r in self._rounds))
        local_ns = {name: int(statistics.median(r[name] for r in self._rounds))
                    for name in names}
        return self.reference.ratio(local_ns)


def host_speed_for(host_cpu: str | None) -> HostSpeed | None:
    """What a rank's clock scales its script CPU time with for ``simulation.host_cpu``: a
    :class:`HostSpeed` (measured now: :data:`WINDOW` rounds of ~5 ms of CPU) against that
    reference host, timed as the script is (:func:`measure_as_script` where the shim is
    loaded), or ``None`` for ``native`` or no setting (reproducible mode)."""
    if host_cpu is None or host_cpu == NATIVE:
        return None
    hosts = references().hosts
    if host_cpu not in hosts:
        raise ValueError(f"unknown reference host {host_cpu!r}; expected one of "
                         f"{', '.join(host_cpu_choices())}")
    in_rank = shim.native_exclusion() is not None
    return HostSpeed(hosts[host_cpu], measure_fn=measure_as_script if in_rank else measure)
