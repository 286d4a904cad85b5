"""The reference GPU hosts' benchmark times (``hwmodel/measured/data/host_speed.json``,
measured by ``scripts/measure/measure_host_speed.py`` on H100 and H200 cloud VMs; raw output and
method in ``scripts/measure/data/host/``), and the ratio of one of them to this machine.

Standard library only: the scenario checks ``simulation.host_cpu`` against these names and the
ranks (``intercept.host_time``) scale by them, so both sides read this module and it imports
neither.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from hwmodel.measured.tables import HOST_SPEED

BENCHMARK_VERSION = 1
"""The version of the host-speed benchmark (``intercept.host_time.host_benchmark``) whose times
the table holds. Bump it when any component or its iteration count changes: reference numbers
of another version no longer compare (loading them then fails)."""
BENCHMARK_COMPONENTS = ("bytecode", "calls", "objects", "torch_ops")
"""The benchmark's components (``host_benchmark.COMPONENTS``), the names a reference's times
are keyed by."""
REFERENCES_PATH = HOST_SPEED.path
NATIVE = "native"
"""``simulation.host_cpu`` value that counts this machine's CPU time unscaled."""


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

    def op_factor(self, source: str, target: str) -> float:
        """How many times as long host ``target``'s torch op path takes as host ``source``'s:
        the ratio of their ``torch_ops`` probe components (what op costs are made of)."""
        for name in (source, target):
            if name not in self.hosts:
                raise ValueError(f"unknown reference host {name!r}; expected one of "
                                 f"{', '.join(sorted(self.hosts))}")
        return (self.hosts[target].components_ns["torch_ops"]
                / self.hosts[source].components_ns["torch_ops"])


def parse_references(document: Mapping[str, Any]) -> References:
    """Validate a ``host_speed.json`` document (see ``scripts/measure/data/host/README.md``)."""
    version = document.get("benchmark_version")
    if version != BENCHMARK_VERSION:
        raise ValueError(f"host speed references are for benchmark version {version}; this is "
                         f"version {BENCHMARK_VERSION} (re-run "
                         "scripts/measure/measure_host_speed.py)")
    hosts = {}
    for name, entry in document["hosts"].items():
        components = {str(k): int(v) for k, v in entry["components_ns"].items()}
        unknown = set(components) - set(BENCHMARK_COMPONENTS)
        if unknown or min(components.values(), default=0) <= 0:
            raise ValueError(f"host {name!r}: components must be positive times of "
                             f"{sorted(BENCHMARK_COMPONENTS)}, got {components}")
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


def reference_host(host_cpu: str | None, gpu: str) -> str:
    """The reference host ``simulation.host_cpu`` names; ``None`` (reproducible mode) or
    :data:`NATIVE` take the reference host of ``gpu``, a catalogue key."""
    if host_cpu is None or host_cpu == NATIVE:
        return references().for_gpu(gpu).name
    return host_cpu
