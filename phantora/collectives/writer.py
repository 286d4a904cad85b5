"""Appends flows to a FlowDag the same way for every algorithm: wire bytes and hop delays.

Planners think in payload bytes and hops; the writer turns a payload into wire bytes (see
:mod:`~phantora.collectives.efficiency`) and a hop into a ``delay_ns`` that, with the
propagation latency the network adds, sums to NCCL's per-hop latency along a chunk's path.
Flows without dependencies also wait NCCL's base latency (kernel launch, first handshake).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from phantora.cluster.topology import LinkKind
from phantora.collectives.efficiency import NcclEfficiency
from phantora.collectives.dag import FlowDag
from phantora.collectives.system import SystemInfo
from phantora.collectives.tuning import HopLatency
from phantora.network.base import GpuId


@dataclass
class FlowWriter:
    """Builds one collective's :class:`FlowDag`."""

    system: SystemInfo
    nccl_efficiency: NcclEfficiency
    efficiency: Mapping[LinkKind, float]
    """Payload bytes per wire byte, per link kind, for the chosen algorithm and protocol."""
    latency: HopLatency
    """NCCL's latency terms for the chosen algorithm and protocol (size factor applied)."""
    dag: FlowDag = field(default_factory=FlowDag)

    def hop_ns(self, src: GpuId, dst: GpuId) -> int:
        """NCCL's latency of one protocol step from ``src`` to ``dst``, propagation included."""
        same_host = self.system.host_of(src) == self.system.host_of(dst)
        return round((self.latency.intra_us if same_host else self.latency.inter_us) * 1000)

    def send(self, src: GpuId, dst: GpuId, payload: int, tag: int, deps: Sequence[int] = ()
             ) -> int:
        """One flow carrying ``payload`` bytes over one protocol step."""
        return self.relay(src, dst, payload, tag, deps)[0]

    def relay(self, src: GpuId, dst: GpuId, payload: int, tag: int, deps: Sequence[int] = (),
              via: GpuId | None = None, chain_ns: int | None = None) -> tuple[int, ...]:
        """Send ``src -> dst``; across hosts through ``via``'s NIC when given (PXN).

        NB: NCCL's PXN proxy forwards slot by slot, so the NVLink leg ``src -> via`` and the
        NIC leg ``via -> dst`` run at the same time here (cut-through), both after ``deps``;
        whoever consumes the data waits for both. Returns the flows delivering the data.

        ``chain_ns``: the payload stands for several pipelined steps whose step latencies add
        up to this; the data flows pay one step's latency, and a zero-byte flow holds the
        delivery until ``chain_ns`` after ``deps`` (latency and transmission overlap, as
        NCCL's FIFO slots let them).
        """
        hop_ns = self.hop_ns(src, dst)
        if via is None or via == src or self.system.host_of(src) == self.system.host_of(dst):
            legs = ((src, dst),)
        else:
            legs = ((src, via), (via, dst))
        delivering = tuple(self._add(a, b, payload, tag, deps,
                                     hop_ns - self.system.hop_latency_ns(a, b))
                           for a, b in legs)
        if chain_ns is None:
            return delivering
        return (*delivering, self._add(src, dst, 0, tag, deps, chain_ns))

    def _add(self, src: GpuId, dst: GpuId, payload: int, tag: int, deps: Sequence[int],
             delay_ns: int) -> int:
        if not deps:
            delay_ns += round(self.latency.base_us * 1000)
        kind = self.system.link_kind(src, dst)
        nbytes = self.nccl_efficiency.wire_bytes(payload, self.efficiency[kind])
        return self.dag.add(src, dst, nbytes, tag, tuple(deps), max(0, delay_ns))
