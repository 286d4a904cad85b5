"""``torch.cuda`` streams, events and synchronisation on the simulated GPUs.

The shim's device guard already makes ``torch.Stream`` and ``torch.Event`` reach the simulator;
these stand in for the ``torch.cuda`` classes and functions a CPU build refuses (listed in
``intercept.dispatch.patches.PATCHES``).
"""

from typing import Any

import torch

from intercept.dispatch.cuda_devices import index_of
from intercept.process import shim


class Stream(torch.Stream):
    """``torch.cuda.Stream``: a ``torch.Stream`` on a fake CUDA device.

    ``wait_event``, ``wait_stream``, ``record_event``, ``query`` and ``synchronize`` are
    torch.Stream's own, which the shim's device guard forwards to the simulator.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:  # wrapping an existing stream
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("cuda", index_of(device)),
                               priority=priority)

    @property
    def cuda_stream(self) -> int:
        return self.stream_id


class Event(torch.Event):
    """``torch.cuda.Event``: record/wait/query/synchronize/elapsed_time reach the simulator;
    ``elapsed_time`` is in milliseconds of virtual time."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> "Event":
        return super().__new__(cls, device="cuda", enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)

    def elapsed_time(self, end_event: torch.Event) -> float:
        # torch.Event's own method refuses anything but an exact torch.Event as end_event.
        if not (self.query() and end_event.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return shim.elapsed_ms(self.event_id, end_event.event_id)


def current_stream(device: Any = None) -> Stream:
    stream = torch.accelerator.current_stream(index_of(device))
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                  device_type=shim.CUDA_DEVICE_TYPE)


def default_stream(device: Any = None) -> Stream:
    return Stream(stream_id=0, device_index=index_of(device),
                  device_type=shim.CUDA_DEVICE_TYPE)


def set_stream(stream: torch.Stream | None) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


def synchronize(device: Any = None) -> None:
    """The stand-in's Python is the simulator's: the call's host cost is the table's
    (``sync_ns``, charged where the wait reaches the simulator)."""
    with shim.simulator_time():
        torch.accelerator.synchronize(index_of(device))


def is_current_stream_capturing() -> bool:
    return False  # CUDA graphs are not simulated
