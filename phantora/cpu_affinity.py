"""Which of this machine's CPUs a simulation runs on.

A rank's virtual time counts its script's CPU time (``intercept.host_time.clock``), so anything that
slows this machine's CPUs while the script runs lands in the estimate. On a machine of at most
two CPUs that slow each other like hyper-thread siblings, a one-rank simulation runs on one CPU
by default; several ranks are not pinned (time-sharing one CPU made them slower and further from
the measured steps). The measurements behind both choices: ``docs/models/host.md``.
"""
import os
from collections.abc import Iterator
from contextlib import contextmanager

SHARED_CORE_MAX_CPUS = 2
"""Machines with at most this many usable CPUs run a one-rank simulation on one of them by
default."""


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask, which a container may narrow)."""
    return sorted(os.sched_getaffinity(0))


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
    os.sched_setaffinity(0, before[:count])
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
