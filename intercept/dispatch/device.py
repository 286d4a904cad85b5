"""The fake CUDA device of a rank process: the entry points the fork server and rank use.

::

    device.prepare(gpu, device_count)   # fork server, before anything imports torch
    ...fork...
    mode = device.enter_fake_mode()     # rank, before the script runs

``prepare`` loads the shim (``intercept.process.shim``), imports torch and applies the patches
(``intercept.dispatch.patches``); after it, ``torch.cuda`` reports ``device_count`` GPUs of kind
``gpu``. ``enter_fake_mode`` connects the device to the rank's
:class:`~intercept.runtime.RankRuntime` (stream and event operations through the shim's callback,
kernels and host syncs through
:class:`~intercept.dispatch.fake_mode.SimFakeMode`) and enters the mode for the rest of the process.
"""

import atexit
import gc
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from hwmodel.catalogue import GpuSpec
from hwmodel.errors import SimulationError
from intercept.process import shim
from intercept.process.shim import CallbackOp

if TYPE_CHECKING:
    from intercept.dispatch.fake_mode import FunctionalCollectiveHandler, Runtime, SimFakeMode
    from intercept.memory.device_memory import DeviceMemory
    from launch.value_policy import ValuePolicy

    class DeviceRuntime(Runtime, Protocol):
        """What the device needs of ``intercept.runtime.RankRuntime``."""

        def new_event(self) -> int: ...
        def record_event(self, event: int, stream: int) -> None: ...
        def wait_event(self, stream: int, event: int) -> None: ...


def prepare(gpu: GpuSpec, device_count: int, measure_deductions: bool = True) -> None:
    """Load the shim, import torch, install the patches (must run before torch is imported);
    with ``measure_deductions``, the CPU-time deductions too (``dispatch_glue.measure_deductions``).

    What it makes lives as long as the process (and a fork server's ranks): no garbage
    collection meanwhile (each would traverse all torch made so far: ~1.3 s of CPU in all),
    then frozen, out of every later one's way (a full one would traverse ~300,000 objects and,
    in a forked rank, copy their pages); unfrozen at a normal exit, for the interpreter to free
    (triton's bindings report what it does not).
    """
    gc.disable()
    try:
        library = shim.load()
        from intercept.dispatch import patches  # imports torch: only now that the shim is in

        if not library.fakecuda_accelerator_is_cuda():
            raise SimulationError("torch did not pick up the fake CUDA hooks of the shim (was a "
                                  "torch library loaded before "
                                  "intercept.dispatch.device.prepare()?)")
        patches.install(gpu, device_count)
        gc.freeze()
        atexit.register(gc.unfreeze)
    finally:
        gc.enable()
    if measure_deductions:
        from intercept.dispatch import dispatch_glue

        dispatch_glue.measure_deductions()


def enter_fake_mode(runtime: "DeviceRuntime | None" = None,
                    on_functional_collective: "FunctionalCollectiveHandler | None" = None,
                    policy: "ValuePolicy | None" = None, rank: int = 0) -> "SimFakeMode":
    """Enter the process's :class:`SimFakeMode`, recording to ``runtime``.

    ``runtime`` defaults to ``RankRuntime.current()``. ``on_functional_collective`` receives
    every ``_c10d_functional`` op (the process group's entry point); without one such an op
    raises. ``policy`` is the scenario's value model (default: seed 0, uniform routing), drawn
    per ``rank``. The mode stays entered (in every thread the script starts) for the process's
    life.
    """
    from intercept.dispatch import cuda_devices, fake_mode
    from launch.value_policy import ValuePolicy

    if fake_mode.active() is not None:
        raise SimulationError("the fake CUDA mode is already entered in this process")
    if runtime is None:
        runtime = _rank_runtime()
    memory = cuda_devices.installed().memory
    mode = fake_mode.SimFakeMode(runtime, memory, on_functional_collective,
                                 policy or ValuePolicy(), rank)
    if hasattr(runtime, "set_value_sink"):  # a rank's runtime (tests pass stand-ins)
        runtime.set_value_sink(mode.values.deliver)
        mode.values.set_update_sender(runtime.send_values)
    shim.set_callback(_stream_event_bridge(runtime, memory))
    mode.__enter__()
    fake_mode.activate(mode)
    return mode


def _rank_runtime() -> "DeviceRuntime":
    try:
        from intercept.runtime import RankRuntime
    except ImportError as error:
        raise SimulationError("intercept.runtime is not available; pass runtime= to "
                              "enter_fake_mode()") from error
    runtime = RankRuntime.current()
    if runtime is None:
        raise SimulationError("no RankRuntime in this process (not a simulated rank); pass "
                              "runtime= to enter_fake_mode()")
    return runtime


def _stream_event_bridge(runtime: "DeviceRuntime",
                         memory: "DeviceMemory") -> Callable[[int, int, int], int]:
    """The shim's callback: stream and event operations of the device guard -> ``runtime``;
    after a synchronisation, ``memory`` may reuse blocks other streams were using.

    Exceptions cannot cross the C++ frames in between: the traceback is printed and the shim
    raises a RuntimeError in the calling torch function instead.
    """

    def synchronized(kind: str, target: int) -> int:
        done = runtime.sync(kind, target)
        memory.synchronized()
        return done

    def query_stream(stream: int) -> int:
        event = runtime.new_event()
        runtime.record_event(event, stream)
        return runtime.sync("query", event)

    def record_event(event: int, stream: int) -> int:
        runtime.record_event(event, stream)
        return 0

    def wait_event(stream: int, event: int) -> int:
        runtime.wait_event(stream, event)
        return 0

    handlers: dict[int, Callable[[int, int], int]] = {
        CallbackOp.NEW_EVENT: lambda a, b: runtime.new_event(),
        CallbackOp.RECORD_EVENT: record_event,
        CallbackOp.WAIT_EVENT: wait_event,
        CallbackOp.SYNC_DEVICE: lambda a, b: synchronized("device", 0),
        CallbackOp.SYNC_STREAM: lambda a, b: synchronized("stream", a),
        CallbackOp.SYNC_EVENT: lambda a, b: synchronized("event", a),
        CallbackOp.QUERY_EVENT: lambda a, b: runtime.sync("query", a),
        CallbackOp.QUERY_STREAM: lambda a, b: query_stream(a),
    }

    def callback(op: int, a: int, b: int) -> int:
        try:
            return int(handlers[op](a, b))
        except BaseException:  # noqa: BLE001 - must not unwind into C++
            traceback.print_exc()
            return -1

    return callback
