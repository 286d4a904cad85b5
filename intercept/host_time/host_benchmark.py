"""The host-speed benchmark: a short, fixed stand-in for a training script's host work.

A rank's virtual time counts the script's own CPU time, measured on the machine that simulates,
which is neither the GPU host being simulated nor steady (``docs/models/host.md``). Timing this
benchmark here and on the reference hosts gives the ratio that converts one into the other
(``intercept.host_time.host_speed``). Its components (:data:`COMPONENTS`, :func:`measure`) stand for
what a script's host side runs between kernel launches: Python bytecode, function and method calls,
small dict and attribute work (``nn.Module.__call__``, hooks, optimizer loops, DTensor's
Python) and torch's CPU op dispatch on tiny tensors. Each component is timed in the calling
thread's CPU time; a measurement keeps each component's fastest of a few rounds.

Only torch and the standard library (``intercept.process.shim`` imports no more until loaded): the
benchmark runs on the device hosts as it runs here. torch is imported lazily; where it is not
imported, only the pure-Python components run.
"""

import _thread
import gc
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from hwmodel.measured.host_references import BENCHMARK_COMPONENTS, BENCHMARK_VERSION
from intercept.process import shim

ROUNDS = 5
"""Rounds of a full measurement (each runs every component once); ~20-50 ms of CPU in all."""

_thread_time_ns = time.thread_time_ns


class _Probe:
    """A small object with attributes and a method: what module and optimizer code touches."""

    __slots__ = ("bias", "hooks", "training", "weight")

    def __init__(self) -> None:
        self.weight = 1
        self.bias = 0
        self.training = True
        self.hooks: dict[int, Callable[[int], int]] = {}

    def forward(self, x: int, *, scale: int = 1) -> int:
        return x * scale + self.bias


def _bytecode(n: int) -> int:
    """Arithmetic, comparisons, branches and local variables: the interpreter's core loop."""
    total = 0
    for i in range(n):
        x = i * 3 + 7
        if x % 5 == 0:
            total += x >> 1
        elif x & 1:
            total -= i
        else:
            total ^= x
    return total


def _calls(n: int) -> int:
    """Function, method, keyword and closure calls, like nested module ``__call__`` chains."""
    probe = _Probe()
    offset = 3

    def closure(value: int) -> int:
        return value + offset

    def wrapper(value: int, *args: int, **kwargs: int) -> int:
        return probe.forward(closure(value), **kwargs)

    total = 0
    for i in range(n):
        total += wrapper(i, scale=2)
        total += len((i, total))
    return total


def _objects(n: int) -> int:
    """Dict, attribute, isinstance and small container work: hook tables, state dicts,
    parameter groups."""
    probe = _Probe()
    state: dict[str, Any] = {}
    keys = ("step", "exp_avg", "exp_avg_sq", "lr")
    total = 0
    for i in range(n):
        key = keys[i & 3]
        state[key] = state.get(key, 0) + 1
        probe.weight = probe.weight + 1 if probe.training else probe.weight
        if isinstance(state[key], int) and getattr(probe, "hooks", None) is not None:
            total += len(probe.hooks) + state[key]
        group: dict[str, Any] = {"params": [probe], "lr": 0.1, "index": i}
        total += len(group["params"])
    return total


@cache
def _default_dispatch_keys() -> tuple[Any, Any]:
    """The dispatch-key sets a fresh thread starts with (torch's thread-local defaults), read
    once from a bare thread (``threading.Thread`` may run under the rank's fake mode)."""
    import torch

    keys: list[tuple[Any, Any]] = []
    done = _thread.allocate_lock()
    done.acquire()

    def read() -> None:
        keys.append((torch._C._dispatch_tls_local_include_set(),
                     torch._C._dispatch_tls_local_exclude_set()))
        done.release()

    _thread.start_new_thread(read, ())
    done.acquire()
    return keys[0]


def _torch_ops(n: int) -> int:
    """torch's CPU op dispatch on tiny tensors: binding, dispatcher, a trivial kernel.

    Dispatched as at a script's top level (no modes, default dispatch keys), also where the
    clock happens to measure from inside an op's dispatch (which skips the autograd layer)."""
    import torch

    include, exclude = _default_dispatch_keys()
    with (torch._C._ForceDispatchKeyGuard(include, exclude),
          torch.utils._python_dispatch._disable_current_modes(), torch.no_grad()):
        a = torch.ones(16)
        b = torch.ones(16)
        total = 0
        for _ in range(n):
            c = torch.add(a, b)
            c.mul_(0.5)
            d = c.view(4, 4).t()
            total += d.size(0) + int(c.dim())
            torch.empty(16)
    return total


@dataclass(frozen=True)
class Component:
    """One part of the benchmark: ``run(iterations)`` and whether it needs torch imported."""

    run: Callable[[int], int]
    iterations: int
    needs_torch: bool = False


COMPONENTS: Mapping[str, Component] = {
    "bytecode": Component(_bytecode, 12_000),
    "calls": Component(_calls, 2_500),
    "objects": Component(_objects, 3_000),
    "torch_ops": Component(_torch_ops, 150, needs_torch=True),
}
"""The benchmark; sized for about 1 ms per component on a 2020s server core (5 ms a round).
Its version (``BENCHMARK_VERSION``) and names (``BENCHMARK_COMPONENTS``) are the reference
table's (``hwmodel.measured.host_references``): change them together."""
assert tuple(COMPONENTS) == BENCHMARK_COMPONENTS, "the reference table names other components"


def available_components() -> tuple[str, ...]:
    """Components this process can run without importing anything new."""
    has_torch = "torch" in sys.modules
    return tuple(name for name, c in COMPONENTS.items() if has_torch or not c.needs_torch)


def measure(rounds: int = ROUNDS, components: tuple[str, ...] | None = None,
            cpu_ns: Callable[[], int] = _thread_time_ns) -> dict[str, int]:
    """CPU ns of each component (default :func:`available_components`) on the calling thread's
    ``cpu_ns`` clock: its fastest of ``rounds`` rounds. Rounds interleave the components, so
    load that changes during a measurement affects them alike. The garbage collector is paused
    while timing (a collection would land on whichever component happened to allocate last)."""
    if rounds < 1:
        raise ValueError(f"rounds is {rounds}; at least 1")
    names = available_components() if components is None else components
    best = {name: 0 for name in names}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for round_index in range(rounds):
            for name in names:
                component = COMPONENTS[name]
                start_ns = cpu_ns()
                component.run(component.iterations)
                elapsed_ns = cpu_ns() - start_ns
                if round_index == 0 or elapsed_ns < best[name]:
                    best[name] = elapsed_ns
    finally:
        if gc_was_enabled:
            gc.enable()
    return best


def measure_as_script(rounds: int) -> dict[str, int]:
    """:func:`measure` in a rank process: timed as the clock times the script (the shim's
    counted CPU, its sections open here suspended), so that what the shim keeps out of virtual
    time is kept out of the benchmark too (it accounts every tensor the torch component frees,
    which would otherwise add ~70% to that component)."""
    with shim.script_time():
        return measure(rounds, cpu_ns=shim.thread_counted_ns)
