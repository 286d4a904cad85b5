"""The resolved scenario: every default filled in, every quantity in base units.

This is what the rest of phantora reads. Field names carry their unit (``*_gbps`` Gbit/s,
``*_ns`` nanoseconds, ``*_bytes`` bytes); nothing here is optional unless it is truly absent
(``cluster.network`` on a single host, ``nccl.channels`` left to the NCCL model).
:meth:`Scenario.echo` is the ``scenario`` section of ``summary.json``.
"""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from phantora.network.roce_presets import RoceSettings

TopologyName = Literal["rail-optimized", "leaf-spine", "fat-tree"]
Transport = Literal["dctcp", "roce"]
BackendName = Literal["ns3", "flow"]
Symmetry = Literal["auto", "approximate", "off"]
Algorithm = Literal["auto", "ring", "tree", "nvls"]
Protocol = Literal["auto", "simple", "ll", "ll128"]
CollectiveOp = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                       "all_to_all"]
FaultKind = Literal["slow_gpu", "nic_degrade", "link_down"]
Dtype = Literal["int8", "uint8", "fp8", "fp16", "bf16", "fp32", "int32", "uint32", "fp64",
                "int64", "uint64"]

DTYPE_BYTES: dict[Dtype, int] = {
    "int8": 1, "uint8": 1, "fp8": 1, "fp16": 2, "bf16": 2, "fp32": 4, "int32": 4, "uint32": 4,
    "fp64": 8, "int64": 8, "uint64": 8,
}
"""Element size of each ``workload.collectives.dtype`` (fp8 covers e4m3 and e5m2)."""


class _Resolved(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class RailOptimizedFabric(_Resolved):
    """One rail switch per local GPU index; spines join the rails."""

    kind: Literal["rail-optimized"] = "rail-optimized"
    spines: int
    """Spine switches; 0 when there is one rail (one GPU per host), so no spine layer."""
    oversubscription: float
    """Rail-switch downlink : uplink bandwidth as built (1.0 without a spine layer)."""


class LeafSpineFabric(_Resolved):
    """Two-tier Clos: each host's NICs on its leaf, every leaf to every spine."""

    kind: Literal["leaf-spine"] = "leaf-spine"
    hosts_per_leaf: int
    leaves: int
    spines: int
    """Spine switches; 0 when every host fits on one leaf, so no spine layer."""
    oversubscription: float
    """Leaf downlink : uplink bandwidth of a full leaf as built (1.0 without a spine layer)."""


class FatTreeFabric(_Resolved):
    """Three-tier k-ary fat-tree (non-blocking by construction)."""

    kind: Literal["fat-tree"] = "fat-tree"
    k: int
    """Switch radix: k pods, k^3/4 NIC ports in all."""


Fabric = Annotated[RailOptimizedFabric | LeafSpineFabric | FatTreeFabric,
                   Field(discriminator="kind")]


class NetworkConfig(_Resolved):
    """The fabric between hosts and how the packet-level backend runs it."""

    topology: Fabric
    nic_gbps: float
    """Per-GPU NIC rate, each direction."""
    link_gbps: float
    """Switch-to-switch link rate, each direction."""
    link_latency_ns: int
    """Per link, propagation plus switch traversal; NIC links included."""
    mtu_bytes: int
    switch_buffer_bytes: int
    """dctcp: egress queue capacity per switch port."""
    ecn_threshold_bytes: int
    """dctcp: queue length above which switches mark ECN CE (DCTCP's K)."""
    transport: Transport
    roce: RoceSettings | None
    """PFC, ECN and DCQCN settings; ``None`` unless ``transport`` is roce."""
    backend: BackendName
    symmetry: Symmetry
    """Rail mirroring of the ns3 backend (``phantora.network.mirror``)."""


class ClusterConfig(_Resolved):
    """The hardware: identical hosts of ``gpus_per_host`` GPUs, plus the fabric between them."""

    gpu: str
    """Catalogue key (lower case), see :func:`hwmodel.catalogue.lookup_gpu`."""
    hosts: int
    gpus_per_host: int
    nvlink_gbps: float
    """NVLink rate per GPU and direction."""
    cpus_per_host: int = 224
    """Logical CPUs of each host, as the script sees them (``os.cpu_count()``)."""
    network: NetworkConfig | None
    """``None`` on a single host, whose GPUs only talk over NVLink."""
    calibration: str | None = None
    """Absolute path of the kernel calibration file kernel times come from
    (``hwmodel.compute.calibrated``); ``None``: the packaged measured tables."""
    host: str = "h100-host"
    """Host profile: a bundled one's name, or the absolute path of a profile file
    (``hwmodel.measured.host_profile``)."""
    host_speed: float = 1.0
    """The simulated host runs this many times as fast as its profile."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def num_gpus(self) -> int:
        """Every GPU in the cluster: ``hosts * gpus_per_host``."""
        return self.hosts * self.gpus_per_host


class NcclOverrides(_Resolved):
    """Overrides of the NCCL model's choices, like ``NCCL_ALGO`` / ``NCCL_PROTO`` env vars."""

    algorithm: Algorithm
    protocol: Protocol
    channels: int | None
    """``None``: chosen per collective, as NCCL does."""
    nvls: bool
    """NVLink SHARP (in-switch reduction) allowed."""


class CollectivesWorkload(_Resolved):
    """An nccl-tests style sweep: every op at every size on one communicator."""

    kind: Literal["collectives"] = "collectives"
    ops: tuple[CollectiveOp, ...]
    sizes_bytes: tuple[int, ...]
    """Total bytes per collective, nccl-tests convention (all ranks' data for all_gather etc.)."""
    dtype: Dtype
    dtype_bytes: int
    ranks: tuple[int, ...]
    """Global GPU indices of the communicator, in rank order."""


class ScriptWorkload(_Resolved):
    """A live training program (a script or a module), one process per rank, launched like
    torchrun."""

    kind: Literal["script"] = "script"
    script: str | None
    """Absolute path of the script; ``None`` when a module runs."""
    module: str | None = None
    """The module run as ``-m``, instead of a script."""
    workdir: str | None = None
    """Absolute path of the folder the ranks run in; ``None``: the current one."""
    args: tuple[str, ...]
    nproc_per_node: int
    """Ranks per host; rank ``r`` runs on host ``r // nproc_per_node``, local GPU
    ``r % nproc_per_node``."""
    world_size: int
    """Ranks in all: ``cluster.hosts x nproc_per_node``."""
    env: dict[str, str]


class SimulationConfig(_Resolved):
    """How live scripts are timed."""

    reproducible: bool
    cpu_time_per_op_ns: int
    """Only used when ``reproducible``."""
    host_time: str
    """``counted | measured``: how the script's own Python is timed (``intercept.host_time.python_work``
    or its CPU time); only used when not ``reproducible``."""
    host_cpu: str
    """Reference host (``hwmodel/measured/data/host_speed.json``) whose costs the host
    time is charged at and whose CPU speed measured time is scaled to, or ``"native"``; only
    used when not ``reproducible``."""
    overlap_slowdown: bool
    """Whether collectives in flight slow the kernels running beside them."""
    routing: str
    """The value model's routing (``launch.value_policy.Routing.parse``; a trace's path
    made absolute)."""
    unknown_shapes: str
    """``error | half``: what a data-dependent shape of unknown values does."""
    cpus: int
    """How many of this machine's CPUs the coordinator and the ranks run on."""
    dedup: str
    """``auto | off``: whether data-parallel replicas are mirrored (``phantora.engine.rank_classes``)."""


Workload = Annotated[CollectivesWorkload | ScriptWorkload, Field(discriminator="kind")]


class SlowGpuFault(_Resolved):
    """A straggler: these ranks' kernels take ``factor`` times as long (the live engine scales
    each kernel's duration as it arrives)."""

    kind: Literal["slow_gpu"] = "slow_gpu"
    ranks: tuple[int, ...]
    factor: float


class NicDegradeFault(_Resolved):
    """Every NIC of these hosts runs at ``factor`` x its rate (the topology is built so)."""

    kind: Literal["nic_degrade"] = "nic_degrade"
    hosts: tuple[int, ...]
    factor: float
    nic_gbps_before: float
    nic_gbps_after: float
    """``nic_gbps_before x factor``, each direction."""


class LinkDownFault(_Resolved):
    """A fabric link, named by its two ends (``Topology.link_name``), fails at ``at_ns`` and
    stays down; the name is checked against the cluster graph (``phantora.scenario.faults``)."""

    kind: Literal["link_down"] = "link_down"
    link: str
    at_ns: int
    """Virtual time from the run's start."""


Fault = Annotated[SlowGpuFault | NicDegradeFault | LinkDownFault, Field(discriminator="kind")]


class Scenario(_Resolved):
    """A validated scenario with every default resolved."""

    name: str
    seed: int
    source: str
    """Where the scenario came from (file path as given, or a caller-chosen label)."""
    cluster: ClusterConfig
    nccl: NcclOverrides
    workload: Workload
    simulation: SimulationConfig
    faults: tuple[Fault, ...] = ()
    """In the order the file lists them (``faults[i]`` in messages)."""

    def kernel_scale(self) -> dict[int, float]:
        """Rank -> kernel time factor, for every rank a ``slow_gpu`` fault names."""
        return {rank: fault.factor for fault in self.faults
                if isinstance(fault, SlowGpuFault) for rank in fault.ranks}

    def echo(self) -> dict[str, Any]:
        """The resolved scenario as plain JSON types, for ``summary.json``."""
        return self.model_dump(mode="json")
