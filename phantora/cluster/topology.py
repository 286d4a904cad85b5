"""Cluster topology as a plain graph, shared by every network backend.

Nodes are GPUs (the endpoints), one NVSwitch per host, and fabric switches. Links are
full duplex; ``gbps`` is the capacity of each direction. A GPU has two kinds of links: NVLink
to its host's NVSwitch (intra-host traffic) and its NIC to the fabric (inter-host traffic).
Intra-host flows never enter the fabric and inter-host flows never cross an NVSwitch, so the
backends may simulate the two parts with different models.

Builders (one per ``cluster.network.topology`` value) only create the graph; transport,
MTU and buffers belong to the backends' own configuration.
"""

from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import Enum
from math import ceil


class NodeKind(str, Enum):
    GPU = "gpu"
    NVSWITCH = "nvswitch"
    LEAF = "leaf"
    SPINE = "spine"
    CORE = "core"
    AGG = "agg"
    RAIL = "rail"


class LinkKind(str, Enum):
    NVLINK = "nvlink"
    NIC = "nic"
    FABRIC = "fabric"


@dataclass(frozen=True, slots=True)
class Link:
    """A full-duplex link between nodes ``a`` and ``b`` (indices into ``Topology.nodes``)."""

    a: int
    b: int
    gbps: float
    latency_ns: int
    kind: LinkKind


@dataclass(frozen=True, slots=True)
class Node:
    kind: NodeKind
    name: str


@dataclass
class Topology:
    """A built cluster graph; GPU ``g`` is node ``gpu_nodes[g]``."""

    name: str
    hosts: int
    gpus_per_host: int
    nodes: list[Node] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    gpu_nodes: list[int] = field(default_factory=list)
    _adjacent: list[list[tuple[int, int]]] = field(default_factory=list, repr=False)
    _fabric_distance: dict[int, list[int]] = field(default_factory=dict, repr=False)
    _fabric_distance_down: dict[frozenset[int], dict[int, list[int]]] = field(
        default_factory=dict, repr=False)
    """BFS distances per set of failed links, kept apart so the healthy fabric's lookups
    stay one dict access."""

    # -- construction ---------------------------------------------------------------------
    def add_node(self, kind: NodeKind, name: str) -> int:
        self.nodes.append(Node(kind, name))
        self._adjacent.append([])
        return len(self.nodes) - 1

    def add_link(self, a: int, b: int, gbps: float, latency_ns: int, kind: LinkKind) -> int:
        self.links.append(Link(a, b, gbps, latency_ns, kind))
        index = len(self.links) - 1
        self._adjacent[a].append((index, b))
        self._adjacent[b].append((index, a))
        return index

    # -- queries --------------------------------------------------------------------------
    @property
    def num_gpus(self) -> int:
        return len(self.gpu_nodes)

    def host_of(self, gpu: int) -> int:
        return gpu // self.gpus_per_host

    def same_host(self, src: int, dst: int) -> bool:
        return self.host_of(src) == self.host_of(dst)

    def nvlink_of(self, gpu: int) -> int:
        """Index of the GPU's NVLink (to its NVSwitch)."""
        return self._link_of_kind(gpu, LinkKind.NVLINK)

    def nic_of(self, gpu: int) -> int:
        """Index of the GPU's NIC link (to the fabric); only when there is more than one host."""
        return self._link_of_kind(gpu, LinkKind.NIC)

    def _link_of_kind(self, gpu: int, kind: LinkKind) -> int:
        for index, _ in self._adjacent[self.gpu_nodes[gpu]]:
            if self.links[index].kind is kind:
                return index
        raise KeyError(f"GPU {gpu} has no {kind.value} link in topology {self.name!r}")

    def link_name(self, index: int) -> str:
        """The name a scenario uses for link ``index``: its two nodes, ``leaf0-spine1``."""
        link = self.links[index]
        return f"{self.nodes[link.a].name}-{self.nodes[link.b].name}"

    def link_named(self, name: str) -> int | None:
        """The index of the link called ``name`` (its nodes in either order), or ``None``."""
        for index, link in enumerate(self.links):
            a, b = self.nodes[link.a].name, self.nodes[link.b].name
            if name in (f"{a}-{b}", f"{b}-{a}"):
                return index
        return None

    def fastest_nic_gbps(self) -> float:
        """The fastest NIC's rate: the hosts' NIC rate (``HostSpec.nic_gbps``) unless a
        ``nic_degrade`` fault slowed every host's or sped one up; 0 without a fabric. RoCE
        queue pairs start at it, TCP windows are sized by it."""
        return max(self._nic_rates_gbps(), default=0.0)

    def slowest_nic_gbps(self) -> float:
        """The slowest NIC's rate, what NCCL's ranks agree on (the minimum of their graphs'
        bandwidths); 0 without a fabric."""
        return min(self._nic_rates_gbps(), default=0.0)

    def _nic_rates_gbps(self) -> list[float]:
        return [link.gbps for link in self.links if link.kind is LinkKind.NIC]

    def fabric_links(self) -> list[int]:
        """Indices of the links that make up the inter-host fabric (NICs included)."""
        return [i for i, link in enumerate(self.links) if link.kind is not LinkKind.NVLINK]

    def fabric_next_hops(self, node: int, dst_node: int,
                         down: frozenset[int] = frozenset()) -> list[tuple[int, int]]:
        """Equal-cost next hops ``(link, next_node)`` from ``node`` towards ``dst_node``.

        Shortest paths over the fabric only (NVSwitches excluded), as ECMP routing sees them;
        links in ``down`` have failed: routing recomputes the shortest paths without them.
        """
        return self._next_hops(node, self._distance_to(dst_node, down), down)

    def _distance_to(self, dst_node: int, down: frozenset[int]) -> list[int]:
        """Fabric hops from every node to ``dst_node`` without the links in ``down`` (cached)."""
        cache = self._fabric_distance_down.setdefault(down, {}) if down else self._fabric_distance
        distance = cache.get(dst_node)
        if distance is None:
            distance = cache[dst_node] = self._bfs_fabric(dst_node, down)
        return distance

    def _next_hops(self, node: int, distance: list[int],
                   down: frozenset[int]) -> list[tuple[int, int]]:
        here = distance[node]
        hops = [(link, nxt) for link, nxt in self._adjacent[node]
                if self.links[link].kind is not LinkKind.NVLINK and distance[nxt] == here - 1]
        return [hop for hop in hops if hop[0] not in down] if down else hops

    def _bfs_fabric(self, source: int, down: frozenset[int] = frozenset()) -> list[int]:
        unreachable = len(self.nodes) + 1
        distance = [unreachable] * len(self.nodes)
        distance[source] = 0
        queue = deque([source])
        while queue:
            node = queue.popleft()
            for link, nxt in self._adjacent[node]:
                if (self.links[link].kind is LinkKind.NVLINK or distance[nxt] != unreachable
                        or link in down):
                    continue
                # GPUs are endpoints: never route through one.
                if self.nodes[nxt].kind is NodeKind.GPU and nxt != source:
                    distance[nxt] = distance[node] + 1
                    continue
                distance[nxt] = distance[node] + 1
                queue.append(nxt)
        return distance

    def fabric_path(self, src_gpu: int, dst_gpu: int, flow_key: int,
                    down: frozenset[int] = frozenset()) -> list[int]:
        """Link indices of the ECMP path a flow takes; each switch hashes ``flow_key``.

        Per-flow hashing (never per packet), like the ns-3 backend's hash ECMP, though the
        two hash functions differ, so the same flow may pick different equal-cost paths.
        ``down``: failed links, which the path avoids (see :meth:`partition_by`).
        """
        node, dst = self.gpu_nodes[src_gpu], self.gpu_nodes[dst_gpu]
        distance = self._distance_to(dst, down)
        path: list[int] = []
        while node != dst:
            hops = self._next_hops(node, distance, down)
            if not hops:
                raise ValueError(f"no fabric route from GPU {src_gpu} to GPU {dst_gpu}")
            link, node = hops[_mix(flow_key, node) % len(hops)] if len(hops) > 1 else hops[0]
            path.append(link)
        return path

    def partition_by(self, links: Collection[int]) -> str | None:
        """Why failing ``links`` together cuts some GPU off a GPU of another host, or ``None``.

        Reachability over the fabric with GPUs never transit, as routing sees it. A NIC link
        always cuts its GPU off; an NVLink is no fabric link (the fabric cannot route around
        it), so failing one counts as a partition too.
        """
        down = frozenset(links)
        names = ", ".join(self.link_name(i) for i in sorted(down))
        nvlinks = [i for i in sorted(down) if self.links[i].kind is LinkKind.NVLINK]
        if nvlinks:
            return (f"link(s) {names} down: {', '.join(map(self.link_name, nvlinks))} is an "
                    "NVLink, not a fabric link; only fabric and NIC links can fail")
        if self.hosts < 2 or not down:
            return None
        component = [-1] * len(self.nodes)
        for gpu_node in self.gpu_nodes:
            if component[gpu_node] < 0:
                for node, distance in enumerate(self._bfs_fabric(gpu_node, down)):
                    if distance <= len(self.nodes):
                        component[node] = gpu_node
        groups: dict[int, list[int]] = {}
        for gpu_node in self.gpu_nodes:
            groups.setdefault(component[gpu_node], []).append(gpu_node)
        if len(groups) == 1:
            return None
        largest = max(groups.values(), key=len)
        cut = [self.nodes[node].name for group in groups.values() if group is not largest
               for node in group]
        return (f"link(s) {names} down cut GPU(s) {', '.join(cut)} off the rest of the fabric "
                "(some GPUs on different hosts can no longer reach each other)")


def _mix(key: int, salt: int) -> int:
    """A small deterministic integer hash (splitmix64 finaliser)."""
    x = (key * 0x9E3779B97F4A7C15 + salt * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 31
    x = (x * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 29)


# -- builders -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class HostSpec:
    """What every host looks like: GPUs, NVLink per GPU and direction, NIC per GPU."""

    gpus_per_host: int
    nvlink_gbps: float
    nvlink_latency_ns: int
    nic_gbps: float


def _add_hosts(topo: Topology, host: HostSpec) -> None:
    for h in range(topo.hosts):
        nvswitch = topo.add_node(NodeKind.NVSWITCH, f"host{h}/nvswitch")
        for local in range(host.gpus_per_host):
            gpu = topo.add_node(NodeKind.GPU, f"host{h}/gpu{local}")
            topo.gpu_nodes.append(gpu)
            topo.add_link(gpu, nvswitch, host.nvlink_gbps, host.nvlink_latency_ns, LinkKind.NVLINK)


def single_host(host: HostSpec) -> Topology:
    """One server: GPUs on an NVSwitch, no fabric."""
    topo = Topology("single-host", 1, host.gpus_per_host)
    _add_hosts(topo, host)
    return topo


def uplinks_for(down_gbps: float, oversubscription: float, uplink_gbps: float) -> int:
    """How many uplinks of ``uplink_gbps`` carry ``down_gbps / oversubscription``."""
    return max(1, ceil(down_gbps / oversubscription / uplink_gbps - 1e-9))


def leaf_spine(host: HostSpec, hosts: int, hosts_per_leaf: int, spines: int,
               link_gbps: float, latency_ns: int) -> Topology:
    """Two-tier Clos: every GPU NIC of a host on the host's leaf; each leaf to every spine."""
    topo = Topology("leaf-spine", hosts, host.gpus_per_host)
    _add_hosts(topo, host)
    n_leaves = ceil(hosts / hosts_per_leaf)
    leaves = [topo.add_node(NodeKind.LEAF, f"leaf{i}") for i in range(n_leaves)]
    for gpu, node in enumerate(topo.gpu_nodes):
        leaf = leaves[topo.host_of(gpu) // hosts_per_leaf]
        topo.add_link(node, leaf, host.nic_gbps, latency_ns, LinkKind.NIC)
    if n_leaves > 1:
        spine_nodes = [topo.add_node(NodeKind.SPINE, f"spine{i}") for i in range(spines)]
        for leaf in leaves:
            for spine in spine_nodes:
                topo.add_link(leaf, spine, link_gbps, latency_ns, LinkKind.FABRIC)
    return topo


def rail_optimized(host: HostSpec, hosts: int, spines: int, link_gbps: float,
                   latency_ns: int) -> Topology:
    """One rail switch per local GPU index (NIC ``i`` of every host); spines join the rails.

    Same-rail traffic (what NCCL's rings and trees produce) stays on one rail switch;
    cross-rail traffic climbs to a spine.
    """
    topo = Topology("rail-optimized", hosts, host.gpus_per_host)
    _add_hosts(topo, host)
    rails = [topo.add_node(NodeKind.RAIL, f"rail{i}") for i in range(host.gpus_per_host)]
    for gpu, node in enumerate(topo.gpu_nodes):
        topo.add_link(node, rails[gpu % host.gpus_per_host], host.nic_gbps, latency_ns, LinkKind.NIC)
    if len(rails) > 1:
        spine_nodes = [topo.add_node(NodeKind.SPINE, f"spine{i}") for i in range(spines)]
        for rail in rails:
            for spine in spine_nodes:
                topo.add_link(rail, spine, link_gbps, latency_ns, LinkKind.FABRIC)
    return topo


def fat_tree(host: HostSpec, hosts: int, k: int, link_gbps: float, latency_ns: int) -> Topology:
    """Three-tier k-ary fat-tree (k pods of k/2 edge + k/2 aggregation switches, (k/2)^2 cores).

    GPU NICs fill edge switches in order, k/2 per edge switch, so a host's GPUs are adjacent.
    """
    topo = Topology("fat-tree", hosts, host.gpus_per_host)
    _add_hosts(topo, host)
    half = k // 2
    edges, aggs = [], []
    for pod in range(k):
        pod_edges = [topo.add_node(NodeKind.LEAF, f"pod{pod}/edge{i}") for i in range(half)]
        pod_aggs = [topo.add_node(NodeKind.AGG, f"pod{pod}/agg{i}") for i in range(half)]
        for edge in pod_edges:
            for agg in pod_aggs:
                topo.add_link(edge, agg, link_gbps, latency_ns, LinkKind.FABRIC)
        edges += pod_edges
        aggs.append(pod_aggs)
    cores = [topo.add_node(NodeKind.CORE, f"core{i}") for i in range(half * half)]
    for pod_aggs in aggs:
        for i, agg in enumerate(pod_aggs):
            for j in range(half):
                topo.add_link(agg, cores[i * half + j], link_gbps, latency_ns, LinkKind.FABRIC)
    for gpu, node in enumerate(topo.gpu_nodes):
        topo.add_link(node, edges[gpu // half], host.nic_gbps, latency_ns, LinkKind.NIC)
    return topo
