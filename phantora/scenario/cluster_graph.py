"""The cluster graph a resolved cluster describes (:func:`build_topology`).

Every sizing decision (spine count, fat-tree k, hosts per leaf) is made when the scenario is
resolved; this maps them onto the builders of :mod:`phantora.cluster.topology`, with
``nic_degrade`` faults' NICs at their rate. The resolver builds it to check ``link_down``
faults' link names; a run builds it to simulate on.
"""

from collections.abc import Collection, Sequence
from dataclasses import replace

from hwmodel.catalogue import lookup_gpu
from phantora.cluster.topology import (
    HostSpec,
    Topology,
    fat_tree,
    leaf_spine,
    rail_optimized,
    single_host,
)
from phantora.scenario.model import (
    ClusterConfig,
    FatTreeFabric,
    Fault,
    LeafSpineFabric,
    NicDegradeFault,
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


def build_topology(cluster: ClusterConfig, faults: Sequence[Fault] = ()) -> Topology:
    """The cluster graph: one host alone, or hosts joined by the configured fabric; the NICs
    of ``nic_degrade`` faults' hosts at their degraded rate."""
    host = host_spec(cluster)
    network = cluster.network
    if network is None:
        return single_host(host)
    fabric = network.topology
    if isinstance(fabric, FatTreeFabric):
        topology = fat_tree(host, cluster.hosts, fabric.k, network.link_gbps,
                            network.link_latency_ns)
    elif isinstance(fabric, LeafSpineFabric):
        topology = leaf_spine(host, cluster.hosts, fabric.hosts_per_leaf, fabric.spines,
                              network.link_gbps, network.link_latency_ns)
    else:
        topology = rail_optimized(host, cluster.hosts, fabric.spines, network.link_gbps,
                                  network.link_latency_ns)
    for fault in faults:
        if isinstance(fault, NicDegradeFault):
            for link in nics_of_hosts(topology, fault.hosts):
                topology.links[link] = replace(topology.links[link], gbps=fault.nic_gbps_after)
    return topology


def nics_of_hosts(topology: Topology, hosts: Collection[int]) -> list[int]:
    """The NIC links of every GPU of ``hosts``."""
    return [topology.nic_of(gpu) for gpu in range(topology.num_gpus)
            if topology.host_of(gpu) in hosts]
