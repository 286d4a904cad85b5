"""The CPU time a rank deducts from its script's (``intercept.host_time.clock``): the per-op
dispatch glue and the cost of timing a section, measured once per process by
:func:`measure_deductions`."""

import contextlib
from typing import Any, ContextManager

import torch

from hwmodel.compute.spec import KernelSpec
from hwmodel.errors import SimulationError
from intercept.dispatch.fake_mode import SimFakeMode
from intercept.memory.device_memory import DeviceMemory
from intercept.process import shim

MEASURE_ROUNDS = 10
MEASURE_OPS = 100
""":func:`measure_dispatch_glue` times this many rounds of this many ops (~0.1 s of CPU)."""


class _NullRuntime:
    """Records nothing: the runtime of :func:`measure_dispatch_glue`'s private mode."""

    counts_work = False

    def autograd(self, *, recorded: bool, node: object | None) -> None:
        return None

    def tensor_subclass(self) -> None:
        return None

    def excluded(self) -> ContextManager[None]:
        return contextlib.nullcontext()

    def kernel(self, spec: KernelSpec, stream: int, tensors: int = 1,
               host_key: str | None = None) -> None:
        return None

    def host_op(self, name: str) -> None:
        return None

    def sync(self, kind: str, target: int = 0) -> int:
        return 0


def _plain_call(a: Any, b: Any) -> Any:
    """What the measurement compares an op dispatch with: a plain Python call of two arguments."""
    return a


def measure_dispatch_glue(rounds: int = MEASURE_ROUNDS, ops: int = MEASURE_OPS) -> int:
    """CPU ns per op dispatch that no excluded section covers, beyond a plain Python call.

    Needs the shim's interpreter callbacks excluded (``shim.exclude_interpreter_callbacks``),
    the section deduction in force and no dispatch deduction. Times ``x.add_(y)`` on two small
    fake CUDA tensors, in a private mode and memory counter, against ``_plain_call(x, y)``, as
    the calling thread's CPU time that counts as the script's; returns the smallest difference
    per op over ``rounds`` (never negative). That difference is the Python binding, the
    dispatcher up to the Python key and the Python fallback's glue: a real GPU host's per-op
    framework and launch cost is the runtime's modelled launch overhead instead.

    The smallest round, not the median: on a loaded machine a round's CPU time inflates with
    contention (up to 3x on 2 shared cores), and a deduction above the glue's own cost would
    take the script's CPU time. Under load the glue costs more than deducted and the rest stays
    in virtual time, as the script's own CPU time inflates too.

    NB: one trivial op stands for all of them; ops with more arguments, outputs or autograd
    work have a little more glue, and ops the autograd engine issues (no Python binding) a
    little less (``intercept.host_time.clock`` gives the measured spread).
    """
    if shim.deductions().dispatch_ns:
        raise SimulationError("measure the dispatch glue while no dispatch deduction is in "
                              "force")
    counted_ns = shim.thread_counted_ns
    with SimFakeMode(_NullRuntime(), DeviceMemory(total_bytes=2**40, sm_arch=90)):
        x = torch.empty(16, device="cuda")
        y = torch.empty(16, device="cuda")
        for _ in range(ops):  # warm up FakeTensorMode's dispatch cache
            x.add_(y)
        per_round_ns = []
        for _ in range(rounds):
            start_ns = counted_ns()
            for _ in range(ops):
                x.add_(y)
            middle_ns = counted_ns()
            for _ in range(ops):
                _plain_call(x, y)
            end_ns = counted_ns()
            per_round_ns.append((middle_ns - start_ns) - (end_ns - middle_ns))
    return max(0, min(per_round_ns) // ops)


_deductions_measured = False


def measure_deductions() -> None:
    """Measure the shim's deductions for the CPU time no excluded section covers, once per
    process (a fork server's ranks inherit them); after ``intercept.dispatch.patches.install``.
    Only a script's measured CPU time (``simulation.host_time: measured``) needs them."""
    global _deductions_measured
    if _deductions_measured:
        return
    section_ns = shim.measure_section_deduction()
    shim.set_deductions(shim.Deductions(section_ns, 0))
    shim.set_deductions(shim.Deductions(section_ns, measure_dispatch_glue()))
    _deductions_measured = True
