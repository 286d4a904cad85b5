"""The simulated host's CPUs, as the script sees them.

A rank runs on this machine, but its script asks about the host it would run on: a DataLoader
sizes its workers by ``len(os.sched_getaffinity(0))`` and warns above it, a launcher helper
divides ``os.cpu_count()`` by the local ranks. :func:`simulate_host_cpus` makes ``os.cpu_count``,
``os.sched_getaffinity`` (of this process), ``os.process_cpu_count`` (Python 3.13) and so
``multiprocessing.cpu_count`` report the simulated host's logical CPUs (``cluster.cpus_per_host``).
An ``os.sched_setaffinity`` of this process narrows what the script sees, checked as Linux
checks it, and pins nothing: the simulator alone decides where a rank really runs
(``phantora.cpu_affinity``, which reads the real mask through ``__wrapped__``). DataLoader
workers are forked from the rank and see the same host. ``torch.get_num_threads`` is left as
it is: torch sized its pool on import, from ``OMP_NUM_THREADS`` or this machine.
"""

import errno
import os
from collections.abc import Callable, Iterable
from typing import Any


def simulate_host_cpus(count: int) -> None:
    """From now on this process (and every process it forks) sees a host of ``count`` logical
    CPUs, ``0 .. count - 1``, all of them in its affinity mask."""
    if count < 1:
        raise ValueError(f"a host has at least one CPU, got {count}")
    host = frozenset(range(count))
    mask = [host]

    def own(pid: int) -> bool:
        return pid in (0, os.getpid())

    def cpu_count() -> int:
        return count

    def process_cpu_count() -> int:
        return len(mask[0])

    def sched_getaffinity(pid: int) -> set[int]:
        return set(mask[0]) if own(pid) else real_get(pid)

    def sched_setaffinity(pid: int, cpus: Iterable[int]) -> None:
        if not own(pid):
            real_set(pid, cpus)
            return
        wanted = frozenset(cpus) & host
        if not wanted:  # as the kernel answers a mask with no CPU of this host
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        mask[0] = wanted

    real_get = _unwrapped(os.sched_getaffinity)
    real_set = _unwrapped(os.sched_setaffinity)
    _replace("cpu_count", cpu_count)
    _replace("sched_getaffinity", sched_getaffinity)
    _replace("sched_setaffinity", sched_setaffinity)
    if hasattr(os, "process_cpu_count"):  # Python 3.13
        _replace("process_cpu_count", process_cpu_count)


def _unwrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    return getattr(function, "__wrapped__", function)


def _replace(name: str, stand_in: Callable[..., Any]) -> None:
    """``os.<name>`` -> ``stand_in``, the real function kept as its ``__wrapped__``."""
    real = _unwrapped(getattr(os, name))
    stand_in.__wrapped__ = real  # type: ignore[attr-defined]
    stand_in.__name__ = stand_in.__qualname__ = name
    stand_in.__doc__ = real.__doc__
    setattr(os, name, stand_in)
