"""A link that goes down mid-run: partition checks, routing around failed links, and both
network backends (fluid, ns-3 RoCE and DCTCP) rerouting live connections without losing a flow.

Fabric: rail-optimized, 2 hosts of 2 GPUs, 2 spines, 100 Gbps everywhere, 1000 ns per link.
GPU 0 of each host sits on rail0, GPU 1 on rail1. Cross-rail flows from both rail0 GPUs climb
rail0's two spine uplinks, so failing ``rail0-spine1`` halves their cross-section; same-rail
flows never leave their rail switch, so for them that link is one nobody uses.
"""

from collections.abc import Sequence

import pytest

from hwmodel.errors import BackendError
from phantora.cluster.topology import HostSpec, Topology, leaf_spine, rail_optimized
from phantora.network.base import LinkFailure, NetworkBackend
from phantora.network.flow import FluidBackend
from phantora.network.flow.routing import ecmp_key
from phantora.network.roce_presets import preset

from .test_ns3_backend import ns3_config, ns3_test, run_until_idle

HOST = HostSpec(gpus_per_host=2, nvlink_gbps=240.0, nvlink_latency_ns=100, nic_gbps=100.0)
TAGS = range(4)
FLOW_BYTES = 1_000_000
FAIL_AT_NS = 30_000
"""Mid-transfer: 8 MB over rail0's 200 Gbps of uplinks take at least 320 us."""


def rail() -> Topology:
    return rail_optimized(HOST, hosts=2, spines=2, link_gbps=100.0, latency_ns=1000)


def gpu(host: int, local: int) -> int:
    return host * HOST.gpus_per_host + local


CROSS_RAIL = [(gpu(0, 0), gpu(1, 1)), (gpu(1, 0), gpu(0, 1))]
"""Both sources on rail0, both destinations on rail1: every flow crosses a spine."""
SAME_RAIL = [(gpu(0, 0), gpu(1, 0)), (gpu(1, 1), gpu(0, 1))]


def spine_uplink(topology: Topology) -> int:
    link = topology.link_named("rail0-spine1")
    assert link is not None
    return link


def start_flows(backend: NetworkBackend, pairs: Sequence[tuple[int, int]],
                start_ns: int = 0) -> list[int]:
    return [backend.add_flow(src, dst, FLOW_BYTES, start_ns, tag=tag)
            for src, dst in pairs for tag in TAGS]


def fluid_ends(pairs: Sequence[tuple[int, int]],
               failures: Sequence[LinkFailure] = ()) -> dict[int, int]:
    backend = FluidBackend(rail(), "inter", failures)
    ids = start_flows(backend, pairs)
    ends = run_until_idle(backend)
    assert sorted(ends) == ids  # no flow lost
    return ends


# -- topology ------------------------------------------------------------------------------

def test_partition_by_nic_link_cuts_its_gpu() -> None:
    topology = rail()
    message = topology.partition_by([topology.nic_of(gpu(1, 1))])
    assert message is not None
    assert "host1/gpu1-rail1" in message and "host1/gpu1" in message


def test_partition_by_one_of_two_spine_uplinks_does_not() -> None:
    topology = rail()
    assert topology.partition_by([spine_uplink(topology)]) is None
    assert topology.partition_by([]) is None


def test_partition_by_all_uplinks_of_a_leaf_or_rail() -> None:
    spine_leaf = leaf_spine(HOST, hosts=2, hosts_per_leaf=1, spines=2, link_gbps=100.0,
                            latency_ns=1000)
    uplinks = [spine_leaf.link_named(f"leaf0-spine{i}") for i in range(2)]
    message = spine_leaf.partition_by([link for link in uplinks if link is not None])
    assert message is not None and "leaf0-spine0, leaf0-spine1" in message
    topology = rail()
    message = topology.partition_by([topology.link_named("rail0-spine0"), spine_uplink(topology)])
    assert message is not None and "host0/gpu1" in message and "host1/gpu1" in message


def test_partition_by_nvlink_is_refused() -> None:
    topology = rail()
    message = topology.partition_by([topology.nvlink_of(0)])
    assert message is not None and "NVLink" in message


def test_fabric_path_avoids_down_links_and_keeps_healthy_paths() -> None:
    topology = rail()
    down = frozenset({spine_uplink(topology)})
    src, dst = CROSS_RAIL[0]
    keys = [ecmp_key(topology, src, dst, tag) for tag in range(16)]
    healthy = [topology.fabric_path(src, dst, key) for key in keys]
    assert any(spine_uplink(topology) in path for path in healthy)
    assert all(spine_uplink(topology) not in topology.fabric_path(src, dst, key, down)
               for key in keys)
    assert [topology.fabric_path(src, dst, key) for key in keys] == healthy


# -- input checks (before any backend state, ns-3 included) ---------------------------------

def bad_failures(topology: Topology) -> list[tuple[str, list[LinkFailure]]]:
    uplink = spine_uplink(topology)
    return [
        ("not a link", [LinkFailure(len(topology.links), 10)]),
        ("at_ns", [LinkFailure(uplink, -1)]),
        ("fails twice", [LinkFailure(uplink, 10), LinkFailure(uplink, 20)]),
        ("NVLink", [LinkFailure(topology.nvlink_of(0), 10)]),
        ("host0/gpu0", [LinkFailure(topology.nic_of(0), 10)]),
    ]


@pytest.mark.parametrize("case", range(5))
def test_bad_failures_are_refused_by_both_backends(case: int) -> None:
    topology = rail()
    expected, failures = bad_failures(topology)[case]
    with pytest.raises(BackendError, match=expected):
        FluidBackend(topology, "inter", failures)
    from phantora.network.ns3 import Ns3Backend

    with pytest.raises(BackendError, match=expected):  # raised before ns-3 is touched
        Ns3Backend(topology, ns3_config(), failures=failures)


# -- fluid backend -------------------------------------------------------------------------

def test_fluid_failure_reroutes_live_flows_and_none_is_lost() -> None:
    topology = rail()
    failure = LinkFailure(spine_uplink(topology), FAIL_AT_NS)
    healthy = fluid_ends(CROSS_RAIL)
    failed = fluid_ends(CROSS_RAIL, [failure])
    assert all(failed[flow] >= healthy[flow] for flow in healthy)
    assert max(failed.values()) > max(healthy.values())
    assert failed == fluid_ends(CROSS_RAIL, [failure])  # deterministic


def test_fluid_stops_at_the_failure_and_later_connections_avoid_the_link() -> None:
    topology = rail()
    uplink = spine_uplink(topology)
    backend = FluidBackend(topology, "inter", [LinkFailure(uplink, FAIL_AT_NS)])
    start_flows(backend, CROSS_RAIL)
    assert backend.next_event_ns() == FAIL_AT_NS
    assert backend.advance_to(FAIL_AT_NS) == [] and backend.now_ns() == FAIL_AT_NS
    late = [(src, dst, tag) for src, dst in CROSS_RAIL for tag in range(4, 12)]
    assert any(uplink in topology.fabric_path(src, dst, ecmp_key(topology, src, dst, tag))
               for src, dst, tag in late)
    for src, dst, tag in late:
        backend.add_flow(src, dst, FLOW_BYTES, FAIL_AT_NS + 1000, tag)
    run_until_idle(backend)
    crossing = {2 * uplink, 2 * uplink + 1}
    routes = [connection.route.resources for connection in backend._connections.values()]
    assert all(crossing.isdisjoint(resources) for resources in routes)
    extra = backend.stats().extra
    assert extra["link_failures"] == 1 and extra["rerouted_connections"] > 0


def test_fluid_failure_while_idle_reroutes_idle_connections() -> None:
    topology = rail()
    uplink = spine_uplink(topology)
    idle_at_ns = 10_000_000
    backend = FluidBackend(topology, "inter", [LinkFailure(uplink, idle_at_ns)])
    start_flows(backend, CROSS_RAIL)
    run_until_idle(backend)  # done before the failure
    assert backend.now_ns() < idle_at_ns and backend.next_event_ns() is None
    backend.advance_to(idle_at_ns + 1)
    assert backend.stats().extra["link_failures"] == 1
    start_flows(backend, CROSS_RAIL, idle_at_ns + 1)
    run_until_idle(backend)
    routes = [connection.route.resources for connection in backend._connections.values()]
    assert all({2 * uplink, 2 * uplink + 1}.isdisjoint(resources) for resources in routes)


def test_fluid_failure_of_an_unused_link_changes_nothing() -> None:
    failure = LinkFailure(spine_uplink(rail()), FAIL_AT_NS)
    assert fluid_ends(SAME_RAIL, [failure]) == fluid_ends(SAME_RAIL)


# -- ns-3 backend --------------------------------------------------------------------------

TRANSPORTS = pytest.mark.parametrize("transport", ["roce", "dctcp"])


def ns3_run(transport: str, pairs: Sequence[tuple[int, int]],
            failures: Sequence[LinkFailure] = (),
            start_ns: int = 0) -> tuple[dict[int, int], dict[str, int | float | str]]:
    from phantora.network.ns3 import Ns3Backend

    roce = preset("simai", HOST.nic_gbps) if transport == "roce" else None
    with Ns3Backend(rail(), ns3_config(transport=transport, roce=roce), failures) as backend:
        ids = start_flows(backend, pairs, start_ns)
        ends = run_until_idle(backend)
        extra = backend.stats().extra
    assert sorted(ends) == ids  # no flow lost
    return ends, extra


@ns3_test
@TRANSPORTS
def test_ns3_failure_mid_transfer_loses_no_flow_and_slows_them(transport: str) -> None:
    failure = LinkFailure(spine_uplink(rail()), FAIL_AT_NS)
    healthy, _ = ns3_run(transport, CROSS_RAIL)
    failed, extra = ns3_run(transport, CROSS_RAIL, [failure])
    assert all(failed[flow] >= healthy[flow] for flow in healthy)
    assert max(failed.values()) > max(healthy.values())
    assert extra["link_failures"] == 1
    assert extra["drops"] == 0
    if transport == "roce":
        assert extra["drained_packets"] > 0 and extra["changed_routes"] > 0
        assert extra["reordered_packets"] > 0  # the new path overtook the draining one
    else:
        assert extra["link_down_drops"] > 0 and extra["retransmissions"] > 0


@ns3_test
@TRANSPORTS
def test_ns3_flows_started_after_the_failure_never_cross_the_link(transport: str) -> None:
    failure = LinkFailure(spine_uplink(rail()), 1000)
    _, extra = ns3_run(transport, CROSS_RAIL, [failure], start_ns=2000)
    if transport == "roce":
        assert extra["drained_packets"] == 0  # nothing left through the down ports
    else:
        assert extra["link_down_drops"] == 0 and extra["retransmissions"] == 0


@ns3_test
@TRANSPORTS
def test_ns3_failure_of_an_unused_link_changes_nothing(transport: str) -> None:
    failure = LinkFailure(spine_uplink(rail()), FAIL_AT_NS)
    assert ns3_run(transport, SAME_RAIL, [failure])[0] == ns3_run(transport, SAME_RAIL)[0]


@ns3_test
@TRANSPORTS
def test_ns3_failure_runs_are_deterministic(transport: str) -> None:
    failure = LinkFailure(spine_uplink(rail()), FAIL_AT_NS)
    (first, first_extra), (again, again_extra) = (ns3_run(transport, CROSS_RAIL, [failure])
                                                  for _ in range(2))
    assert first == again
    assert first_extra["events"] == again_extra["events"]
