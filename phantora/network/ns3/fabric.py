"""Turns a :class:`~phantora.cluster.topology.Topology` into an ns-3 fabric.

Only the inter-host part is built: every GPU with a NIC link becomes an ns-3 endpoint with
one NIC, every fabric switch a forwarding node, every non-NVLink link a point-to-point link.
NVSwitches and NVLinks are left out (intra-host traffic is another model's job).
"""

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from hwmodel.errors import BackendError
from phantora.cluster.topology import LinkKind, NodeKind, Topology
from phantora.network.ns3.config import Ns3Config


@dataclass(frozen=True, slots=True)
class Fabric:
    """The built fabric: the C++ helper plus the GPU -> ns-3 node index map."""

    helper: Any
    """The C++ helper that owns the nodes and reports the counters."""
    gpu_node: dict[int, int]
    """GPU id -> node index in ``helper`` (GPUs without a NIC are absent)."""
    node_names: tuple[str, ...]
    """Topology name of each node of ``helper``, by node index."""
    link_index: dict[int, int]
    """Topology link index -> the helper's link index (its ``AddLink`` order; NVLinks absent)."""


def build_fabric(helper: Any, topology: Topology) -> Fabric:
    """Add ``topology``'s fabric nodes and links to ``helper`` (a ``phantora::FabricHelper`` or
    ``phantora::RoceFabricHelper``: same construction calls) and install it.

    ``topology`` must have passed :func:`check_topology`.
    """
    gpu_of_node = {node: gpu for gpu, node in enumerate(topology.gpu_nodes)}
    fabric_index: dict[int, int] = {}
    link_index: dict[int, int] = {}
    for index, link in enumerate(topology.links):
        if link.kind is LinkKind.NVLINK:
            continue
        link_index[index] = len(link_index)
        for node in (link.a, link.b):
            if node not in fabric_index:
                is_gpu = topology.nodes[node].kind is NodeKind.GPU
                fabric_index[node] = helper.AddEndpoint() if is_gpu else helper.AddSwitch()
        helper.AddLink(fabric_index[link.a], fabric_index[link.b],
                       round(link.gbps * 1e9), link.latency_ns)
    names = [""] * len(fabric_index)
    for node, index in fabric_index.items():
        names[index] = topology.nodes[node].name
        if hasattr(helper, "SetNodeName"):  # the RoCE helper names ports in its errors
            helper.SetNodeName(index, names[index])
    helper.Install()
    gpu_node = {gpu_of_node[node]: index for node, index in fabric_index.items()
                if node in gpu_of_node}
    return Fabric(helper, gpu_node, tuple(names), link_index)


def check_topology(topology: Topology) -> None:
    """Reject what ns-3 would turn into a fatal error or a silently wrong model."""
    nics = [0] * topology.num_gpus
    gpu_of_node = {node: gpu for gpu, node in enumerate(topology.gpu_nodes)}
    for index, link in enumerate(topology.links):
        if link.kind is LinkKind.NVLINK:
            continue
        if not (math.isfinite(link.gbps) and link.gbps > 0):
            raise BackendError(f"topology {topology.name!r} link {index}: gbps={link.gbps}; "
                               "expected a finite rate > 0")
        if link.latency_ns < 0:
            raise BackendError(f"topology {topology.name!r} link {index}: latency_ns="
                               f"{link.latency_ns}; expected >= 0")
        for node in (link.a, link.b):
            if node in gpu_of_node:
                nics[gpu_of_node[node]] += 1
    if topology.hosts > 1:
        for gpu, count in enumerate(nics):
            if count != 1:
                raise BackendError(f"topology {topology.name!r}: GPU {gpu} has {count} NIC "
                                   "links; the ns-3 backend models exactly one NIC per GPU")


def longest_path_buffer_bytes(topology: Topology, config: Ns3Config) -> int:
    """:func:`path_buffer_bytes` of the hop-shortest path from GPU 0 to the GPU farthest from
    it (builders make every GPU alike). It sizes every receive window."""
    hops, latency_ns, slowest_gbps = _farthest_path(topology)
    return path_buffer_bytes(topology, config, hops, latency_ns, slowest_gbps)


def connection_buffer_bytes(topology: Topology, config: Ns3Config, src: int, dst: int) -> int:
    """:func:`path_buffer_bytes` of the fabric path from GPU ``src`` to GPU ``dst``: what
    Linux autotuning converges to, so a connection queues about one BDP in its own NIC."""
    links = [topology.links[index] for index in topology.fabric_path(src, dst, flow_key=0)]
    return path_buffer_bytes(topology, config, len(links),
                             sum(link.latency_ns for link in links),
                             min(link.gbps for link in links))


def path_buffer_bytes(topology: Topology, config: Ns3Config, hops: int, latency_ns: int,
                      slowest_gbps: float) -> int:
    """Twice the path's bandwidth-delay product, in whole segments (at least 16).

    RTT = 2 x (propagation + one MTU's store-and-forward per hop); bandwidth = the fastest
    NIC. An ACK waits behind no data (NicQueueDisc), so that is the RTT TCP sees on an idle
    path.
    """
    nic_gbps = topology.fastest_nic_gbps() or slowest_gbps
    rtt_ns = 2 * (latency_ns + hops * config.mtu_bytes * 8 / slowest_gbps)
    bdp_bytes = nic_gbps * rtt_ns / 8
    segments = max(16, math.ceil(2 * bdp_bytes / config.segment_bytes))
    return min(segments * config.segment_bytes, 2**30)


def _farthest_path(topology: Topology) -> tuple[int, int, float]:
    """(hops, summed latency ns, slowest link gbps) to the GPU farthest from GPU 0 (BFS)."""
    if not topology.gpu_nodes:
        return 0, 0, 1.0
    adjacent: dict[int, list[tuple[int, int]]] = {}
    for index, link in enumerate(topology.links):
        if link.kind is not LinkKind.NVLINK:
            adjacent.setdefault(link.a, []).append((index, link.b))
            adjacent.setdefault(link.b, []).append((index, link.a))
    source = topology.gpu_nodes[0]
    best: dict[int, tuple[int, int, float]] = {source: (0, 0, math.inf)}
    queue = deque([source])
    gpus = set(topology.gpu_nodes)
    while queue:
        node = queue.popleft()
        hops, latency_ns, slowest = best[node]
        if node in gpus and node != source:
            continue  # GPUs are endpoints, never transit
        for index, nxt in adjacent.get(node, []):
            link = topology.links[index]
            candidate = (hops + 1, latency_ns + link.latency_ns, min(slowest, link.gbps))
            if nxt not in best:
                best[nxt] = candidate
                queue.append(nxt)
            elif best[nxt][0] == candidate[0] and candidate[1] > best[nxt][1]:
                best[nxt] = candidate  # equal hops, longer latency: keep the worst case
    farthest = max((best[g] for g in gpus if g in best), key=lambda b: (b[1], b[0]))
    return farthest[0], farthest[1], farthest[2] if farthest[2] != math.inf else 1.0
