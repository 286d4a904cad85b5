"""Where a fluid flow runs: the directed link resources it occupies and its propagation delay.

Every full-duplex link of the topology is two independent resources of ``gbps`` each, one
per direction: resource ``2 * link`` carries ``a -> b`` and ``2 * link + 1`` carries ``b -> a``.
Same-host flows use the source GPU's NVLink up and the destination GPU's NVLink down (the
NVSwitch is non-blocking); cross-host flows follow the topology's per-flow hash ECMP path.
"""

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

from hwmodel.errors import BackendError
from phantora.cluster.topology import Topology
from phantora.network.base import GpuId

Scope = Literal["intra", "inter", "all"]
"""Which flows a fluid backend accepts: same-host only, cross-host only, or both."""

SCOPES: tuple[str, ...] = get_args(Scope)

_BITS_PER_BYTE = 8


@dataclass(frozen=True, slots=True)
class Route:
    """The directed resources one connection occupies and the time its bits spend in flight."""

    resources: tuple[int, ...]
    latency_ns: int


def capacities_bytes_per_ns(topology: Topology) -> npt.NDArray[np.float64]:
    """Capacity of every directed resource, in bytes per ns (1 Gbit/s = 0.125 byte/ns)."""
    capacity = np.empty(2 * len(topology.links), dtype=np.float64)
    for index, link in enumerate(topology.links):
        if not link.gbps > 0:
            raise BackendError(f"link {index} ({topology.nodes[link.a].name} <-> "
                               f"{topology.nodes[link.b].name}) has capacity {link.gbps} Gbps; "
                               "the fluid model needs every link faster than 0")
        capacity[2 * index: 2 * index + 2] = link.gbps / _BITS_PER_BYTE
    return capacity


def ecmp_key(topology: Topology, src: GpuId, dst: GpuId, tag: int) -> int:
    """The per-connection key the fabric's switches hash (one path per (src, dst, tag))."""
    return ((src * topology.num_gpus + dst) << 32) | (tag & 0xFFFFFFFF)


def route(topology: Topology, scope: Scope, src: GpuId, dst: GpuId, tag: int,
          down: frozenset[int] = frozenset()) -> Route:
    """The route of connection ``(src, dst, tag)`` avoiding the failed links ``down``; raises
    ``BackendError`` if out of scope."""
    for name, gpu in (("src", src), ("dst", dst)):
        if not 0 <= gpu < topology.num_gpus:
            raise BackendError(f"{name} GPU {gpu} does not exist; topology {topology.name!r} "
                               f"has GPUs 0..{topology.num_gpus - 1}")
    if src == dst:
        raise BackendError(f"flow from GPU {src} to itself: a local copy is not network "
                           "traffic; leave it out of the flow DAG")
    same_host = topology.same_host(src, dst)
    if (scope == "intra" and not same_host) or (scope == "inter" and same_host):
        where = "same-host" if same_host else "cross-host"
        raise BackendError(f"{where} flow GPU {src} -> GPU {dst} given to a fluid backend of "
                           f"scope {scope!r}; route it to the other backend (CompositeBackend "
                           "does this) or use scope 'all'")
    if same_host:
        links = [topology.nvlink_of(src), topology.nvlink_of(dst)]
    else:
        try:
            links = topology.fabric_path(src, dst, ecmp_key(topology, src, dst, tag), down)
        except ValueError as error:
            raise BackendError(str(error)) from error
    return Route(_directed(topology, src, links), sum(topology.links[i].latency_ns for i in links))


def _directed(topology: Topology, src: GpuId, links: list[int]) -> tuple[int, ...]:
    """Resources of a path of links walked from GPU ``src``: the direction each link is crossed."""
    node = topology.gpu_nodes[src]
    resources = []
    for index in links:
        link = topology.links[index]
        forward = link.a == node
        resources.append(2 * index + (0 if forward else 1))
        node = link.b if forward else link.a
    return tuple(resources)
