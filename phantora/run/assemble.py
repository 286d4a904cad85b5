"""A resolved scenario -> what its workload runs on (:func:`assemble`): the cluster graph
(:func:`~phantora.scenario.cluster_graph.build_topology`), the GPU, the collective model's
config and the network backends, and where each rank runs. :func:`link_failures` turns the
``link_down`` faults, checked when the scenario was resolved, into the backends'
:class:`LinkFailure` records.
NVLink traffic inside hosts is always simulated by the fluid model (fast, and NVLink has no
congestion control to model); the fabric between hosts by ns-3 (packet level, default) or by
the same fluid model (``cluster.network.backend: flow``).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hwmodel.catalogue import GpuSpec, lookup_gpu
from phantora.cluster.topology import Topology
from phantora.collectives import NcclConfig, SystemInfo
from phantora.network.base import LinkFailure, NetworkBackend
from phantora.network.composite import CompositeBackend
from phantora.network.flow import FluidBackend
from phantora.network.mirror import rail_mirrored
from phantora.network.progress import Progress, ProgressBackend
from phantora.scenario.cluster_graph import build_topology
from phantora.scenario.model import (
    LinkDownFault,
    NcclOverrides,
    NetworkConfig,
    Scenario,
    ScriptWorkload,
)


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
    progress: Callable[[Progress], None] | None = None
    """Told how far the network has got every second of wall time (the console's status)."""

    def new_backend(self) -> NetworkBackend:
        """A fresh network backend (a live run that starts again runs on another)."""
        backend = make_backend(self.topology, self.network, self.seed, self.failures)
        return backend if self.progress is None else ProgressBackend(backend, self.progress)


def assemble(scenario: Scenario) -> Assembly:
    """Build what ``scenario`` runs on."""
    topology = build_topology(scenario.cluster, scenario.faults)
    failures = link_failures(scenario, topology)
    gpu = lookup_gpu(scenario.cluster.gpu)
    return Assembly(topology=topology, gpu=gpu, system=SystemInfo.from_topology(topology, gpu),
                    nccl=nccl_config(scenario.nccl), failures=failures,
                    network=scenario.cluster.network, seed=scenario.seed)


def link_failures(scenario: Scenario, topology: Topology) -> tuple[LinkFailure, ...]:
    """The scenario's ``link_down`` faults as the backends take them (their links were checked
    against the cluster graph when the scenario was resolved)."""
    return tuple(LinkFailure(topology.link_named(fault.link),  # type: ignore[arg-type]
                             fault.at_ns)
                 for fault in scenario.faults if isinstance(fault, LinkDownFault))


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
