"""A resolved scenario -> what its workload runs on (:func:`assemble`): the cluster graph, the
GPU, the collective model's config and the network backends, and where each rank runs.

All sizing decisions (spine count, fat-tree k, hosts per leaf) were made when the scenario
was resolved; :func:`build_topology` only maps them onto the builders in
:mod:`phantora.cluster.topology`, with ``nic_degrade`` faults' NICs at their rate.
:func:`link_failures` checks ``link_down`` faults against the built topology (the one place
that knows its link names) and turns them into the backends' :class:`LinkFailure` records.
NVLink traffic inside hosts is always simulated by the fluid model (fast, and NVLink has no
congestion control to model); the fabric between hosts by ns-3 (packet level, default) or by
the same fluid model (``cluster.network.backend: flow``).
"""

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from hwmodel.catalogue import GpuSpec, lookup_gpu
from phantora.cluster.topology import (
    HostSpec,
    LinkKind,
    Topology,
    fat_tree,
    leaf_spine,
    rail_optimized,
    single_host,
)
from phantora.collectives import NcclConfig, SystemInfo
from phantora.network.base import LinkFailure, NetworkBackend
from phantora.network.composite import CompositeBackend
from phantora.network.flow import FluidBackend
from phantora.network.mirror import rail_mirrored
from phantora.scenario.messages import Problem, did_you_mean, scenario_error
from phantora.scenario.model import (
    ClusterConfig,
    FatTreeFabric,
    Fault,
    LeafSpineFabric,
    LinkDownFault,
    NcclOverrides,
    NetworkConfig,
    NicDegradeFault,
    Scenario,
    ScriptWorkload,
)

NVLINK_LATENCY_NS = 300
"""GPU ↔ NVSwitch, one way. NCCL's tuning model charges 0.6 µs of NVLink hardware latency
per GPU-to-GPU hop for its lowest-latency protocol, LL (``hwLat[NVLINK][RING][LL]``,
NVIDIA/nccl ``src/graph/tuning.cc``); a hop crosses two of our links, so 300 ns each.
NB: ASTRA-sim's validated HGX-H100 file uses 936.25 ns per link, but that figure is fitted
with no separate protocol latency, which our collective model adds on its own."""


@dataclass(frozen=True)
class Assembly:
    """What a scenario's workload runs on; a backend per run (:meth:`new_backend`)."""

    topology: Topology
    gpu: GpuSpec
    system: SystemInfo
    """The hardware facts the collective model reads off ``topology``."""
    nccl: NcclConfig
    failures: tuple[LinkFailure, ...]
    """The ``link_down`` faults, as every backend made takes them."""
    network: NetworkConfig | None
    """The fabric's settings; ``None`` for a single host."""
    seed: int
    """The scenario's seed (the ns-3 backend's random streams derive from it)."""

    def new_backend(self) -> NetworkBackend:
        """A fresh network backend (a live run that starts again runs on another)."""
        return make_backend(self.topology, self.network, self.seed, self.failures)


def assemble(scenario: Scenario) -> Assembly:
    """Build what ``scenario`` runs on; a :class:`ScenarioError` for ``link_down`` faults that
    do not fit the topology (:func:`link_failures`)."""
    topology = build_topology(scenario.cluster, scenario.faults)
    failures = link_failures(scenario, topology)
    gpu = lookup_gpu(scenario.cluster.gpu)
    return Assembly(topology=topology, gpu=gpu, system=SystemInfo.from_topology(topology, gpu),
                    nccl=nccl_config(scenario.nccl), failures=failures,
                    network=scenario.cluster.network, seed=scenario.seed)


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


def link_failures(scenario: Scenario, topology: Topology) -> tuple[LinkFailure, ...]:
    """The scenario's ``link_down`` faults as the backends take them. A name that is no
    switch-to-switch link of ``topology`` (NIC and NVLink links cut GPUs off), a link named
    twice, or failures that together cut hosts apart are a :class:`ScenarioError` naming
    ``faults[i].link`` and, for a bad name, the links that may fail."""
    problems: list[Problem] = []
    failures: dict[int, LinkFailure] = {}
    """Fault index -> its failure."""
    fabric = [i for i, link in enumerate(topology.links) if link.kind is LinkKind.FABRIC]
    names = [topology.link_name(i) for i in fabric]
    for index, fault in enumerate(scenario.faults):
        if not isinstance(fault, LinkDownFault):
            continue
        path, link = f"faults[{index}].link", topology.link_named(fault.link)
        if link is None or topology.links[link].kind is not LinkKind.FABRIC:
            what = ("names no link of the topology" if link is None else
                    f"is a {topology.links[link].kind.value} link, which cuts its GPU off")
            problems.append((path, f'got "{fault.link}", which {what}; '
                                   + _fabric_links_hint(fault.link, names, topology)))
            continue
        twice = [i for i, failure in failures.items() if failure.link == link]
        if twice:
            problems.append((path, f"{fault.link} already goes down in faults[{twice[0]}] and "
                                   "stays down; list each link once"))
            continue
        failures[index] = LinkFailure(link, fault.at_ns)
    down: set[int] = set()
    for index, failure in sorted(failures.items(), key=lambda item: item[1].at_ns):
        down.add(failure.link)
        partition = topology.partition_by(down)
        if partition is not None:
            problems.append((f"faults[{index}].link",
                             f"{partition}; a link_down must leave a path between every two "
                             "hosts: take down another link, or add spines"))
            break
    if problems:
        raise scenario_error(scenario.source, problems)
    return tuple(failures.values())


_LISTED_LINKS = 24
"""Link names listed in a message before the rest are counted."""


def _fabric_links_hint(name: str, names: list[str], topology: Topology) -> str:
    """Which links may fail: all (or the first) switch-to-switch links, and the likely one."""
    if not names:
        return (f"the {topology.name} fabric has no switch-to-switch links (no spine layer), "
                "so any link down cuts GPUs off; remove this fault")
    listed = ", ".join(names[:_LISTED_LINKS])
    if len(names) > _LISTED_LINKS:
        listed += f", ... ({len(names)} in all)"
    guess = did_you_mean(name, names)
    return (f"expected a switch-to-switch link: {listed}"
            + (f'; did you mean "{guess}"?' if guess else ""))


def make_backend(topology: Topology, network: NetworkConfig | None, seed: int,
                 failures: Sequence[LinkFailure] = ()) -> NetworkBackend:
    """The composite backend for ``topology``; ``network`` is ``None`` for a single host.
    ``failures`` (fabric links, :func:`link_failures`) go to the fabric's backend."""
    intra = FluidBackend(topology, scope="intra")
    if network is None:
        return CompositeBackend(topology, intra, None)
    if network.backend == "flow":
        return CompositeBackend(topology, intra,
                                FluidBackend(topology, scope="inter", failures=failures))
    from phantora.network.ns3 import Ns3Backend, Ns3Config  # ns-3 loads only when used

    config = Ns3Config(mtu_bytes=network.mtu_bytes,
                       switch_buffer_bytes=network.switch_buffer_bytes,
                       ecn_threshold_bytes=network.ecn_threshold_bytes,
                       transport=network.transport, roce=network.roce, seed=seed + 1)
    return CompositeBackend(topology, intra, rail_mirrored(
        topology, lambda: Ns3Backend(topology, config, failures=failures), network.symmetry))


def nccl_config(overrides: NcclOverrides) -> NcclConfig:
    """The scenario's ``nccl`` section as the collective model's config."""
    return NcclConfig.make(
        algorithms=None if overrides.algorithm == "auto" else overrides.algorithm,
        protocols=None if overrides.protocol == "auto" else overrides.protocol,
        min_channels=overrides.channels, max_channels=overrides.channels,
        nvls=overrides.nvls)


def gpus_of_ranks(workload: ScriptWorkload, gpus_per_host: int) -> list[int]:
    """Rank ``r`` drives local GPU ``r % nproc_per_node`` of host ``r // nproc_per_node``."""
    return [(rank // workload.nproc_per_node) * gpus_per_host + rank % workload.nproc_per_node
            for rank in range(workload.world_size)]
