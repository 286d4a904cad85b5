"""c10d's Python collective functions count as the host-cost table's, not as measured script time.

The table's cost of a collective (``intercept.host_time.host_cost``, ``collectives_ns``) was
measured as a real host's whole ``dist.all_reduce(...)`` call: c10d's Python wrapper (argument
checks, group lookup, logging decorators), ProcessGroupNCCL's work, events and NCCL's enqueue. In a
rank, the same Python wrapper runs for real before the phantora backend charges that cost, so it
would be counted twice: once as the table's, once measured as the script's (~20 us on this machine's
CPU, with the load it carries). :func:`excluded_calls` runs each public collective function in an
excluded section (the shim's account: ``intercept.process.shim.simulator_time``), so the table's
figure is the collective's whole host cost. Collectives that DDP's reducer issues from C++ never
pass through these functions; they are charged the same table cost.
"""

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from intercept.process import shim

COLLECTIVE_FUNCTIONS = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter",
    "reduce_scatter_tensor", "reduce_scatter_single", "broadcast", "reduce", "all_to_all",
    "all_to_all_single", "barrier", "send", "recv", "isend", "irecv", "gather", "scatter",
    "batch_isend_irecv", "_all_gather_base", "_reduce_scatter_base",
)
"""The ``torch.distributed`` functions whose whole call the table's collective cost stands for
(object collectives, which pickle for real, are not among them)."""


def _in_simulator_time(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        with shim.simulator_time():
            return function(*args, **kwargs)

    return call


@contextmanager
def excluded_calls() -> Iterator[None]:
    """While inside, the :data:`COLLECTIVE_FUNCTIONS` of ``torch.distributed`` (and of
    ``distributed_c10d``, where they live) run in an excluded section. The fork server enters it
    once for good; tests enter and leave it."""
    saved: list[tuple[object, str, object]] = []
    for name in COLLECTIVE_FUNCTIONS:
        original = getattr(c10d, name, None)
        if original is None:
            continue
        wrapped = _in_simulator_time(original)
        for owner in (c10d, dist):
            if getattr(owner, name, None) is original:
                saved.append((owner, name, original))
                setattr(owner, name, wrapped)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
