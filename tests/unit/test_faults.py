"""Faults and stragglers as scenario keys: validation (each bad fault one line naming its key
and what is valid), the topology with degraded NICs and failed links, the engine's scaled
kernels and the ``faults`` rows of ``summary.json``."""

from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import pytest

from hwmodel.catalogue import lookup_gpu
from hwmodel.errors import ScenarioError, SimulationError
from phantora.cluster.topology import LinkKind
from phantora.collectives import FlowSpec, NcclConfig, SystemInfo
from phantora.engine.live import LiveEngine
from phantora.engine.rank_classes import RankClasses
from phantora.network.base import LinkFailure
from phantora.network.flow import FluidBackend
from phantora.report.faults import FAILURE_COUNTERS, fault_lines, fault_rows
from phantora.run.assemble import link_failures, make_backend
from phantora.scenario import Scenario, parse_scenario
from phantora.scenario.cluster_graph import build_topology, nics_of_hosts
from tests.unit.test_live_engine import ScriptedRank, make_topology, run

SOURCE = "x.yaml"
COLLECTIVES = {"collectives": {"ops": ["all_reduce"], "sizes": [1048576]}}


def scenario(faults: list[Any], hosts: int = 2, workload: dict[str, Any] | None = None,
             **network: Any) -> dict[str, Any]:
    cluster: dict[str, Any] = {"gpu": "h100", "hosts": hosts, "gpus_per_host": 2}
    if network:
        cluster["network"] = network
    return {"cluster": cluster, "workload": workload or COLLECTIVES, "faults": faults}


def script_scenario(tmp_path: Path, faults: list[Any]) -> tuple[dict[str, Any], str]:
    """Two hosts of two GPUs, one rank per GPU (4 ranks); the source to parse it with."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    return scenario(faults, workload={"script": "train.py"}), str(tmp_path / "s.yaml")


def problem(data: dict[str, Any], source: str = SOURCE) -> str:
    """The one line of the ScenarioError ``data`` raises, without the source."""
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, source)
    lines = str(caught.value).splitlines()
    assert len(lines) == 1, lines
    return lines[0].removeprefix(f"{source}: ")




# -- schema and resolution ------------------------------------------------------------------------

def test_faults_resolve_in_order_with_base_units(tmp_path: Path) -> None:
    data, source = script_scenario(tmp_path, [
        {"kind": "slow_gpu", "ranks": [3], "factor": 1.3},
        {"kind": "nic_degrade", "hosts": [1], "factor": 0.5},
        {"kind": "link_down", "link": "rail0-spine1", "at": "20ms"}])
    resolved = parse_scenario(data, source)
    assert resolved.echo()["faults"] == [
        {"kind": "slow_gpu", "ranks": [3], "factor": 1.3},
        {"kind": "nic_degrade", "hosts": [1], "factor": 0.5, "nic_gbps_before": 400.0,
         "nic_gbps_after": 200.0},
        {"kind": "link_down", "link": "rail0-spine1", "at_ns": 20_000_000}]
    assert resolved.kernel_scale() == {3: 1.3}
    assert parse_scenario(scenario([]), SOURCE).faults == ()


@pytest.mark.parametrize(("fault", "expected"), [
    ({"kind": "slow_gpu", "ranks": [4], "factor": 1.3},
     "faults[0].ranks[0]: got 4; expected one of 0, 1, 2, 3 (cluster.hosts (2) x "
     "workload.nproc_per_node (2) = 4 ranks)"),
    ({"kind": "nic_degrade", "hosts": [2], "factor": 0.5},
     "faults[0].hosts[0]: got 2; expected one of 0, 1 (cluster.hosts is 2)"),
    ({"kind": "slow_gpu", "ranks": [1, 1], "factor": 1.3},
     "faults[0].ranks[1]: rank 1 is already at [0]; list each rank once"),
    ({"kind": "slow_gpu", "ranks": [1], "factor": 0},
     "faults[0].factor: got 0; expected a number from 0.01 to 100.0"),
    ({"kind": "nic_degrade", "hosts": [1], "factor": -0.5},
     "faults[0].factor: got -0.5; expected a number from 0.01 to 100.0"),
    ({"kind": "slw_gpu", "ranks": [1]},
     'faults[0].kind: got "slw_gpu"; expected one of slow_gpu, nic_degrade, link_down; did '
     'you mean "slow_gpu"?'),
    ({"ranks": [1]}, "faults[0].kind: required key missing; add it (slow_gpu, nic_degrade or "
                     "link_down)"),
    ({"kind": "link_down", "link": "rail0-spine1", "at": 20},
     'faults[0].at: got 20; expected a duration with a unit, e.g. "500ns" or "1us"'),
    ({"kind": "link_down", "link": "rail0-spine1", "when": "1ms"},
     "faults[0].when: unknown key; remove it or fix its spelling (allowed: kind, link, at)"),
])
def test_a_bad_fault_names_its_key_and_what_is_valid(tmp_path: Path, fault: dict[str, Any],
                                                     expected: str) -> None:
    data, source = script_scenario(tmp_path, [fault])
    assert problem(data, source) == expected


def test_a_rank_or_host_takes_one_fault_of_a_kind(tmp_path: Path) -> None:
    data, source = script_scenario(tmp_path, [
        {"kind": "slow_gpu", "ranks": [0, 2], "factor": 1.3},
        {"kind": "slow_gpu", "ranks": [2], "factor": 2.0}])
    assert problem(data, source) == ("faults[1].ranks[0]: rank 2 is already in faults[0]; give "
                                     "each rank one fault of a kind")


def test_slow_gpu_needs_a_script() -> None:
    assert problem(scenario([{"kind": "slow_gpu", "ranks": [0], "factor": 1.3}])) == (
        "faults[0]: slow_gpu slows a training script's kernels, but workload.collectives runs "
        "none; remove this fault or run a workload.script")


@pytest.mark.parametrize("fault", [{"kind": "nic_degrade", "hosts": [0], "factor": 0.5},
                                   {"kind": "link_down", "link": "rail0-spine0"}])
def test_network_faults_need_a_fabric(fault: dict[str, Any]) -> None:
    assert problem(scenario([fault], hosts=1)) == (
        f"faults[0]: {fault['kind']} needs a fabric between hosts, but cluster.hosts is 1 (its "
        "GPUs talk over NVLink); remove this fault or raise cluster.hosts to 2 or more")


def test_an_unknown_link_lists_the_fabric_links() -> None:
    message = problem(scenario([{"kind": "link_down", "link": "rail0-spine9"}]))
    assert message == ('faults[0].link: got "rail0-spine9", which names no link of the '
                       "topology; expected a switch-to-switch link: rail0-spine0, "
                       "rail0-spine1, rail1-spine0, rail1-spine1")


def test_a_long_link_list_is_cut_and_a_near_name_suggested() -> None:
    message = problem(scenario([{"kind": "link_down", "link": "pod0/edg0-pod0/agg1"}],
                                       hosts=8, topology="fat-tree"))
    assert "link: pod0/edge0-pod0/agg0, pod0/edge0-pod0/agg1, " in message
    assert message.endswith(', ... (32 in all); did you mean "pod0/edge0-pod0/agg1"?')


def test_a_nic_link_cannot_fail() -> None:
    message = problem(scenario([{"kind": "link_down", "link": "rail1-host1/gpu1"}]))
    assert message.startswith('faults[0].link: got "rail1-host1/gpu1", which is a nic link, '
                              "which cuts its GPU off; expected a switch-to-switch link: "
                              "rail0-spine0, ")


def test_a_fabric_without_spines_has_no_link_to_fail() -> None:
    message = problem(scenario([{"kind": "link_down", "link": "leaf0-spine0"}],
                                       topology="leaf-spine", hosts_per_leaf=2))
    assert message.endswith("the leaf-spine fabric has no switch-to-switch links (no spine "
                            "layer), so any link down cuts GPUs off; remove this fault")


def test_failures_that_cut_hosts_apart_name_the_link_that_does_it() -> None:
    message = problem(scenario([
        {"kind": "link_down", "link": "leaf0-spine1", "at": "2ms"},
        {"kind": "link_down", "link": "spine0-leaf0", "at": "1ms"}],
        topology="leaf-spine", hosts_per_leaf=1))
    assert message.startswith("faults[0].link: link(s) leaf0-spine0, leaf0-spine1 down cut")
    assert message.endswith("a link_down must leave a path between every two hosts: take "
                            "down another link, or add spines")


def test_a_link_fails_once() -> None:
    message = problem(scenario([{"kind": "link_down", "link": "rail0-spine1"},
                                        {"kind": "link_down", "link": "spine1-rail0"}]))
    assert message == ("faults[1].link: spine1-rail0 already goes down in faults[0] and stays "
                       "down; list each link once")


# -- the topology ---------------------------------------------------------------------------------

def test_degraded_nics_run_at_their_rate_and_nccl_plans_with_the_slowest() -> None:
    resolved = parse_scenario(scenario([{"kind": "nic_degrade", "hosts": [1], "factor": 0.5}]),
                              SOURCE)
    topology = build_topology(resolved.cluster, resolved.faults)
    degraded = nics_of_hosts(topology, {1})
    assert [topology.links[link].gbps for link in degraded] == [200.0, 200.0]
    assert {link.gbps for index, link in enumerate(topology.links)
            if link.kind is not LinkKind.NVLINK and index not in degraded} == {400.0}
    assert SystemInfo.from_topology(topology, lookup_gpu("h100")).nic_gbps == 200.0


def test_link_failures_come_in_the_backends_form() -> None:
    resolved = parse_scenario(scenario([{"kind": "link_down", "link": "spine1-rail0",
                                         "at": "20ms"}]), SOURCE)
    topology = build_topology(resolved.cluster)
    assert link_failures(resolved, topology) == (
        LinkFailure(topology.link_named("rail0-spine1"), 20_000_000),)  # type: ignore[arg-type]


@pytest.mark.parametrize("network", [{"backend": "flow"}, {"transport": "roce"},
                                     {"transport": "dctcp"}], ids=lambda n: str(*n.values()))
def test_the_failure_counters_are_what_the_backends_add_with_failures(
        network: dict[str, str]) -> None:
    keys = []
    for faults in ([], [{"kind": "link_down", "link": "rail0-spine1"}]):
        resolved = parse_scenario(scenario(faults, **network), SOURCE)
        topology = build_topology(resolved.cluster)
        backend = make_backend(topology, resolved.cluster.network, 0,
                               link_failures(resolved, topology))
        keys.append(set(backend.stats().extra))
        backend.close()
    added = {key.removeprefix("inter.") for key in keys[1] - keys[0]}
    assert added and added <= FAILURE_COUNTERS


# -- the engine -------------------------------------------------------------------------------------

def test_slow_gpu_stretches_the_ranks_kernels_and_counts_what_it_added() -> None:
    def script(r: ScriptedRank) -> None:
        r.kernel(1000)
        r.kernel(333)
        r.collective("all_reduce", [0, 1], 4096)
        r.sync()

    result = run([script, script], kernel_scale={1: 1.5}).result
    ends = {rank.rank: rank.gpu_end_ns for rank in result.ranks}
    spans = [(k.rank, k.end_ns - k.start_ns) for k in result.kernels]
    assert spans == [(0, 1000), (0, 333), (1, 1500), (1, 500)]
    assert result.scaled_kernel_ns == {1: 667}
    assert ends[0] == ends[1]  # the all_reduce waited for the slow rank


def engine(classes: RankClasses, kernel_scale: dict[int, float]) -> LiveEngine:
    """An engine for ``classes``' live ranks (not run)."""
    topology = make_topology(classes.world)
    return LiveEngine(topology, SystemInfo.from_topology(topology, lookup_gpu("h100")),
                      NcclConfig(), FluidBackend(topology),
                      {rank: Pipe()[0] for rank in classes.live_ranks()},
                      list(range(classes.world)), classes=classes, kernel_scale=kernel_scale)


@pytest.mark.parametrize(("slowed", "expected"), [
    (1, "slow_gpu slows rank 1, which mirrors rank 0's timeline under rank deduplication"),
    (0, "slow_gpu slows rank 0, which lends its timeline to 2 mirrored ranks under rank "
        "deduplication"),
])
def test_a_slowed_rank_may_not_share_a_timeline(slowed: int, expected: str) -> None:
    classes = RankClasses(1, 4, 1)  # rank 0 live, 1 and 2 mirror it, 3 its witness
    with pytest.raises(SimulationError) as caught:
        engine(classes, {slowed: 1.3})
    assert str(caught.value).startswith(expected)
    assert str(caught.value).endswith("record the run with simulation.dedup: off, then "
                                      "replay it")
    engine(classes, {3: 1.3})  # the witness keeps a timeline of its own


# -- summary rows -------------------------------------------------------------------------------------

def test_fault_rows_say_what_each_fault_did(tmp_path: Path) -> None:
    data, source = script_scenario(tmp_path, [
        {"kind": "slow_gpu", "ranks": [3], "factor": 1.3},
        {"kind": "nic_degrade", "hosts": [1], "factor": 0.5},
        {"kind": "link_down", "link": "rail0-spine1", "at": "20ms"}])
    resolved: Scenario = parse_scenario(data, source)
    topology = build_topology(resolved.cluster, resolved.faults)
    flows = [FlowSpec(0, 2, 100, 0), FlowSpec(3, 1, 20, 0), FlowSpec(0, 1, 5000, 0),
             FlowSpec(2, 3, 7000, 0)]
    rows = fault_rows(resolved.faults, topology, flows, {3: 1_500_000},
                      {"inter.link_failures": 1, "inter.rerouted_connections": 4,
                       "inter.rate_computations": 9, "intra.flows_rated": 3})
    assert rows[0]["gpu_ns_added"] == {"3": 1_500_000}
    assert rows[1]["bytes_through_nics"] == 120  # host 1 is GPUs 2 and 3; NVLink flows not
    assert rows[2]["network"] == {"link_failures": 1, "rerouted_connections": 4}
    assert fault_lines(rows) == [
        "fault slow_gpu x1.3: GPU time rank 3 +1.500 ms",
        "fault nic_degrade x0.5 on host(s) 1: NICs 400 -> 200 Gbps, 0.000 GB through them",
        "fault link_down rail0-spine1 at 20.000 ms: link_failures 1, rerouted_connections 4"]

