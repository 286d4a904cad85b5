"""Which of this machine's CPUs a simulation runs on.

A rank's virtual time counts its script's CPU time (``intercept.clock``), so anything that
slows this machine's CPUs while the script runs lands in the estimate. On the 2-vCPU
development VM the two vCPUs slow each other like hyper-thread siblings: a GPT-2 124M forward
timed 120 times in a rank had a 34-44% coefficient of variation in counted CPU while the
coordinator ran on the other vCPU, 23% with both pinned to one (``scripts/data/host/README.md``,
session 5). So a one-rank simulation on such a small machine runs on one CPU by default: in
the accuracy harness (3 simulations per case, pinned and unpinned runs some minutes apart) the
single-GPU GPT-2 124M/350M and CI-model steps read 10-15% lower pinned, all closer to the
measured ones (GPT-2 124M batch 8 on H100: 34.2 against 38.9 ms, measured 31.2), in the same
wall time. Several ranks are not pinned: time-sharing one CPU, each rank's script runs on
caches the others have just used, and 2-rank DDP / FSDP2 GPT-2 124M steps read 17% / 10% longer
(further from the measured ones) in 57-65% more wall time.
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
