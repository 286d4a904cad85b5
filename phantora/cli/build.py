"""A resolved scenario → what a run simulates: the cluster graph, the network backend and
the collective model's config.

All sizing decisions (spine count, fat-tree k, hosts per leaf) were made when the scenario
was resolved; :func:`build_topology` only maps them onto the builders in
:mod:`phantora.cluster.topology`. NVLink traffic inside hosts is always simulated by the fluid
model (fast, and NVLink has no congestion control to model); the fabric between hosts by ns-3
(packet level, default) or by the same fluid model (``cluster.network.backend: flow``).
"""

from phantora.cluster.catalogue import lookup_gpu
from phantora.cluster.topology import (
    HostSpec,
    Topology,
    fat_tree,
    leaf_spine,
    rail_optimized,
    single_host,
)
from phantora.collectives import NcclConfig
from phantora.network.base import NetworkBackend
from phantora.network.composite import CompositeBackend
from phantora.network.flow import FluidBackend
from phantora.scenario.model import (
    ClusterConfig,
    FatTreeFabric,
    LeafSpineFabric,
    NcclOverrides,
    NetworkConfig,
)

NVLINK_LATENCY_NS = 300
"""GPU ↔ NVSwitch, one way. NCCL's tuning model charges 0.6 µs of NVLink hardware latency
per GPU-to-GPU hop for its lowest-latency protocol, LL (``hwLat[NVLINK][RING][LL]``,
NVIDIA/nccl ``src/graph/tuning.cc``); a hop crosses two of our links, so 300 ns each.
NB: ASTRA-sim's validated HGX-H100 file uses 936.25 ns per link, but that figure is fitted
with no separate protocol latency, which our collective model adds on its own."""


def host_spec(cluster: ClusterConfig) -> HostSpec:
    """What every host looks like; the NIC rate is the catalogue's when there is no fabric."""
    nic_gbps = (cluster.network.nic_gbps if cluster.network is not None
                else lookup_gpu(cluster.gpu).default_nic_gbps)
    return HostSpec(gpus_per_host=cluster.gpus_per_host, nvlink_gbps=cluster.nvlink_gbps,
                    nvlink_latency_ns=NVLINK_LATENCY_NS, nic_gbps=nic_gbps)


def build_topology(cluster: ClusterConfig) -> Topology:
    """The cluster graph: one host alone, or hosts joined by the configured fabric."""
    host = host_spec(cluster)
    network = cluster.network
    if network is None:
        return single_host(host)
    fabric = network.topology
    if isinstance(fabric, FatTreeFabric):
        return fat_tree(host, cluster.hosts, fabric.k, network.link_gbps, network.link_latency_ns)
    if isinstance(fabric, LeafSpineFabric):
        return leaf_spine(host, cluster.hosts, fabric.hosts_per_leaf, fabric.spines,
                          network.link_gbps, network.link_latency_ns)
    return rail_optimized(host, cluster.hosts, fabric.spines, network.link_gbps,
                          network.link_latency_ns)


def make_backend(topology: Topology, network: NetworkConfig | None, seed: int) -> NetworkBackend:
    """The composite backend for ``topology``; ``network`` is ``None`` for a single host."""
    intra = FluidBackend(topology, scope="intra")
    if network is None:
        return CompositeBackend(topology, intra, None)
    if network.backend == "flow":
        return CompositeBackend(topology, intra, FluidBackend(topology, scope="inter"))
    from phantora.network.ns3 import Ns3Backend, Ns3Config  # ns-3 loads only when used

    config = Ns3Config(mtu_bytes=network.mtu_bytes,
                       switch_buffer_bytes=network.switch_buffer_bytes,
                       ecn_threshold_bytes=network.ecn_threshold_bytes,
                       transport=network.transport, roce=network.roce, seed=seed + 1)
    return CompositeBackend(topology, intra, Ns3Backend(topology, config))


def nccl_config(overrides: NcclOverrides) -> NcclConfig:
    """The scenario's ``nccl`` section as the collective model's config."""
    return NcclConfig.make(
        algorithms=None if overrides.algorithm == "auto" else overrides.algorithm,
        protocols=None if overrides.protocol == "auto" else overrides.protocol,
        min_channels=overrides.channels, max_channels=overrides.channels,
        nvls=overrides.nvls)
