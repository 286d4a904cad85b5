"""Busy CPUs to measure under: ``measure_host_speed.py --load N`` measures the host-CPU
benchmark beside them, ``tests/integration/test_host_time_counted.py`` checks that counted host
time does not move with them."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager


def _spin() -> None:
    while True:
        pass


@contextmanager
def busy_cpus(processes: int) -> Iterator[None]:
    """``processes`` busy-looping processes run while inside."""
    context = multiprocessing.get_context("fork")
    spinners = [context.Process(target=_spin, daemon=True) for _ in range(processes)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.terminate()
        for spinner in spinners:
            spinner.join()
