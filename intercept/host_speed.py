"""How fast this machine runs a training script's host work, against a reference GPU host.

A rank's virtual time counts the script's own CPU time (``intercept.clock``), measured on the
machine that simulates. That machine is not the GPU host being simulated, and its speed drifts
with what else runs on it (on the 2-core development VM by up to 2-3x, ``docs/models/host.md``),
which makes host-bound steps look that much slower. So the script's counted CPU time is scaled
by ``reference_ns / local_ns`` of a short, fixed benchmark: what the reference host spent on it
over what this machine spends on it now.

The benchmark (:data:`COMPONENTS`, :func:`measure`) stands for what a training script's host
side runs between kernel launches: Python bytecode, function and method calls, small dict and
attribute work (``nn.Module.__call__``, hooks, optimizer loops, DTensor's Python) and torch's
CPU op dispatch on tiny tensors. Each component is timed in the calling thread's CPU time; a
measurement keeps each component's fastest of a few rounds. The reference hosts' numbers
(``scripts/measure_host_speed.py`` on the lent GPU machines, raw output and method in
``scripts/data/host/``) ship in ``phantora/calibration/data/host_speed.json``. A rank follows
its own speed with :class:`HostSpeed`: single rounds, timed as the clock times the script.

Only torch, the standard library and ``phantora.calibration`` (``intercept.shim`` imports no
more until loaded): the benchmark runs on the device hosts as it runs here. torch is imported
lazily (the coordinator reads reference names without it); where torch is not imported, the
ratio uses the pure-Python components alone.
"""

import _thread
import gc
import json
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from intercept import shim
from phantora.calibration.tables import HOST_SPEED

BENCHMARK_VERSION = 1
"""Bump when any component or its iteration count changes: reference numbers of another
version no longer compare (loading them then fails)."""
REFERENCES_PATH = HOST_SPEED.path
NATIVE = "native"
"""``simulation.host_cpu`` value that counts this machine's CPU time unscaled."""
ROUNDS = 5
"""Rounds of a full measurement (each runs every component once); ~20-50 ms of CPU in all."""
WINDOW = 3
"""Single rounds a rank's :class:`HostSpeed` takes the median of: enough to drop one spoilt
round, few enough to follow a change of speed within two more (see
``intercept.clock.REMEASURE_EVERY_CPU_NS``)."""

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
"""The benchmark; sized for about 1 ms per component on a 2020s server core (5 ms a round)."""


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


@dataclass(frozen=True)
class SpeedRatio:
    """``reference_ns / local_ns``: what one ns of this machine's CPU is worth on the reference
    host. Kept as two integers so scaled times are exact integer arithmetic."""

    reference_ns: int
    local_ns: int

    def __post_init__(self) -> None:
        if self.reference_ns <= 0 or self.local_ns <= 0:
            raise ValueError(f"a speed ratio needs positive times, got {self}")

    @property
    def factor(self) -> float:
        return self.reference_ns / self.local_ns

    def scale(self, local_cpu_ns: int) -> int:
        """``local_cpu_ns`` of this machine's CPU as the reference host's ns (floored)."""
        return local_cpu_ns * self.reference_ns // self.local_ns


UNSCALED = SpeedRatio(1, 1)


@dataclass(frozen=True)
class ReferenceHost:
    """A measured GPU host: its benchmark times and what it is."""

    name: str
    gpus: tuple[str, ...]
    """Catalogue GPU keys whose scenarios default to this host."""
    components_ns: Mapping[str, int]
    description: str

    def ratio(self, local_ns: Mapping[str, int]) -> SpeedRatio:
        """This host against ``local_ns`` (a :func:`measure` result), over the components both
        have."""
        names = [name for name in local_ns if name in self.components_ns]
        if not names:
            raise ValueError(f"no benchmark component in common with reference {self.name!r}")
        return SpeedRatio(sum(self.components_ns[n] for n in names),
                          sum(local_ns[n] for n in names))


@dataclass(frozen=True)
class References:
    """The reference hosts of ``host_speed.json``."""

    hosts: Mapping[str, ReferenceHost]
    fallback: str
    """The host of GPUs no reference names."""

    def for_gpu(self, gpu: str) -> ReferenceHost:
        """The reference host of scenarios with catalogue GPU ``gpu`` (else the fallback)."""
        for host in self.hosts.values():
            if gpu in host.gpus:
                return host
        return self.hosts[self.fallback]


def parse_references(document: Mapping[str, Any]) -> References:
    """Validate a ``host_speed.json`` document (see ``scripts/data/host/README.md``)."""
    version = document.get("benchmark_version")
    if version != BENCHMARK_VERSION:
        raise ValueError(f"host speed references are for benchmark version {version}; this is "
                         f"version {BENCHMARK_VERSION} (re-run scripts/measure_host_speed.py)")
    hosts = {}
    for name, entry in document["hosts"].items():
        components = {str(k): int(v) for k, v in entry["components_ns"].items()}
        unknown = set(components) - set(COMPONENTS)
        if unknown or min(components.values(), default=0) <= 0:
            raise ValueError(f"host {name!r}: components must be positive times of "
                             f"{sorted(COMPONENTS)}, got {components}")
        hosts[name] = ReferenceHost(name, tuple(entry["gpus"]), components,
                                    str(entry.get("description", "")))
    fallback = document["fallback"]
    if fallback not in hosts or NATIVE in hosts:
        raise ValueError(f"fallback {fallback!r} must be one of the hosts {sorted(hosts)}, "
                         f"and no host may be called {NATIVE!r}")
    return References(hosts, fallback)


@cache
def references() -> References:
    """The shipped reference hosts (read once per process)."""
    return parse_references(json.loads(REFERENCES_PATH.read_text()))


def host_cpu_choices() -> tuple[str, ...]:
    """What ``simulation.host_cpu`` accepts: every reference host, then ``native``."""
    return (*sorted(references().hosts), NATIVE)


class HostSpeed:
    """Follows this machine's speed against one reference host, for a rank's clock.

    Keeps the last ``window`` single-round measurements (the first ``window`` taken at
    construction); the ratio compares the reference with each component's median over them:
    one round is cheap enough to repeat while a rank runs (~5 ms), the median drops a round
    that a cold cache or a burst of load spoilt, and it moves with load that lasts. ``measure_fn``
    (rounds -> component ns) is :func:`measure` unless a test injects another.
    """

    def __init__(self, reference: ReferenceHost, *, window: int = WINDOW,
                 measure_fn: Callable[[int], Mapping[str, int]] = measure) -> None:
        if window < 1:
            raise ValueError(f"window is {window}; at least 1")
        self.reference = reference
        self._measure = measure_fn
        self._rounds: deque[Mapping[str, int]] = deque(
            (measure_fn(1) for _ in range(window)), maxlen=window)
        self._ratio = self._current()

    def ratio(self) -> SpeedRatio:
        """The ratio of the latest measurement."""
        return self._ratio

    def remeasure(self) -> SpeedRatio:
        """One more round (its CPU time is the caller's to keep out of virtual time); the new
        ratio."""
        self._rounds.append(self._measure(1))
        self._ratio = self._current()
        return self._ratio

    def _current(self) -> SpeedRatio:
        names = set.intersection(*(set(r) for r in self._rounds))
        local_ns = {name: int(statistics.median(r[name] for r in self._rounds))
                    for name in names}
        return self.reference.ratio(local_ns)


def measure_as_script(rounds: int) -> dict[str, int]:
    """:func:`measure` in a rank process: timed as the clock times the script (the shim's
    counted CPU, its sections open here suspended), so that what the shim keeps out of virtual
    time is kept out of the benchmark too (it accounts every tensor the torch component frees,
    which would otherwise add ~70% to that component)."""
    with shim.script_time():
        return measure(rounds, cpu_ns=shim.thread_counted_ns)


def host_speed_for(host_cpu: str | None) -> HostSpeed | None:
    """What a rank's clock scales its script CPU time with for ``simulation.host_cpu``: a
    :class:`HostSpeed` (measured now: :data:`WINDOW` rounds of ~5 ms of CPU) against that
    reference host, timed as the script is (:func:`measure_as_script` where the shim is
    loaded), or ``None`` for ``native`` or no setting (reproducible mode)."""
    if host_cpu is None or host_cpu == NATIVE:
        return None
    hosts = references().hosts
    if host_cpu not in hosts:
        raise ValueError(f"unknown reference host {host_cpu!r}; expected one of "
                         f"{', '.join(host_cpu_choices())}")
    in_rank = shim.native_exclusion() is not None
    return HostSpeed(hosts[host_cpu], measure_fn=measure_as_script if in_rank else measure)
