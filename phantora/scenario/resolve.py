"""From a schema-valid :class:`ScenarioSpec` to a resolved :class:`Scenario`.

Fills the defaults that depend on other keys (catalogue rates, spine count, fat-tree k, ECN
threshold, ranks) and runs every check that involves more than one key (the faults':
:mod:`phantora.scenario.faults`). Problems are
collected, not raised one at a time, so a user fixes a file in one pass; each message shows
every factor that went into it.
"""

import importlib.util
from dataclasses import dataclass, replace
from math import ceil
from pathlib import Path
from typing import TypeVar

from hwmodel.measured import host_references
from hwmodel.measured.host_profile import HostProfileError, resolve_host
from hwmodel.catalogue import GpuSpec, lookup_gpu
from hwmodel.compute.calibrated import Calibration
from hwmodel.errors import CalibrationError
from hwmodel.units import format_bytes
from launch.value_policy import Routing
from phantora.cluster.topology import uplinks_for
from phantora.cpu_affinity import default_cpus
from phantora.network.roce_presets import RoceSettings, preset
from phantora.scenario.messages import (
    Problem,
    join_words,
    reject_repeats,
    scenario_error,
    show_gbps,
    show_number,
)
from phantora.scenario.model import (
    DTYPE_BYTES,
    ClusterConfig,
    CollectivesWorkload,
    Fabric,
    FatTreeFabric,
    LeafSpineFabric,
    NcclOverrides,
    NetworkConfig,
    RailOptimizedFabric,
    Scenario,
    ScriptWorkload,
    SimulationConfig,
    TopologyName,
)
from phantora.scenario.faults import resolve_faults
from phantora.scenario.keys import resolved_name
from phantora.scenario.schema import (
    MAX_SPINES,
    ClusterSpec,
    CollectivesSpec,
    NcclSpec,
    NetworkSpec,
    RoceSpec,
    ScenarioSpec,
    SizeSweepSpec,
)

T = TypeVar("T")

NET = "cluster.network"
SIZES = "workload.collectives.sizes"

DCTCP_K_PER_BDP = 0.17
"""DCTCP marking threshold as a fraction of the bandwidth-delay product: K ≈ 0.17·C·RTT
(Alizadeh, Javanmard, Prabhakar, "Analysis of DCTCP", SIGMETRICS 2011)."""
LEAF_DOWNLINK_PORTS = 32
"""NIC ports under a leaf by default: half of a 64-port switch, the other half up."""
_SPLIT_OPS = frozenset({"all_gather", "reduce_scatter", "all_to_all"})
"""Ops whose total size nccl-tests divides evenly over the ranks."""
_TOPOLOGY_KEYS: dict[str, tuple[TopologyName, ...]] = {
    "hosts_per_leaf": ("leaf-spine",),
    "spines": ("leaf-spine", "rail-optimized"),
    "oversubscription": ("leaf-spine", "rail-optimized"),
    "k": ("fat-tree",),
}
"""Network keys that only some topologies use."""


def resolve_scenario(spec: ScenarioSpec, source: str) -> Scenario:
    """The resolved scenario, or a :class:`ScenarioError` listing every cross-key problem."""
    problems: list[Problem] = []
    gpu = lookup_gpu(spec.cluster.gpu)
    cluster = _cluster(spec.cluster, gpu, source, problems,
                       default_host=_given(spec.simulation.host_cpu, host_references.NATIVE))
    nccl = _nccl(spec.nccl, gpu, problems)
    workload = _workload(spec, gpu, source, problems)
    routing = _routing(spec.simulation.routing, source, problems)
    faults = () if cluster is None or workload is None else \
        resolve_faults(spec.faults, cluster, workload, problems)
    if problems or cluster is None or workload is None:
        raise scenario_error(source, problems)
    return Scenario(name=_given(spec.name, Path(source).stem), seed=spec.seed, source=source,
                    cluster=cluster, nccl=nccl, workload=workload, faults=faults,
                    simulation=SimulationConfig(
                        reproducible=spec.simulation.reproducible,
                        cpu_time_per_op_ns=spec.simulation.cpu_time_per_op,
                        host_time=spec.simulation.host_time,
                        host_cpu=_given(spec.simulation.host_cpu,
                                        host_references.references().for_gpu(gpu.name).name),
                        overlap_slowdown=spec.simulation.overlap_slowdown,
                        routing=routing,
                        unknown_shapes=spec.simulation.unknown_shapes,
                        dedup=spec.simulation.dedup,
                        cpus=_given(spec.simulation.cpus, default_cpus(
                            workload.world_size if isinstance(workload, ScriptWorkload)
                            else 1))))


def _given(value: T | None, default: T) -> T:
    """``value`` unless the user left it out."""
    return default if value is None else value


def _bytes(nbytes: int) -> str:
    """``4MiB (4194304 bytes)``, or just ``18000 bytes`` when no binary unit reads better."""
    short = format_bytes(nbytes)
    readable = not short.endswith(f"{nbytes}B") and len(short) <= 7
    return f"{short} ({nbytes} bytes)" if readable else f"{nbytes} bytes"


def _num_gpus_factors(cluster: ClusterSpec) -> str:
    return (f"cluster.hosts ({cluster.hosts}) x cluster.gpus_per_host ({cluster.gpus_per_host})"
            f" = {cluster.hosts * cluster.gpus_per_host} GPUs")


# -- cluster and network --------------------------------------------------------------------

def _cluster(spec: ClusterSpec, gpu: GpuSpec, source: str, problems: list[Problem], *,
             default_host: str) -> ClusterConfig | None:
    network = None
    if spec.hosts == 1 and spec.network is not None:
        problems.append((NET, "given, but cluster.hosts is 1, and a single host has no fabric "
                              "(its GPUs talk over NVLink); remove cluster.network or raise "
                              "cluster.hosts to 2 or more"))
    elif spec.hosts >= 2:
        network = _network(spec, _given(spec.network, NetworkSpec()), gpu, problems)
        if network is None:
            return None
    return ClusterConfig(gpu=gpu.name, hosts=spec.hosts, gpus_per_host=spec.gpus_per_host,
                         nvlink_gbps=_given(spec.nvlink_bandwidth, gpu.nvlink_gbps),
                         cpus_per_host=_given(spec.cpus_per_host,
                                              gpu.host_cpus_per_gpu * spec.gpus_per_host),
                         network=network, calibration=_calibration(spec, source, problems),
                         host=_host(spec, gpu, source, default_host, problems),
                         host_speed=spec.host_speed)


def _host(spec: ClusterSpec, gpu: GpuSpec, source: str, default_host: str,
          problems: list[Problem]) -> str:
    """The host profile's bundled name or absolute path, its file read once here so that a bad
    one is a scenario error rather than every rank's. Default: ``simulation.host_cpu``'s
    reference host (``default_host``), else the GPU's."""
    if spec.host is None:
        return host_references.reference_host(default_host, gpu.name)
    try:
        profile = resolve_host(spec.host, Path(source).resolve().parent)
    except HostProfileError as error:
        problems.append(("cluster.host", f'got "{spec.host}"; {error} (paths are relative to '
                                         "the scenario file's folder)"))
        return host_references.reference_host(None, gpu.name)
    return profile.name if profile.bundled else str(profile.path)


def _calibration(spec: ClusterSpec, source: str, problems: list[Problem]) -> str | None:
    """The calibration file's absolute path, read once here so that a bad one is a scenario
    error rather than every rank's."""
    if spec.calibration is None:
        return None
    path = Path(source).resolve().parent / spec.calibration
    try:
        Calibration.load(path)
    except CalibrationError as error:
        problems.append(("cluster.calibration",
                         f'got "{spec.calibration}"; {error} (paths are relative to the '
                         "scenario file's folder)"))
        return None
    return str(path)


def _network(cluster: ClusterSpec, net: NetworkSpec, gpu: GpuSpec,
             problems: list[Problem]) -> NetworkConfig | None:
    nic_gbps = _given(net.nic_bandwidth, gpu.default_nic_gbps)
    link_gbps = _given(net.link_bandwidth, nic_gbps)
    before = len(problems)
    fabric = _fabric(cluster, net, nic_gbps, link_gbps, problems)
    switch_buffer = net.switch_buffer
    if switch_buffer < 2 * net.mtu:
        problems.append((f"{NET}.switch_buffer",
                         f"{_bytes(switch_buffer)} is less than 2 x {NET}.mtu ({net.mtu}) "
                         f"= {2 * net.mtu} bytes, so a port cannot hold two full packets; "
                         f"use at least {2 * net.mtu}"))
    elif net.ecn_threshold is not None and not net.mtu <= net.ecn_threshold < switch_buffer:
        problems.append((f"{NET}.ecn_threshold",
                         f"{_bytes(net.ecn_threshold)} must be at least {NET}.mtu ({net.mtu} "
                         f"bytes) and below {NET}.switch_buffer ({_bytes(switch_buffer)}), "
                         "so that ECN marks full packets before the queue drops any; "
                         f"use a value in [{net.mtu}, {switch_buffer})"))
    roce = _roce_settings(net, nic_gbps, problems)
    if fabric is None or len(problems) > before:
        return None
    ecn_bytes = _given(net.ecn_threshold, default_ecn_threshold_bytes(
        nic_gbps, net.link_latency, _longest_path_links(cluster, fabric), net.mtu,
        switch_buffer))
    return NetworkConfig(topology=fabric, nic_gbps=nic_gbps, link_gbps=link_gbps,
                         link_latency_ns=net.link_latency, mtu_bytes=net.mtu,
                         switch_buffer_bytes=switch_buffer, ecn_threshold_bytes=ecn_bytes,
                         transport=net.transport, roce=roce, backend=net.backend,
                         symmetry=net.symmetry)


_ROCE_EQUIVALENT = {"switch_buffer": "buffer", "ecn_threshold": "ecn_kmin/ecn_kmax"}
"""The ``cluster.network.roce`` keys that do what a DCTCP-only key does."""


def _roce_settings(net: NetworkSpec, nic_gbps: float,
                   problems: list[Problem]) -> RoceSettings | None:
    """The preset with the scenario's overrides, for ``transport: roce``; checks the keys that
    only make sense with one transport."""
    if net.transport != "roce":
        if net.roce is not None:
            problems.append((f"{NET}.roce", f"given, but {NET}.transport is {net.transport}; "
                                            "set transport: roce or remove the roce section"))
        return None
    for key in _ROCE_EQUIVALENT:
        if key in net.model_fields_set:
            problems.append((f"{NET}.{key}",
                             f"is a dctcp setting, but {NET}.transport is roce; use "
                             f"{NET}.roce.{_ROCE_EQUIVALENT[key]} instead"))
    spec = _given(net.roce, RoceSpec())
    overrides = {resolved_name(RoceSpec, key): value for key, value
                 in spec.model_dump(exclude={"preset"}, exclude_none=True).items()}
    settings = replace(preset(spec.preset, nic_gbps), **overrides)
    roce = f"{NET}.roce"
    if settings.ecn_kmin_bytes >= settings.ecn_kmax_bytes:
        problems.append((f"{roce}.ecn_kmax",
                         f"{settings.ecn_kmax_bytes} bytes is not above ecn_kmin "
                         f"({settings.ecn_kmin_bytes} bytes); marking ramps from Kmin up to "
                         "Kmax, so use a larger ecn_kmax or a smaller ecn_kmin"))
    for key in ("dcqcn_min_rate", "dcqcn_rate_ai", "dcqcn_rate_hai"):
        if getattr(settings, key + "_gbps") >= nic_gbps:
            problems.append((f"{roce}.{key}",
                             f"{show_gbps(getattr(settings, key + '_gbps'))} is not below the NIC "
                             f"rate ({show_gbps(nic_gbps)}); use a smaller rate"))
    if settings.pfc_watchdog_ns < 1_000:
        problems.append((f"{roce}.pfc_watchdog",
                         f"{settings.pfc_watchdog_ns} ns is shorter than a microsecond, less "
                         "than one PFC round trip; use 1ms or more"))
    return settings


def _fabric(cluster: ClusterSpec, net: NetworkSpec, nic_gbps: float, link_gbps: float,
            problems: list[Problem]) -> Fabric | None:
    misplaced = [(key, users) for key, users in _TOPOLOGY_KEYS.items()
                 if getattr(net, key) is not None and net.topology not in users]
    for key, users in misplaced:
        which = f"topology {users[0]}" if len(users) == 1 else f"topologies {join_words(users)}"
        fix = f"set topology: {users[0]}" if len(users) == 1 else "change the topology"
        problems.append((f"{NET}.{key}", f"only used by {which}, but {NET}.topology is "
                                         f"{net.topology}; remove {key} or {fix}"))
    if misplaced:
        return None
    if net.topology == "fat-tree":
        return _fat_tree(cluster, net, problems)
    if net.topology == "leaf-spine":
        return _leaf_spine(cluster, net, nic_gbps, link_gbps, problems)
    return _rail_optimized(cluster, net, nic_gbps, link_gbps, problems)


@dataclass(frozen=True, slots=True)
class _Tier:
    """The switches under the spines, as the spine-count arithmetic sees them."""

    switch: str
    """What one is called in messages: "leaf", "rail switch"."""
    down_factors: str
    """How its downlink bandwidth comes about, e.g. "4 hosts x 8 GPUs x 400 Gbps"."""
    down_gbps: float
    no_spines: tuple[str, str] | None
    """``(reason, fix)`` when there is only one such switch, so nothing crosses a spine."""


def _leaf_spine(cluster: ClusterSpec, net: NetworkSpec, nic_gbps: float, link_gbps: float,
                problems: list[Problem]) -> LeafSpineFabric | None:
    hosts_per_leaf = _given(net.hosts_per_leaf,
                            max(1, LEAF_DOWNLINK_PORTS // cluster.gpus_per_host))
    leaves = ceil(cluster.hosts / hosts_per_leaf)
    one_leaf = (f"cluster.hosts ({cluster.hosts}) fit under one leaf of {hosts_per_leaf} "
                f"(hosts_per_leaf)", "lower hosts_per_leaf")
    tier = _Tier("leaf", f"{hosts_per_leaf} hosts x {cluster.gpus_per_host} GPUs x "
                         f"{show_gbps(nic_gbps)}", hosts_per_leaf * cluster.gpus_per_host * nic_gbps,
                 one_leaf if leaves == 1 else None)
    layer = _spine_layer(net, tier, link_gbps, problems)
    if layer is None:
        return None
    spines, oversubscription = layer
    return LeafSpineFabric(hosts_per_leaf=hosts_per_leaf, leaves=leaves, spines=spines,
                           oversubscription=oversubscription)


def _rail_optimized(cluster: ClusterSpec, net: NetworkSpec, nic_gbps: float, link_gbps: float,
                    problems: list[Problem]) -> RailOptimizedFabric | None:
    one_rail = ("cluster.gpus_per_host is 1, so there is one rail",
                "raise gpus_per_host or use leaf-spine")
    tier = _Tier("rail switch", f"{cluster.hosts} hosts x {show_gbps(nic_gbps)}",
                 cluster.hosts * nic_gbps, one_rail if cluster.gpus_per_host == 1 else None)
    layer = _spine_layer(net, tier, link_gbps, problems)
    if layer is None:
        return None
    spines, oversubscription = layer
    return RailOptimizedFabric(spines=spines, oversubscription=oversubscription)


def _spine_layer(net: NetworkSpec, tier: _Tier, link_gbps: float,
                 problems: list[Problem]) -> tuple[int, float] | None:
    """``(spines, oversubscription as built)`` from whichever of the two keys is given."""
    if tier.no_spines is not None:
        reason, fix = tier.no_spines
        given = [key for key in ("spines", "oversubscription") if getattr(net, key) is not None]
        for key in given:
            problems.append((f"{NET}.{key}", f"given, but {reason}: no traffic crosses a spine; "
                                             f"remove {key} or {fix}"))
        return None if given else (0, 1.0)
    ratio = _given(net.oversubscription, 1.0)
    needed = uplinks_for(tier.down_gbps, ratio, link_gbps)
    arithmetic = (f"each {tier.switch} has {tier.down_factors} = {show_gbps(tier.down_gbps)} down, "
                  f"and ceil({show_number(tier.down_gbps)} / {show_number(ratio)} / {show_number(link_gbps)}) = "
                  f"{needed} spine links of {show_gbps(link_gbps)} carry that")
    if net.spines is not None and net.oversubscription is not None and net.spines != needed:
        problems.append((f"{NET}.spines",
                         f"{net.spines} disagrees with {NET}.oversubscription ({show_number(ratio)}): "
                         f"{arithmetic}; give only one of spines and oversubscription, or set "
                         f"spines: {needed}"))
        return None
    if net.spines is None and needed > MAX_SPINES:
        problems.append((f"{NET}.spines", f"{needed} needed, more than {MAX_SPINES}: "
                                          f"{arithmetic}; raise link_bandwidth or "
                                          "oversubscription"))
        return None
    spines = _given(net.spines, needed)
    return spines, tier.down_gbps / (spines * link_gbps)


def _fat_tree(cluster: ClusterSpec, net: NetworkSpec,
              problems: list[Problem]) -> FatTreeFabric | None:
    num_gpus = cluster.hosts * cluster.gpus_per_host
    smallest = 4
    while smallest**3 // 4 < num_gpus:
        smallest += 2
    if net.k is not None and net.k**3 // 4 < num_gpus:
        problems.append((f"{NET}.k", f"{net.k} gives {net.k**3 // 4} NIC ports (k^3/4), but "
                                     f"{_num_gpus_factors(cluster)}; use k >= {smallest}"))
        return None
    return FatTreeFabric(k=_given(net.k, smallest))


def _longest_path_links(cluster: ClusterSpec, fabric: Fabric) -> int:
    """Links on the longest GPU-to-GPU fabric path (one way)."""
    if isinstance(fabric, FatTreeFabric):
        num_gpus, half = cluster.hosts * cluster.gpus_per_host, fabric.k // 2
        return 2 if num_gpus <= half else 4 if num_gpus <= half * half else 6
    return 4 if fabric.spines else 2


def default_ecn_threshold_bytes(nic_gbps: float, link_latency_ns: int, path_links: int,
                                mtu_bytes: int, switch_buffer_bytes: int) -> int:
    """DCTCP's K for the fabric: ``0.17 x nic rate x base RTT``, within [mtu, buffer / 2].

    Base RTT over ``path_links`` links: propagation both ways plus store-and-forward of one
    full packet per link (ACKs are small). E.g. 400 Gbps, 500 ns, 4 links, MTU 9000:
    RTT = 4000 + 720 ns, BDP = 236000 bytes, K = 40120 bytes.
    """
    rtt_ns = 2 * path_links * link_latency_ns + path_links * mtu_bytes * 8 / nic_gbps
    bdp_bytes = nic_gbps * rtt_ns / 8  # Gbit/s x ns = bits
    return min(max(round(DCTCP_K_PER_BDP * bdp_bytes), mtu_bytes), switch_buffer_bytes // 2)


# -- nccl -------------------------------------------------------------------------------------

def _nccl(spec: NcclSpec, gpu: GpuSpec, problems: list[Problem]) -> NcclOverrides:
    if spec.algorithm == "nvls" and not spec.nvls:
        problems.append(("nccl.algorithm", "nvls needs nccl.nvls: true (NVLink SHARP), which is "
                                           "false; set nccl.nvls: true or pick another algorithm"))
    if spec.algorithm == "nvls" and spec.protocol not in ("auto", "simple"):
        problems.append(("nccl.protocol", f"got {spec.protocol}, but NCCL runs nvls with the "
                                          "simple protocol only; use protocol: simple or auto"))
    if spec.nvls and gpu.sm_arch < 90:
        problems.append(("nccl.nvls", f"true, but cluster.gpu {gpu.name} (sm_arch {gpu.sm_arch}) "
                                      "has no NVLink SHARP, which needs sm_arch >= 90 "
                                      "(third-generation NVSwitch); set nvls: false"))
    return NcclOverrides(algorithm=spec.algorithm, protocol=spec.protocol, channels=spec.channels,
                      nvls=spec.nvls)


# -- simulation -------------------------------------------------------------------------------

def _routing(text: str, source: str, problems: list[Problem]) -> str:
    """The routing with a trace's path made absolute; its file must hold a valid trace."""
    mode, _, arg = text.partition(":")
    if mode != "trace":
        return text
    path = Path(source).resolve().parent / arg
    try:
        Routing.parse(f"trace:{path}")
    except ValueError as error:
        problems.append(("simulation.routing", f"{error} (paths are relative to the scenario "
                                               "file's folder; record one with "
                                               "scripts/measure/record_routing.py)"))
    return f"trace:{path}"


# -- workload ---------------------------------------------------------------------------------

def _workload(spec: ScenarioSpec, gpu: GpuSpec, source: str,
              problems: list[Problem]) -> CollectivesWorkload | ScriptWorkload | None:
    workload = spec.workload
    given = [key for key in ("collectives", "script", "module") if getattr(workload, key)]
    if len(given) > 1:
        problems.append(("workload", f"has {' and '.join(given)}; keep one (a scenario runs "
                                     "either a collectives sweep or a training script or "
                                     "module)"))
        return None
    if workload.script is not None or workload.module is not None:
        return _script(spec, source, problems)
    if (workload.args or workload.nproc_per_node is not None or workload.env
            or workload.workdir is not None):
        problems.append(("workload", "args, nproc_per_node, env and workdir go with "
                                     "workload.script or workload.module; add one or remove "
                                     "them"))
        return None
    return _collectives(spec, gpu, problems)


def _script(spec: ScenarioSpec, source: str, problems: list[Problem]) -> ScriptWorkload | None:
    workload, cluster = spec.workload, spec.cluster
    folder = Path(source).resolve().parent
    before = len(problems)
    script = None if workload.script is None else folder / workload.script
    if script is not None and not script.is_file():
        problems.append(("workload.script", f'got "{workload.script}"; no such file at {script} '
                                            "(paths are relative to the scenario file's folder)"))
    if workload.module is not None:
        _check_module(workload.module, problems)
    workdir = None if workload.workdir is None else folder / workload.workdir
    if workdir is not None and not workdir.is_dir():
        problems.append(("workload.workdir", f'got "{workload.workdir}"; no such folder at '
                                             f"{workdir} (paths are relative to the scenario "
                                             "file's folder)"))
    if len(problems) > before:
        return None
    nproc = _given(workload.nproc_per_node, cluster.gpus_per_host)
    if nproc > cluster.gpus_per_host:
        problems.append(("workload.nproc_per_node",
                         f"workload.nproc_per_node ({nproc}) x cluster.hosts ({cluster.hosts}) = "
                         f"{nproc * cluster.hosts} ranks, but cluster.gpus_per_host "
                         f"({cluster.gpus_per_host}) x cluster.hosts ({cluster.hosts}) = "
                         f"{cluster.gpus_per_host * cluster.hosts} GPUs; "
                         f"set nproc_per_node: {cluster.gpus_per_host}"))
        return None
    return ScriptWorkload(script=None if script is None else str(script), module=workload.module,
                          workdir=None if workdir is None else str(workdir),
                          args=tuple(workload.args), nproc_per_node=nproc,
                          world_size=nproc * cluster.hosts, env=dict(workload.env))


FRAMEWORK_EXTRA = {"torchtitan": "frameworks", "deepspeed": "frameworks", "megatron": "frameworks"}
"""Top-level packages of a module entry point that one of phantora-ns3's extras installs."""


def _check_module(module: str, problems: list[Problem]) -> None:
    """The module's top-level package must be installed. Only that one is looked up: finding a
    submodule would import its package (for a framework, seconds), and a rank reports any
    later import error in its log."""
    top = module.split(".")[0]
    if not all(part.isidentifier() for part in module.split(".")):
        problems.append(("workload.module", f'got "{module}"; not a dotted module name '
                                            "(e.g. torchtitan.train)"))
    elif importlib.util.find_spec(top) is None:
        extra = FRAMEWORK_EXTRA.get(top)
        hint = (f'pip install -e ".[{extra}]" installs it' if extra
                else "install it in the environment phantora-ns3 runs in")
        problems.append(("workload.module", f'got "{module}"; no package "{top}" is installed '
                                            f"({hint})"))


def _collectives(spec: ScenarioSpec, gpu: GpuSpec,
                 problems: list[Problem]) -> CollectivesWorkload | None:
    collectives = spec.workload.collectives
    if collectives is None:
        problems.append(("workload", "nothing to run; add workload.collectives, e.g. {ops: "
                                     "[all_reduce], sizes: {min: 1MiB, max: 1GiB, factor: 2}}, "
                                     "or workload.script"))
        return None
    before = len(problems)
    reject_repeats("workload.collectives.ops", collectives.ops, "op", problems)
    ranks = _ranks(spec.cluster, collectives.ranks, problems)
    sizes = _sizes(collectives, len(ranks), gpu, problems)
    if len(problems) > before:
        return None
    return CollectivesWorkload(ops=tuple(collectives.ops), sizes_bytes=sizes,
                               dtype=collectives.dtype, dtype_bytes=DTYPE_BYTES[collectives.dtype],
                               ranks=ranks)


def _ranks(cluster: ClusterSpec, ranks: list[int] | None,
           problems: list[Problem]) -> tuple[int, ...]:
    num_gpus = cluster.hosts * cluster.gpus_per_host
    if ranks is None:
        return tuple(range(num_gpus))
    reject_repeats("workload.collectives.ranks", ranks, "rank", problems)
    for index, gpu in enumerate(ranks):
        if gpu >= num_gpus:
            problems.append((f"workload.collectives.ranks[{index}]",
                             f"got {gpu}; expected a GPU index from 0 to {num_gpus - 1} "
                             f"({_num_gpus_factors(cluster)})"))
    return tuple(ranks)


def _sizes(collectives: CollectivesSpec, num_ranks: int, gpu: GpuSpec,
           problems: list[Problem]) -> tuple[int, ...]:
    sizes = collectives.sizes
    if isinstance(sizes, SizeSweepSpec):
        if sizes.max < sizes.min:
            problems.append((f"{SIZES}.max", f"{_bytes(sizes.max)} is below {SIZES}.min "
                                             f"({_bytes(sizes.min)}); swap them"))
            return ()
        if not _fits_in_memory(f"{SIZES}.max", sizes.max, gpu, problems):
            return ()
        # Every size in the sweep is a multiple of min, so checking min checks them all.
        _check_multiple(f"{SIZES}.min", sizes.min, collectives, num_ranks, problems)
        return _sweep(sizes)
    for index, nbytes in enumerate(sizes):
        if _fits_in_memory(f"{SIZES}[{index}]", nbytes, gpu, problems):
            _check_multiple(f"{SIZES}[{index}]", nbytes, collectives, num_ranks, problems)
    return tuple(sizes)


def _fits_in_memory(path: str, nbytes: int, gpu: GpuSpec, problems: list[Problem]) -> bool:
    """A collective's buffer (total size, nccl-tests convention) must fit on one GPU."""
    if nbytes <= gpu.memory_bytes:
        return True
    problems.append((path, f"{_bytes(nbytes)} does not fit in the {_bytes(gpu.memory_bytes)} of "
                           f"memory of one {gpu.name}; use at most {gpu.memory_bytes}"))
    return False


def _sweep(sweep: SizeSweepSpec) -> tuple[int, ...]:
    """``min, min*factor, ...`` while ``<= max``, as nccl-tests ``-b -e -f`` does."""
    sizes, nbytes = [], sweep.min
    while nbytes <= sweep.max:
        sizes.append(nbytes)
        nbytes *= sweep.factor
    return tuple(sizes)


def _check_multiple(path: str, nbytes: int, collectives: CollectivesSpec, num_ranks: int,
                    problems: list[Problem]) -> None:
    """Sizes must split into whole elements, and whole elements per rank where ops split."""
    dtype, dtype_bytes = collectives.dtype, DTYPE_BYTES[collectives.dtype]
    split_ops = [op for op in collectives.ops if op in _SPLIT_OPS]
    if split_ops and nbytes % (dtype_bytes * num_ranks):
        multiple = dtype_bytes * num_ranks
        need = (f"dtype {dtype} ({dtype_bytes} bytes) x {num_ranks} ranks = {multiple} bytes, "
                f"which {join_words(split_ops)} need{'s' if len(split_ops) == 1 else ''} "
                "(nccl-tests splits the total size evenly over the ranks)")
    elif nbytes % dtype_bytes:
        multiple = dtype_bytes
        need = (f"dtype {dtype} ({dtype_bytes} bytes), which every op needs (a collective "
                "moves whole elements)")
    else:
        return
    lower = nbytes // multiple * multiple
    fix = f"use {lower} or {lower + multiple}" if lower else f"use {multiple}"
    problems.append((path, f"{nbytes} bytes is not a multiple of {need}; {fix}"))
