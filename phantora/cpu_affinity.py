"""Which of this machine's CPUs a simulation runs on.

A rank's virtual time counts its script's CPU time (``intercept.host_time.clock``), so anything that
slows this machine's CPUs while the script runs lands in the estimate. On a machine of at most
two CPUs that slow each other like hyper-thread siblings, a one-rank simulation runs on one CPU
by default; several ranks are not pinned (time-sharing one CPU made them slower and further from
the measured steps). The measurements behind both choices: ``docs/models/host.md``.
"""
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

SHARED_CORE_MAX_CPUS = 2
"""Machines with at most this many usable CPUs run a one-rank simulation on one of them by
default."""


def _real(name: str) -> Callable[..., Any]:
    """``os.<name>`` as this machine answers it: inside a rank ``os`` reports the simulated host
    (``intercept.process.host_cpus``, which keeps the real function as ``__wrapped__``)."""
    function = getattr(os, name)
    return getattr(function, "__wrapped__", function)  # type: ignore[no-any-return]


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask, which a container may narrow)."""
    return sorted(_real("sched_getaffinity")(0))


def default_cpus(ranks: int) -> int:
    """``simulation.cpus`` when a scenario does not say: 1 for a single rank on a machine of at
    most :data:`SHARED_CORE_MAX_CPUS` usable CPUs, else all of them."""
    count = len(usable_cpus())
    return 1 if ranks == 1 and count <= SHARED_CORE_MAX_CPUS else count


@contextmanager
def pinned(count: int) -> Iterator[None]:
    """Run this process, and every process it starts inside, on the first ``count`` usable CPUs;
    the previous affinity comes back on exit."""
    before = usable_cpus()
    if not 1 <= count <= len(before):
        raise ValueError(f"cannot run on {count} CPUs: this process may use {len(before)}")
    if count == len(before):
        yield
        return
    _real("sched_setaffinity")(0, before[:count])
    try:
        yield
    finally:
        _real("sched_setaffinity")(0, before)
