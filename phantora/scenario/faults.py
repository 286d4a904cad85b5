"""Every check of a scenario's faults against its cluster and workload, in one place.

The schema checks each fault's own keys; :func:`resolve_faults` checks what needs the rest of
the scenario: ranks against the world size, hosts against the cluster, each rank (host) in
one ``slow_gpu`` (``nic_degrade``) fault at most, and ``link_down`` links against the cluster
graph (:func:`~phantora.scenario.cluster_graph.build_topology`): a switch-to-switch link,
named once, whose loss with the others leaves every two hosts connected.
"""

from collections.abc import Sequence

from phantora.cluster.topology import LinkKind, Topology
from phantora.scenario.cluster_graph import build_topology
from phantora.scenario.messages import (
    Problem,
    did_you_mean,
    reject_repeats,
    show_gbps,
    show_number,
)
from phantora.scenario.model import (
    ClusterConfig,
    CollectivesWorkload,
    Fault,
    LinkDownFault,
    NicDegradeFault,
    ScriptWorkload,
    SlowGpuFault,
)
from phantora.scenario.quantities import MAX_RATE_GBPS
from phantora.scenario.schema import FaultSpec, LinkDownSpec, NicDegradeSpec, SlowGpuSpec

_LISTED_INDICES = 16
"""Ranks or hosts up to this many are listed one by one in messages; more as a range."""
_LISTED_LINKS = 24
"""Link names listed in a message before the rest are counted."""


def resolve_faults(specs: Sequence[FaultSpec], cluster: ClusterConfig,
                   workload: CollectivesWorkload | ScriptWorkload,
                   problems: list[Problem]) -> tuple[Fault, ...]:
    """The faults, each checked against the cluster and the workload; problems are added to
    ``problems``."""
    faults: list[Fault] = []
    claimed: dict[tuple[str, int], int] = {}
    """(kind, rank or host) -> the fault that names it first."""
    links_down: dict[int, LinkDownFault] = {}
    """Index in ``specs`` -> the link_down fault there."""
    for index, spec in enumerate(specs):
        path = f"faults[{index}]"
        if isinstance(spec, SlowGpuSpec):
            if not isinstance(workload, ScriptWorkload):
                problems.append((path, "slow_gpu slows a training script's kernels, but "
                                       "workload.collectives runs none; remove this fault or "
                                       "run a workload.script"))
                continue
            world = (f"cluster.hosts ({cluster.hosts}) x workload.nproc_per_node "
                     f"({workload.nproc_per_node}) = {workload.world_size} ranks")
            _members(index, "ranks", spec.ranks, workload.world_size, world, claimed, problems)
            faults.append(SlowGpuFault(ranks=tuple(spec.ranks), factor=spec.factor))
            continue
        if cluster.network is None:
            problems.append((path, f"{spec.kind} needs a fabric between hosts, but "
                                   "cluster.hosts is 1 (its GPUs talk over NVLink); remove "
                                   "this fault or raise cluster.hosts to 2 or more"))
            continue
        if isinstance(spec, NicDegradeSpec):
            _members(index, "hosts", spec.hosts, cluster.hosts,
                     f"cluster.hosts is {cluster.hosts}", claimed, problems)
            nic_gbps = cluster.network.nic_gbps
            if nic_gbps * spec.factor > MAX_RATE_GBPS:
                problems.append((f"{path}.factor",
                                 f"{show_number(spec.factor)} x cluster.network.nic_bandwidth "
                                 f"({show_gbps(nic_gbps)}) is above {show_gbps(MAX_RATE_GBPS)}; "
                                 "use a smaller factor"))
            faults.append(NicDegradeFault(hosts=tuple(spec.hosts), factor=spec.factor,
                                          nic_gbps_before=nic_gbps,
                                          nic_gbps_after=nic_gbps * spec.factor))
        elif isinstance(spec, LinkDownSpec):
            links_down[index] = LinkDownFault(link=spec.link, at_ns=spec.at)
            faults.append(links_down[index])
    if links_down:
        _check_links(links_down, build_topology(cluster), problems)
    return tuple(faults)


def _members(index: int, key: str, members: Sequence[int], count: int, why: str,
             claimed: dict[tuple[str, int], int], problems: list[Problem]) -> None:
    """``faults[index].key`` (ranks or hosts) must be below ``count`` (``why`` says where it
    comes from), each listed once, and in no earlier fault of the same kind."""
    path, what = f"faults[{index}]", key[:-1]
    valid = (", ".join(map(str, range(count))) if count <= _LISTED_INDICES
             else f"0 to {count - 1}")
    reject_repeats(f"{path}.{key}", members, what, problems)
    for position, member in enumerate(members):
        where = f"{path}.{key}[{position}]"
        if member >= count:
            problems.append((where, f"got {member}; expected one of {valid} ({why})"))
            continue
        first = claimed.setdefault((key, member), index)
        if first != index:
            problems.append((where, f"{what} {member} is already in faults[{first}]; give each "
                                    f"{what} one fault of a kind"))


def _check_links(faults: dict[int, LinkDownFault], topology: Topology,
                 problems: list[Problem]) -> None:
    """Each ``link_down`` (by its index among the faults) names a switch-to-switch link of
    ``topology`` (NIC and NVLink links cut GPUs off), one no earlier fault took down, and all
    of them together leave a path between every two hosts."""
    fabric = [i for i, link in enumerate(topology.links) if link.kind is LinkKind.FABRIC]
    names = [topology.link_name(i) for i in fabric]
    down_at: dict[int, tuple[int, int]] = {}
    """Link -> (the fault that takes it down, when)."""
    for index, fault in faults.items():
        path, link = f"faults[{index}].link", topology.link_named(fault.link)
        if link is None or topology.links[link].kind is not LinkKind.FABRIC:
            what = ("names no link of the topology" if link is None else
                    f"is a {topology.links[link].kind.value} link, which cuts its GPU off")
            problems.append((path, f'got "{fault.link}", which {what}; '
                                   + _fabric_links_hint(fault.link, names, topology)))
        elif link in down_at:
            problems.append((path, f"{fault.link} already goes down in "
                                   f"faults[{down_at[link][0]}] and stays down; list each link "
                                   "once"))
        else:
            down_at[link] = (index, fault.at_ns)
    down: set[int] = set()
    for link, (index, _) in sorted(down_at.items(), key=lambda item: item[1][1]):
        down.add(link)
        partition = topology.partition_by(down)
        if partition is not None:
            problems.append((f"faults[{index}].link",
                             f"{partition}; a link_down must leave a path between every two "
                             "hosts: take down another link, or add spines"))
            break


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
