"""What users write in ``scenario.yaml``: every key declared once, checked on the way in.

These models mirror the file (same key names, same nesting) and reject unknown keys. Each
field declares its key (:mod:`phantora.scenario.keys`): its unit in its type
(:mod:`phantora.scenario.quantities`: rates to Gbit/s, sizes to bytes, durations to ns), its
default as a user would write it (checked like a written value) or :class:`Derived` where
other keys decide it (:mod:`phantora.scenario.resolve` computes those and runs the checks that
involve several keys), its doc in the docstring under it, and its check in its type. The key
reference in ``docs/scenarios.md`` is generated from these declarations. Integers, booleans and
lists are strict (``hosts: "2"`` or ``nvls: 1`` is an error), so a quoting slip never turns
into a silently different value.
"""

from typing import Annotated, Literal, get_args

from annotated_types import MinLen
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from hwmodel.catalogue import CATALOGUE
from hwmodel.measured.host_references import host_cpu_choices
from launch.value_policy import Routing
from phantora.cpu_affinity import usable_cpus
from phantora.network.roce_presets import AckPriority, CongestionControl, PresetName
from phantora.scenario.keys import Accepts, Derived
from phantora.scenario.messages import expected_one_of
from phantora.scenario.model import (
    Algorithm,
    BackendName,
    CollectiveOp,
    Dtype,
    FaultKind,
    Protocol,
    Symmetry,
    TopologyName,
    Transport,
)
from phantora.scenario.quantities import (
    BYTES,
    WHOLE_BYTES,
    Bytes,
    CollectiveBytes,
    Duration,
    Instant,
    QueueBytes,
    Rate,
)

MAX_FAULT_FACTOR = 100.0
"""A fault scales a kernel time or a NIC rate by at most 100x either way: a kernel 100x slower
or a NIC at 1/100 of its rate is as broken as a fault gets; beyond that is a slip."""
MAX_HOSTS = 4096
"""Far beyond what a packet-level simulation can run (32k GPUs at 8 per host); a larger
number is a typo, and would otherwise be materialised as a graph."""
MAX_SPINES = 1024
"""A leaf needs a port per spine, and switch ASICs have a few hundred ports at most."""
MAX_FAT_TREE_K = 64
"""The radix of today's largest 400G/800G switch ASICs (64 ports)."""
MAX_NCCL_CHANNELS = 64
"""NCCL's ``MAXCHANNELS`` (NVIDIA/nccl ``src/include/device.h``)."""
MAX_CPUS_PER_HOST = 4096
"""The most logical CPUs a simulated host may have: far above any GPU server's (a DGX H100 has
224)."""

def _lower(value: object) -> object:
    """Choices are case-insensitive: ``DCTCP`` and ``BF16`` mean ``dctcp`` and ``bf16``."""
    return value.lower() if isinstance(value, str) else value


def _catalogue_gpu(name: str) -> str:
    if name not in CATALOGUE:
        raise ValueError(expected_one_of(name, sorted(CATALOGUE)))
    return name


def _usable_cpu_count(count: int) -> int:
    usable = len(usable_cpus())
    if count > usable:
        raise ValueError(f"this machine lets the simulation use {usable} CPUs; use at most "
                         f"{usable}, or leave the key out for the default")
    return count


def _host_cpu(name: str) -> str:
    if name not in host_cpu_choices():
        raise ValueError(expected_one_of(name, host_cpu_choices()))
    return name


def _routing(text: str) -> str:
    """``uniform | balanced | zipf:<s> | trace:<file>`` (the trace file is checked once the
    scenario's folder is known)."""
    mode, _, arg = text.partition(":")
    if mode == "trace" and arg:
        return text
    Routing.parse(text)
    return text


def _channels(value: object) -> int | None:
    if _lower(value) == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NCCL_CHANNELS:
        raise ValueError(f'expected "auto" or an integer from 1 to {MAX_NCCL_CHANNELS}'
                         " (NCCL's MAXCHANNELS)")
    return value


def _fat_tree_k(k: int) -> int:
    if not 4 <= k <= MAX_FAT_TREE_K or k % 2:
        raise ValueError(f"expected an even integer from 4 to {MAX_FAT_TREE_K} (each fat-tree "
                         "switch has k/2 ports down and k/2 up)")
    return k


def _env_value(value: object) -> object:
    """Environment values are text; YAML scalars (1, true, 0.5) are taken as written."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value) if isinstance(value, (int, float)) else value


def _sizes_form(value: object) -> str | None:
    return "sweep" if isinstance(value, dict) else "list" if isinstance(value, list) else None


Choice = BeforeValidator(_lower)


def _yaml_switch(value: object) -> object:
    """YAML reads a bare ``off`` as false (and ``on`` as true): take them as written."""
    if isinstance(value, bool):
        return "auto" if value else "off"
    return value

PRESET_DEFAULT = Derived("the preset's")
"""A ``cluster.network.roce`` key left out takes its value from the preset."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False,
                              use_attribute_docstrings=True, validate_default=True)


Fraction = Annotated[float, Field(gt=0, le=1)]


class RoceSpec(_Section):
    """``cluster.network.roce``: PFC, ECN and DCQCN of a RoCE fabric (``transport: roce``).
    Every key but ``preset`` overrides one value of the preset."""

    preset: Annotated[PresetName, Choice] = "simai"
    """Named parameter set, scaled to the NIC rate: simai (SimAI.conf: K 800/3200 KB at
    400G, 900us rate-increase timer, BDP window, acks at data priority), dcqcn-paper (Zhu et
    al. 2015: Kmin 5 KB, Kmax 200 KB at 40G, Pmax 1%, 55us timers, F 5), hpcc-dcqcn (the HPCC
    paper's DCQCN runs)."""
    congestion_control: Annotated[Annotated[CongestionControl, Choice] | None,
                                  PRESET_DEFAULT] = None
    """dcqcn, or none (PFC only: queue pairs stay at line rate)."""
    pfc: Annotated[bool | None, PRESET_DEFAULT] = None
    """Priority flow control (lossless). Off, a drop fails the run: the NICs do not
    retransmit."""
    buffer: Annotated[Annotated[Bytes, Field(ge=65536, le=2**34)] | None, PRESET_DEFAULT] = None
    """Shared packet buffer of each switch (simai: 32MB)."""
    headroom: Annotated[Annotated[Bytes, Field(ge=1, le=2**30)] | None,
                        Derived("what the link needs: 2 x latency x rate, 3 frames, the PFC "
                                "frame")] = None
    """PFC headroom per port. Smaller values than the link needs can drop packets, which
    fails the run."""
    pfc_alpha: Annotated[Annotated[float, Field(gt=0, le=64)] | None, PRESET_DEFAULT] = None
    """Dynamic PFC threshold: share of the free buffer one queue may take (presets: 1/8)."""
    pfc_reserve: Annotated[Annotated[Bytes, Field(le=2**24)] | None, PRESET_DEFAULT] = None
    """Guaranteed buffer per ingress port and priority (presets: 4096)."""
    pfc_resume_offset: Annotated[Annotated[Bytes, Field(le=2**24)] | None,
                                 PRESET_DEFAULT] = None
    """XON hysteresis below the threshold (presets: 3072)."""
    pfc_watchdog: Annotated[Duration | None, PRESET_DEFAULT] = None
    """A pause in force this long fails the run naming the ports (presets: 10ms); at least
    1us."""
    ecn_kmin: Annotated[Annotated[Bytes, Field(le=2**32)] | None, PRESET_DEFAULT] = None
    """ECN: egress queue above which marking starts, at NIC rate (scaled for faster ports)."""
    ecn_kmax: Annotated[Annotated[Bytes, Field(ge=1, le=2**32)] | None, PRESET_DEFAULT] = None
    """ECN: queue above which every data packet is marked; above ecn_kmin."""
    ecn_pmax: Annotated[Annotated[float, Field(ge=0, le=1)] | None, PRESET_DEFAULT] = None
    """ECN: marking probability at ecn_kmax."""
    dcqcn_g: Annotated[Fraction | None, PRESET_DEFAULT] = None
    """DCQCN: alpha gain g (simai 1/256)."""
    dcqcn_alpha_interval: Annotated[Annotated[Duration, Field(ge=1)] | None,
                                    PRESET_DEFAULT] = None
    """DCQCN: alpha update period (simai 1us)."""
    dcqcn_decrease_interval: Annotated[Annotated[Duration, Field(ge=1)] | None,
                                       PRESET_DEFAULT] = None
    """DCQCN: rate-decrease check period (simai 4us)."""
    dcqcn_rp_timer: Annotated[Annotated[Duration, Field(ge=1)] | None, PRESET_DEFAULT] = None
    """DCQCN: rate-increase timer (simai 900us)."""
    dcqcn_fast_recovery_steps: Annotated[Annotated[int, Field(ge=0, le=1000)] | None,
                                         PRESET_DEFAULT] = None
    """DCQCN: F, timer ticks of fast recovery before additive increase."""
    dcqcn_rate_ai: Annotated[Rate | None, PRESET_DEFAULT] = None
    """DCQCN: additive increase per tick (simai 50Mbps); below the NIC rate."""
    dcqcn_rate_hai: Annotated[Rate | None, PRESET_DEFAULT] = None
    """DCQCN: hyper increase per tick (simai 100Mbps); below the NIC rate."""
    dcqcn_min_rate: Annotated[Rate | None, PRESET_DEFAULT] = None
    """DCQCN: lowest rate a queue pair is cut to (simai 100Mbps); below the NIC rate."""
    dcqcn_rate_on_first_cnp: Annotated[Fraction | None, PRESET_DEFAULT] = None
    """DCQCN: rate factor applied on a queue pair's first CNP (simai 1.0)."""
    dcqcn_clamp_target_rate: Annotated[bool | None, PRESET_DEFAULT] = None
    """DCQCN: every decrease sets the target rate to the current rate."""
    dcqcn_cnp_interval: Annotated[Duration | None, PRESET_DEFAULT] = None
    """DCQCN notification point: at most one CNP per queue pair per interval; 0us: one per
    marked packet (simai)."""
    window: Annotated[bool | None, PRESET_DEFAULT] = None
    """Bound bytes in flight per queue pair by its path's BDP, scaled by its rate."""
    data_priority: Annotated[Annotated[int, Field(ge=1, le=7)] | None, PRESET_DEFAULT] = None
    """PFC priority of data packets (presets: 3)."""
    ack_priority: Annotated[Annotated[AckPriority, Choice] | None, PRESET_DEFAULT] = None
    """high (acks and CNPs never paused) or data (behind data and paused with it; simai)."""


class NetworkSpec(_Section):
    """``cluster.network``: the fabric between hosts (only with ``hosts >= 2``)."""

    topology: Annotated[TopologyName, Choice] = "rail-optimized"
    """Fabric shape: rail-optimized (one switch per local GPU index, spines above), leaf-spine
    (two-tier Clos, a host's NICs on one leaf) or fat-tree (three-tier k-ary)."""
    nic_bandwidth: Annotated[Rate | None,
                             Derived("cluster.gpu's reference NIC (hardware catalogue)")] = None
    """Per-GPU NIC rate, each direction."""
    link_bandwidth: Annotated[Rate | None, Derived("nic_bandwidth")] = None
    """Switch-to-switch link rate, each direction."""
    link_latency: Duration = "500ns"
    """Per link, propagation plus switch traversal, NIC links included."""
    oversubscription: Annotated[Annotated[float, Field(ge=1)] | None,
                                Derived("1 (non-blocking), or what spines gives")] = None
    """leaf-spine and rail-optimized: leaf (or rail switch) downlink : uplink bandwidth; sets
    the spine count."""
    hosts_per_leaf: Annotated[Annotated[int, Field(ge=1, le=MAX_HOSTS)] | None,
                              Derived("max(1, 32 // gpus_per_host): 32 NIC ports down per "
                                      "leaf")] = None
    """leaf-spine only: hosts under each leaf."""
    spines: Annotated[Annotated[int, Field(ge=1, le=MAX_SPINES)] | None,
                      Derived("what oversubscription needs")] = None
    """leaf-spine and rail-optimized: spine switches. Giving both spines and oversubscription
    is an error unless they agree."""
    k: Annotated[Annotated[int, AfterValidator(_fat_tree_k),
                           Accepts(f"even integer from 4 to {MAX_FAT_TREE_K}")] | None,
                 Derived("the smallest that fits every GPU")] = None
    """fat-tree only: switch radix, giving k^3/4 NIC ports."""
    mtu: Annotated[int, Field(ge=1280, le=9216), WHOLE_BYTES] = 9000
    """Largest packet, 1280 (IPv6 minimum) to 9216 (jumbo)."""
    switch_buffer: QueueBytes = "4MiB"
    """dctcp: egress buffer per switch port; at least 2 x mtu (roce: cluster.network.roce.buffer,
    shared per switch). The default stands for a hot port's share of a 400G-generation
    shallow-buffer switch (Tomahawk-3 class, about 64 MB shared by 32 x 400G ports): 2 MB per
    port on average, and dynamic sharing lets one congested port take several times that;
    4 MiB is 84 us of drain at 400 Gbps."""
    ecn_threshold: Annotated[QueueBytes | None,
                             Derived("0.17 x NIC rate x base RTT over the topology's longest "
                                     "path, within [mtu, switch_buffer / 2]")] = None
    """dctcp: queue length at which switches mark ECN (DCTCP's K; Alizadeh et al., "Analysis
    of DCTCP", SIGMETRICS 2011); at least mtu, below switch_buffer (roce:
    cluster.network.roce.ecn_kmin/ecn_kmax)."""
    transport: Annotated[Transport, Choice] = "roce"
    """roce (RDMA over a lossless fabric with PFC, ECN and DCQCN, tuned under
    cluster.network.roce; what GPU clusters run) or dctcp (TCP with DCTCP over ECN-marking
    switches, on ns-3's TCP/IP stack; about 2.5x slower to simulate)."""
    roce: Annotated[RoceSpec | None, Derived("the simai preset (transport: roce)")] = None
    """RoCE settings (transport: roce only): a preset and per-key overrides."""
    backend: Annotated[BackendName, Choice] = "ns3"
    """Network model: ns3 (packet-level) or flow (fluid max-min, faster, no queues)."""
    symmetry: Annotated[Symmetry, Choice] = "auto"
    """ns3 on a fabric of rails: auto simulates rails that carry identical flows once and
    mirrors them (exact; docs/scale.md), approximate also mirrors rails whose flow sizes
    differ by up to 0.1% (NCCL's uneven split of a buffer over channels) and runs each rail's
    rings on two hosts (within 0.1% of full where queues stay short), off simulates every
    rail."""


class ClusterSpec(_Section):
    """``cluster``: identical hosts of GPUs, and the fabric between them."""

    gpu: Annotated[str, Choice, AfterValidator(_catalogue_gpu),
                   Accepts("a hardware-catalogue GPU: " + " | ".join(sorted(CATALOGUE)))]
    """GPU model: a hardware-catalogue key such as h100 or a100-80g, in any case."""
    hosts: Annotated[int, Field(ge=1, le=MAX_HOSTS)] = 1
    """Number of servers."""
    gpus_per_host: Annotated[int, Field(ge=1, le=16)] = 8
    """GPUs on each server's NVSwitch."""
    cpus_per_host: Annotated[Annotated[int, Field(ge=1, le=MAX_CPUS_PER_HOST)] | None,
                             Derived("the GPU's reference server's CPUs per GPU x "
                                     "gpus_per_host (DGX H100, H200, B200: 28 per GPU; DGX "
                                     "A100: 32)")] = None
    """Logical CPUs of each server, what the script sees in os.cpu_count() and
    os.sched_getaffinity(0) (a DataLoader sizes its workers by it). Where the simulation really
    runs is simulation.cpus."""
    nvlink_bandwidth: Annotated[Rate | None, Derived("the GPU's (hardware catalogue)")] = None
    """NVLink rate per GPU and direction."""
    network: Annotated[NetworkSpec | None, Derived("its keys' defaults, with hosts >= 2")] = None
    """The fabric between hosts; only with hosts >= 2."""
    calibration: Annotated[Annotated[str, MinLen(1)] | None,
                           Derived("none: the packaged kernel tables")] = None
    """Kernel calibration file (phantora-ns3 calibrate), relative to the scenario file: kernel
    times come from it and the roofline fitted to it, not from the packaged tables."""
    host: Annotated[Annotated[str, MinLen(1)] | None,
                    Derived("simulation.host_cpu's reference host, else the GPU's")] = None
    """Host profile: what each host's CPU spends per mechanism (op dispatch, autograd, DTensor,
    collective calls, synchronisation, Python). A bundled one (h100-host, h200-host) or a file
    from phantora-ns3 host-profile, relative to the scenario file."""
    host_speed: Annotated[float, Field(gt=0, le=100)] = 1.0
    """How many times as fast as its profile the simulated host runs (0.5: every host cost
    doubles)."""


class NcclSpec(_Section):
    """``nccl``: overrides of the NCCL model's choices, like NCCL_ALGO / NCCL_PROTO."""

    algorithm: Annotated[Algorithm, Choice] = "auto"
    """auto (NCCL's tuner), ring, tree or nvls."""
    protocol: Annotated[Protocol, Choice] = "auto"
    """auto (NCCL's tuner), simple, ll or ll128."""
    channels: Annotated[int | None, BeforeValidator(_channels),
                        Accepts(f"auto | integer from 1 to {MAX_NCCL_CHANNELS}")] = "auto"
    """auto (chosen per collective) or a fixed count."""
    nvls: bool = False
    """Allow NVLink SHARP (in-switch reduction); off on the measured hosts."""


class SizeSweepSpec(_Section):
    """``workload.collectives.sizes`` as a sweep: min, min*factor, ... up to max."""

    min: CollectiveBytes
    """Smallest size."""
    max: CollectiveBytes
    """Largest size (inclusive, if the sweep lands on it)."""
    factor: Annotated[int, Field(ge=2)] = 2
    """Multiplier between sizes."""


Sizes = Annotated[
    Annotated[list[CollectiveBytes], MinLen(1), Tag("list")]
    | Annotated[SizeSweepSpec, Tag("sweep")],
    Discriminator(_sizes_form, custom_error_type="sizes_form",
                  custom_error_message='expected a list of sizes, e.g. [65536, "1MiB"], '
                                       "or a sweep, e.g. {min: 64KiB, max: 1GiB, factor: 2}"),
]


class CollectivesSpec(_Section):
    """``workload.collectives``: an nccl-tests style sweep."""

    ops: Annotated[list[Annotated[CollectiveOp, Choice]], MinLen(1)]
    """Collectives to run, e.g. [all_reduce, all_gather]."""
    sizes: Annotated[Sizes, Accepts("list of sizes (bytes), or a sweep mapping"), BYTES]
    """Total bytes per collective (nccl-tests convention): a list such as [65536, "1MiB"] or
    a sweep {min: 64KiB, max: 1GiB, factor: 2}."""
    dtype: Annotated[Dtype, Choice] = "bf16"
    """Element type; sizes must split into whole elements (and, for all_gather,
    reduce_scatter and all_to_all, whole elements per rank)."""
    ranks: Annotated[list[Annotated[int, Field(ge=0)]] | None, Derived("every GPU")] = None
    """Global GPU indices forming the communicator, in rank order."""


class WorkloadSpec(_Section):
    """``workload``: what to run, exactly one of collectives, script or module."""

    collectives: Annotated[CollectivesSpec | None, Derived("none")] = None
    """Collective operations alone, like nccl-tests."""
    script: Annotated[Annotated[str, MinLen(1)] | None, Derived("none")] = None
    """A live training script, run unmodified as torchrun would; path relative to the
    scenario file's folder."""
    module: Annotated[Annotated[str, MinLen(1)] | None, Derived("none")] = None
    """Instead of a script, an installed module run as ``torchrun -m`` would (a framework's own
    entry point, e.g. ``torchtitan.train``)."""
    workdir: Annotated[Annotated[str, MinLen(1)] | None,
                       Derived("the folder phantora-ns3 was started in, as torchrun")] = None
    """The folder every rank runs in, relative to the scenario file's folder (relative paths in
    the program's arguments and config files resolve against it)."""
    args: list[str] = []
    """The program's command-line arguments (``sys.argv[1:]``); ``{out}`` in one becomes the
    run's output folder (where a framework should write its own logs and dumps)."""
    nproc_per_node: Annotated[Annotated[int, Field(ge=1, le=16)] | None,
                              Derived("cluster.gpus_per_host")] = None
    """Ranks per host, as torchrun's."""
    env: dict[str, Annotated[str, BeforeValidator(_env_value)]] = {}
    """Extra environment variables for every rank."""


class SimulationSpec(_Section):
    """``simulation``: how live scripts are timed."""

    reproducible: bool = False
    """Charge a fixed CPU cost per intercepted op instead of measuring the script's CPU time,
    and start every rank's wall clock at a fixed epoch: two runs give the same numbers, bit
    for bit (so do two runs with counted host time)."""
    cpu_time_per_op: Duration = "10us"
    """Reproducible mode's CPU cost of one intercepted op (the script's Python and PyTorch
    overhead around it), on top of the kernel launch overhead."""
    host_time: Literal["counted", "measured"] = "counted"
    """How the script's own Python between intercepted ops (the part of host time no table
    charges) is timed: counted (its lines and calls, at what the reference host pays per line
    and per call: the same on any machine, loaded or idle, however many ranks share it;
    intercept/host_time/python_work.py) or measured (this machine's CPU time, converted to the reference
    host's speed: follows C work the count misses, but moves with this machine's load). Not
    used when reproducible."""
    host_cpu: Annotated[Annotated[str, Choice, AfterValidator(_host_cpu),
                                  Accepts(" | ".join(host_cpu_choices()))] | None,
                        Derived("the reference host of cluster.gpu, else the H100's")] = None
    """Which reference GPU host's CPU the host time is charged at (h100-host, h200-host, ...:
    its tables, and the speed of its benchmark in intercept/host_time/host_benchmark.py, into which
    measured CPU time is converted), or native (host_time: measured only: this machine's CPU
    time as measured, so results depend on its speed and load). Not used when reproducible."""
    overlap_slowdown: bool = True
    """Slow kernels that run while a collective is in flight on the same GPU (NCCL's channels
    take SMs and memory bandwidth) by the factors measured on 2xH200
    (phantora/engine/overlap.py); false: kernels run as if alone."""
    routing: Annotated[str, AfterValidator(_routing),
                       Accepts("uniform | balanced | zipf:<s> | trace:<file>")] = "uniform"
    """Which experts a router's top-k picks from fake logits (launch/value_policy.py):
    uniform (every k-subset equally likely), balanced (round-robin: every expert equally
    often), zipf:<s> (expert popularity ~ 1/rank^s, shuffled per layer), or trace:<file>
    (expert counts per router call recorded from a real run by scripts/measure/record_routing.py;
    path relative to the scenario file)."""
    unknown_shapes: Literal["error", "half"] = "error"
    """An op whose output shape depends on values the simulator does not know (nonzero of a
    fake float): error (stop, naming the op and script line) or half (keep half of the
    elements)."""
    cpus: Annotated[Annotated[int, Field(ge=1), AfterValidator(_usable_cpu_count)] | None,
                    Derived("1 for a single rank on a machine with at most 2 CPUs, else "
                            "all")] = None
    """How many of this machine's CPUs a live script's simulation (coordinator and ranks) runs
    on (on a machine with at most 2 CPUs, a single rank's CPUs slow each other, which would
    show in the measured host time: phantora/cpu_affinity.py)."""
    dedup: Annotated[Literal["auto", "off"], BeforeValidator(_yaml_switch)] = "auto"
    """auto: data-parallel replicas run as one live rank per class (plus one live witness
    checked against it), the others mirror it on their own GPU and groups
    (phantora/engine/rank_classes.py); a wrong guess reruns with better classes. off: every
    rank runs live."""

    @model_validator(mode="after")
    def _native_is_measured(self) -> "SimulationSpec":
        if self.host_cpu == "native" and self.host_time == "counted" and not self.reproducible:
            raise ValueError("host_cpu: native means this machine's measured CPU time; set "
                             "host_time: measured with it, or name a reference host "
                             f"({', '.join(host_cpu_choices()[:-1])})")
        return self


FaultFactor = Annotated[float, Field(ge=1 / MAX_FAULT_FACTOR, le=MAX_FAULT_FACTOR)]


class SlowGpuSpec(_Section):
    """``faults: [{kind: slow_gpu, ...}]``: a straggler GPU."""

    kind: Literal["slow_gpu"]
    """slow_gpu: the named ranks' kernels take ``factor`` times as long."""
    ranks: Annotated[list[Annotated[int, Field(ge=0)]], MinLen(1)]
    """Ranks (0 to world size - 1) whose GPUs are slowed, e.g. [3]."""
    factor: FaultFactor
    """Kernel time multiplier, 0.01 to 100: 1.3 is 30% slower, below 1 a faster GPU."""


class NicDegradeSpec(_Section):
    """``faults: [{kind: nic_degrade, ...}]``: hosts whose NICs run below their rate."""

    kind: Literal["nic_degrade"]
    """nic_degrade: every NIC of the named hosts runs at ``factor`` x its rate."""
    hosts: Annotated[list[Annotated[int, Field(ge=0)]], MinLen(1)]
    """Hosts (0 to cluster.hosts - 1) whose NICs are degraded, e.g. [1]."""
    factor: FaultFactor
    """NIC rate multiplier, 0.01 to 100: 0.5 is half rate; above 1 an upgraded NIC."""


class LinkDownSpec(_Section):
    """``faults: [{kind: link_down, ...}]``: a fabric link that fails mid-run."""

    kind: Literal["link_down"]
    """link_down: the named link fails at ``at`` and stays down; routing avoids it."""
    link: Annotated[str, MinLen(1)]
    """A switch-to-switch fabric link by its two ends, e.g. rail0-spine1 or leaf0-spine1."""
    at: Instant = "0s"
    """When it fails, in virtual time from the run's start, e.g. 20ms (0s: down from the
    start)."""


class _UnknownFaultSpec(BaseModel):
    """What a fault of no known kind is checked against, so the message names the kinds."""

    model_config = ConfigDict(extra="ignore", strict=True, use_attribute_docstrings=True)
    kind: FaultKind
    """slow_gpu, nic_degrade or link_down."""


def _fault_kind(value: object) -> str | None:
    """The member of :data:`FaultSpec` that checks ``value``: its kind's, else the one naming
    the kinds; ``None`` (not a mapping) fails with the discriminator's own message."""
    if not isinstance(value, dict):
        return None
    kind = value.get("kind")
    return kind if kind in get_args(FaultKind) else "unknown"


FaultSpec = Annotated[
    Annotated[SlowGpuSpec, Tag("slow_gpu")] | Annotated[NicDegradeSpec, Tag("nic_degrade")]
    | Annotated[LinkDownSpec, Tag("link_down")] | Annotated[_UnknownFaultSpec, Tag("unknown")],
    Discriminator(_fault_kind, custom_error_type="fault_form",
                  custom_error_message="expected a mapping such as {kind: slow_gpu, ranks: [3], "
                                       "factor: 1.3}"),
]


class ScenarioSpec(_Section):
    """A whole ``scenario.yaml``."""

    name: Annotated[Annotated[str, MinLen(1)] | None,
                    Derived("the file name without extension")] = None
    """Label for reports."""
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    """Seed of every random choice, for reproducible runs."""
    cluster: ClusterSpec
    """The simulated hardware: gpu, hosts, gpus_per_host, nvlink_bandwidth, network."""
    nccl: NcclSpec = NcclSpec()
    """NCCL overrides: algorithm, protocol, channels, nvls."""
    workload: WorkloadSpec
    """What to run: workload.collectives (a sweep), or a training program: workload.script or
    workload.module."""
    simulation: SimulationSpec = SimulationSpec()
    """Timing and values of live scripts: reproducible, cpu_time_per_op, host_time, host_cpu,
    overlap_slowdown, routing, unknown_shapes, cpus, dedup."""
    faults: Annotated[list[FaultSpec], Accepts("list of faults, each a mapping with its kind")] = []
    """Faults and stragglers to inject: slow_gpu (ranks' kernels slower), nic_degrade (hosts'
    NICs slower), link_down (a fabric link fails at a moment of the run)."""
