"""The flow DAG: how a collective (or a batch of them) is handed to the engine.

A collective is planned into flows between GPUs with dependencies. A flow may start once
every flow in ``deps`` has completed, plus ``delay_ns`` (per-step protocol/kernel latency);
a flow with no deps starts at the collective's start plus ``delay_ns``. The collective ends
``tail_ns`` after its last flow completes.
"""

from dataclasses import dataclass, field

from phantora.network.base import GpuId


@dataclass(frozen=True, slots=True)
class FlowSpec:
    src: GpuId
    dst: GpuId
    nbytes: int
    """Bytes on the wire, protocol overhead included (LL doubles the payload)."""
    tag: int
    """Connection id: flows with the same (src, dst, tag) share one connection (an NCCL channel)."""
    deps: tuple[int, ...] = ()
    """Indices of earlier flows in the same DAG that must complete first."""
    delay_ns: int = 0


@dataclass
class FlowDag:
    """A planned collective; ``flows`` are topologically ordered (deps point backwards)."""

    flows: list[FlowSpec] = field(default_factory=list)
    tail_ns: int = 0
    algorithm: str = ""
    protocol: str = ""
    channels: int = 0

    def add(self, src: GpuId, dst: GpuId, nbytes: int, tag: int,
            deps: tuple[int, ...] = (), delay_ns: int = 0) -> int:
        """Append a flow and return its index (use it in later flows' ``deps``)."""
        self.flows.append(FlowSpec(src, dst, nbytes, tag, deps, delay_ns))
        return len(self.flows) - 1
