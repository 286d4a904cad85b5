"""``summary.json``'s ``faults``: each injected fault, resolved, with what it did.

* ``slow_gpu``: ``gpu_ns_added``, per slowed rank the GPU time its factor added to its kernels
  (negative for a factor below 1);
* ``nic_degrade``: ``nic_gbps_before`` / ``nic_gbps_after`` and ``bytes_through_nics``, the
  bytes of fabric flows sent or received by the degraded hosts' GPUs;
* ``link_down``: ``at_ns`` and ``network``, the fabric backend's failure counters (its
  ``network.extra`` keys of :data:`FAILURE_COUNTERS`, without the ``inter.`` prefix).
"""

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from phantora.cluster.topology import Topology
from phantora.scenario.model import Fault, LinkDownFault, NicDegradeFault, SlowGpuFault

FAILURE_COUNTERS = frozenset({
    "link_failures", "rerouted_connections",  # every backend; the fluid model's reroutes
    "drained_packets", "changed_routes", "reordered_packets",  # ns-3 RoCE
    "link_down_drops", "retransmissions",  # ns-3 DCTCP (retransmissions: any loss)
})
"""The fabric backends' ``NetworkStats.extra`` keys that count link failures and what they
caused (``phantora.network``; all but ``retransmissions`` reported only when links fail)."""

_FABRIC = "inter."
"""Prefix of the fabric backend's keys in the composite backend's ``extra``."""


class FlowBytes(Protocol):
    """A flow as it ran or as it was planned: its ends and its bytes on the wire."""

    @property
    def src(self) -> int: ...

    @property
    def dst(self) -> int: ...

    @property
    def nbytes(self) -> int: ...


def fault_rows(faults: Sequence[Fault], topology: Topology, flows: Sequence[FlowBytes],
               scaled_kernel_ns: Mapping[int, int],
               network_extra: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per fault, in scenario order: its resolved keys plus what it did, from the
    run's ``flows``, the engine's ``scaled_kernel_ns`` (``LiveResult``) and the composite
    backend's ``network_extra``."""
    rows = []
    for fault in faults:
        row = fault.model_dump(mode="json")
        if isinstance(fault, SlowGpuFault):
            row["gpu_ns_added"] = {str(rank): scaled_kernel_ns.get(rank, 0)
                                   for rank in fault.ranks}
        elif isinstance(fault, NicDegradeFault):
            hosts = set(fault.hosts)
            row["bytes_through_nics"] = sum(
                flow.nbytes for flow in flows if not topology.same_host(flow.src, flow.dst)
                and (topology.host_of(flow.src) in hosts or topology.host_of(flow.dst) in hosts))
        elif isinstance(fault, LinkDownFault):
            row["network"] = {key.removeprefix(_FABRIC): value
                              for key, value in network_extra.items()
                              if key.startswith(_FABRIC)
                              and key.removeprefix(_FABRIC) in FAILURE_COUNTERS}
        rows.append(row)
    return rows


def fault_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A console line per fault row, saying what it did."""
    lines = []
    for row in rows:
        kind = row["kind"]
        if kind == "slow_gpu":
            added = ", ".join(f"rank {rank} {ns / 1e6:+.3f} ms"
                              for rank, ns in row["gpu_ns_added"].items())
            lines.append(f"fault slow_gpu x{row['factor']:g}: GPU time {added}")
        elif kind == "nic_degrade":
            hosts = ", ".join(map(str, row["hosts"]))
            lines.append(f"fault nic_degrade x{row['factor']:g} on host(s) {hosts}: NICs "
                         f"{row['nic_gbps_before']:g} -> {row['nic_gbps_after']:g} Gbps, "
                         f"{row['bytes_through_nics'] / 1e9:.3f} GB through them")
        else:
            counters = ", ".join(f"{key} {value}" for key, value in row["network"].items())
            lines.append(f"fault link_down {row['link']} at {row['at_ns'] / 1e6:.3f} ms: "
                         + (counters or "no failure counters from the backend"))
    return lines
