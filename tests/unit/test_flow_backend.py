"""The fluid backend against hand-computed max-min cases and the NetworkBackend contract.

Topologies are chosen so the numbers are easy to check by hand: NVLink at 240 Gbps is 30 bytes
per ns per direction with 100 ns per link (200 ns per same-host route); the two-host fabric has
80 Gbps NICs (10 B/ns) and 1000 ns per link (4000 ns per cross-host route).
"""

import random

import numpy as np
import pytest

from hwmodel.errors import BackendError
from phantora.cluster.topology import HostSpec, Topology, leaf_spine, single_host
from phantora.network.base import NetworkBackend
from phantora.network.flow import FluidBackend, MaxMinSolver
from phantora.network.flow.routing import route

INTRA_LATENCY_NS = 200
INTER_LATENCY_NS = 4000


def one_host(gpus: int = 4) -> Topology:
    return single_host(HostSpec(gpus_per_host=gpus, nvlink_gbps=240.0, nvlink_latency_ns=100,
                                nic_gbps=80.0))


def two_hosts(spines: int = 2, spine_gbps: float = 160.0, hosts: int = 2) -> Topology:
    host = HostSpec(gpus_per_host=2, nvlink_gbps=240.0, nvlink_latency_ns=100, nic_gbps=80.0)
    return leaf_spine(host, hosts=hosts, hosts_per_leaf=1, spines=spines, link_gbps=spine_gbps,
                      latency_ns=1000)


def run_all(backend: NetworkBackend) -> dict[int, int]:
    """Drive ``backend`` to the end the way the engine does, checking the contract as it goes."""
    ends: dict[int, int] = {}
    while (bound := backend.next_event_ns()) is not None:
        before = backend.now_ns()
        assert bound >= before
        done = backend.advance_to(bound + 10**9)
        assert backend.now_ns() >= before
        for flow in done:
            assert flow.end_ns == backend.now_ns() >= bound
            assert flow.flow_id not in ends
            ends[flow.flow_id] = flow.end_ns
    return ends


# -- max-min solver ------------------------------------------------------------------------

@pytest.mark.parametrize("vectorise_from", [1, 10**9], ids=["numpy", "python"])
def test_three_flows_two_links_textbook(vectorise_from: int) -> None:
    # Link 0 (10) carries a and b, link 1 (20) carries a and c: a and b are stuck at 5 on
    # link 0; c takes what a leaves of link 1.
    solver = MaxMinSolver(np.array([10.0, 20.0]), vectorise_from_entries=vectorise_from)
    assert solver.rates([(0, 1), (0,), (1,)]) == [5.0, 5.0, 15.0]


@pytest.mark.parametrize("vectorise_from", [1, 10**9], ids=["numpy", "python"])
def test_three_bottleneck_levels(vectorise_from: int) -> None:
    # Link 0 (12) has 4 flows -> 3 each; link 1 (20) then gives 17 to its other flow;
    # link 2 (100) gives the rest to its own flow.
    solver = MaxMinSolver(np.array([12.0, 20.0, 100.0]), vectorise_from_entries=vectorise_from)
    rates = solver.rates([(0,), (0,), (0,), (0, 1), (1, 2), (2,)])
    assert rates == [3.0, 3.0, 3.0, 3.0, 17.0, 83.0]


def test_python_and_numpy_agree_and_are_max_min_fair() -> None:
    rng = random.Random(7)
    capacity = np.array([rng.uniform(1.0, 50.0) for _ in range(12)])
    small = MaxMinSolver(capacity, vectorise_from_entries=10**9)
    large = MaxMinSolver(capacity, vectorise_from_entries=1)
    for _ in range(200):
        paths = [tuple(rng.sample(range(12), rng.randint(1, 4))) for _ in range(rng.randint(1, 30))]
        rates = small.rates(paths)
        assert rates == large.rates(paths)
        load = np.zeros(12)
        for path, rate in zip(paths, rates, strict=True):
            load[list(path)] += rate
        assert np.all(load <= capacity * (1 + 1e-9))
        # Max-min: every flow crosses a saturated link on which no flow is faster.
        for path, rate in zip(paths, rates, strict=True):
            assert any(load[r] >= capacity[r] * (1 - 1e-9)
                       and all(other <= rate * (1 + 1e-9)
                               for p, other in zip(paths, rates, strict=True) if r in p)
                       for r in path)


# -- hand-computed timings -----------------------------------------------------------------

def test_single_flow_takes_size_over_rate_plus_route_latency() -> None:
    backend = FluidBackend(one_host(), "intra")
    flow = backend.add_flow(0, 1, 30_000, start_ns=500)
    assert run_all(backend) == {flow: 500 + 1000 + INTRA_LATENCY_NS}


def test_shared_and_separate_bottlenecks() -> None:
    # GPU0's NVLink up carries a, b, c (10 B/ns each); GPU3's down carries c and d, so d
    # gets the 20 B/ns c leaves. d ends first; that frees nothing a, b, c could use.
    backend = FluidBackend(one_host(), "intra")
    a, b, c = (backend.add_flow(0, dst, 30_000, 0) for dst in (1, 2, 3))
    d = backend.add_flow(1, 3, 30_000, 0)
    assert run_all(backend) == {a: 3200, b: 3200, c: 3200, d: 1500 + INTRA_LATENCY_NS}


def test_rates_rise_when_a_flow_leaves() -> None:
    # Two flows share GPU0's NVLink at 15 B/ns; the short one leaves at 400 ns and the long
    # one sends its last 24,000 bytes at 30 B/ns.
    backend = FluidBackend(one_host(), "intra")
    short = backend.add_flow(0, 1, 6_000, 0)
    long = backend.add_flow(0, 2, 30_000, 0)
    assert run_all(backend) == {short: 400 + INTRA_LATENCY_NS, long: 1200 + INTRA_LATENCY_NS}


def test_late_arrival_takes_its_share() -> None:
    backend = FluidBackend(one_host(), "intra")
    first = backend.add_flow(0, 1, 30_000, 0)
    second = backend.add_flow(0, 2, 3_000, 500)
    # first: 15,000 B alone by 500 ns, then 15 B/ns while second runs (200 ns, 3,000 B),
    # then its last 12,000 B at 30 B/ns.
    assert run_all(backend) == {second: 700 + INTRA_LATENCY_NS, first: 1100 + INTRA_LATENCY_NS}


def test_cross_host_route_latency_and_nic_bottleneck() -> None:
    backend = FluidBackend(two_hosts(), "inter")
    flow = backend.add_flow(0, 2, 10_000, 0)
    assert run_all(backend) == {flow: 1000 + INTER_LATENCY_NS}


def test_fabric_link_shared_by_two_nics() -> None:
    # One spine at 80 Gbps: both flows cross leaf0 -> spine and get 5 B/ns each.
    backend = FluidBackend(two_hosts(spines=1, spine_gbps=80.0), "inter")
    flows = [backend.add_flow(0, 2, 10_000, 0), backend.add_flow(1, 3, 10_000, 0)]
    assert run_all(backend) == {flow: 2000 + INTER_LATENCY_NS for flow in flows}


def test_scope_all_keeps_nvlink_and_fabric_apart() -> None:
    backend = FluidBackend(two_hosts(), "all")
    intra = backend.add_flow(0, 1, 30_000, 0)
    inter = backend.add_flow(0, 2, 10_000, 0)
    assert run_all(backend) == {intra: 1000 + INTRA_LATENCY_NS, inter: 1000 + INTER_LATENCY_NS}


def test_zero_byte_flow_completes_after_latency() -> None:
    backend = FluidBackend(two_hosts(), "all")
    intra = backend.add_flow(0, 1, 0, 50)
    inter = backend.add_flow(0, 2, 0, 50)
    assert run_all(backend) == {intra: 50 + INTRA_LATENCY_NS, inter: 50 + INTER_LATENCY_NS}


def test_empty_flow_over_zero_latency_completes_at_its_start() -> None:
    backend = FluidBackend(single_host(HostSpec(2, 240.0, 0, 80.0)), "intra")
    backend.advance_to(70)
    flow = backend.add_flow(0, 1, 0, 70)
    assert backend.next_event_ns() == 70
    assert [(d.flow_id, d.end_ns) for d in backend.advance_to(70)] == [(flow, 70)]
    assert backend.next_event_ns() is None


def test_fractional_transmission_time_rounds_up() -> None:
    backend = FluidBackend(one_host(), "intra")
    tiny = backend.add_flow(0, 1, 1, 0)
    odd = backend.add_flow(2, 3, 100, 0)  # 3.33 ns at 30 B/ns
    assert run_all(backend) == {tiny: 1 + INTRA_LATENCY_NS, odd: 4 + INTRA_LATENCY_NS}


def test_awkward_rates_always_terminate() -> None:
    # Prime sizes over 7 shared links in random order: every flow must complete, after its
    # start plus its latency, and the backend must not spin.
    rng = random.Random(3)
    backend = FluidBackend(one_host(gpus=8), "intra")
    starts = {}
    for _ in range(300):
        src, dst = rng.sample(range(8), 2)
        start = rng.randrange(0, 5_000)
        starts[backend.add_flow(src, dst, rng.choice([1, 7, 997, 65_537, 999_983]), start,
                                tag=rng.randrange(3))] = start
    ends = run_all(backend)
    assert ends.keys() == starts.keys()
    assert all(ends[flow] >= starts[flow] + INTRA_LATENCY_NS + 1 for flow in ends)


# -- connections ---------------------------------------------------------------------------

def test_same_connection_is_served_in_order() -> None:
    backend = FluidBackend(one_host(), "intra")
    first = backend.add_flow(0, 1, 3_000, 0, tag=5)
    second = backend.add_flow(0, 1, 3_000, 0, tag=5)
    # first alone at 30 B/ns (100 ns), then second (another 100 ns).
    assert run_all(backend) == {first: 100 + INTRA_LATENCY_NS, second: 200 + INTRA_LATENCY_NS}


def test_different_tags_run_in_parallel() -> None:
    backend = FluidBackend(one_host(), "intra")
    flows = [backend.add_flow(0, 1, 3_000, 0, tag=tag) for tag in (0, 1)]
    assert run_all(backend) == {flow: 200 + INTRA_LATENCY_NS for flow in flows}


def test_connection_order_follows_start_time_not_call_order() -> None:
    backend = FluidBackend(one_host(), "intra")
    later = backend.add_flow(0, 1, 3_000, 50)
    earlier = backend.add_flow(0, 1, 3_000, 10)
    assert run_all(backend) == {earlier: 110 + INTRA_LATENCY_NS, later: 210 + INTRA_LATENCY_NS}


def test_empty_message_waits_for_the_one_before_it() -> None:
    backend = FluidBackend(one_host(), "intra")
    data = backend.add_flow(0, 1, 3_000, 0)
    empty = backend.add_flow(0, 1, 0, 0)
    assert run_all(backend) == {data: 100 + INTRA_LATENCY_NS, empty: 100 + INTRA_LATENCY_NS}


# -- batching ------------------------------------------------------------------------------

def test_same_instant_flows_are_rated_once_and_complete_together() -> None:
    backend = FluidBackend(one_host(gpus=8), "intra")
    flows = [backend.add_flow(g, (g + 1) % 8, 30_000, 0) for g in range(8)]
    done = backend.advance_to(10**6)
    assert [(d.flow_id, d.end_ns) for d in done] == [(f, 1000 + INTRA_LATENCY_NS) for f in flows]
    stats = backend.stats().extra
    assert stats["rate_computations"] == 1
    assert stats["largest_batch_flows"] == len(flows)


def test_flows_added_at_a_completion_instant_share_one_computation() -> None:
    backend = FluidBackend(one_host(gpus=8), "intra")
    for g in range(8):
        backend.add_flow(g, (g + 1) % 8, 30_000, 0)
    done = backend.advance_to(10**6)
    assert len(done) == 8 and backend.now_ns() == 1000 + INTRA_LATENCY_NS
    for g in range(8):  # the next ring step, added the way the engine would
        backend.add_flow(g, (g + 1) % 8, 30_000, backend.now_ns())
    assert len(run_all(backend)) == 8
    # One computation per step: the transmission ends leave nothing to re-rate.
    assert backend.stats().extra["rate_computations"] == 2


def test_hosts_are_separate_components() -> None:
    backend = FluidBackend(two_hosts(hosts=4), "intra")
    backend.add_flow(0, 1, 30_000, 0)
    backend.advance_to(10)
    backend.add_flow(2, 3, 30_000, 10)
    run_all(backend)
    # The second host's arrival never re-rates the first host's flow.
    assert backend.stats().extra["flows_rated"] == 2


# -- contract ------------------------------------------------------------------------------

def test_start_before_now_raises() -> None:
    backend = FluidBackend(one_host(), "intra")
    backend.advance_to(1_000)
    with pytest.raises(BackendError, match="before the backend's clock"):
        backend.add_flow(0, 1, 10, 999)
    backend.add_flow(0, 1, 10, 1_000)


def test_advance_backwards_raises() -> None:
    backend = FluidBackend(one_host(), "intra")
    backend.advance_to(1_000)
    with pytest.raises(BackendError, match="never moves backwards"):
        backend.advance_to(999)


def test_advance_stops_at_first_completion_instant() -> None:
    backend = FluidBackend(one_host(), "intra")
    fast = backend.add_flow(0, 1, 3_000, 0)
    slow = backend.add_flow(2, 3, 30_000, 0)
    done = backend.advance_to(10**6)
    assert [(d.flow_id, d.end_ns) for d in done] == [(fast, 100 + INTRA_LATENCY_NS)]
    assert backend.now_ns() == 100 + INTRA_LATENCY_NS
    done = backend.advance_to(10**6)
    assert [(d.flow_id, d.end_ns) for d in done] == [(slow, 1000 + INTRA_LATENCY_NS)]


def test_advance_without_completion_reaches_target() -> None:
    backend = FluidBackend(one_host(), "intra")
    backend.add_flow(0, 1, 30_000, 0)
    assert backend.advance_to(1_100) == []  # transmission ended at 1000, bytes still in flight
    assert backend.now_ns() == 1_100
    assert backend.next_event_ns() == 1000 + INTRA_LATENCY_NS


def test_next_event_is_none_when_idle_and_a_lower_bound_otherwise() -> None:
    backend = FluidBackend(one_host(), "intra")
    assert backend.next_event_ns() is None
    backend.add_flow(0, 1, 30_000, 300)
    assert backend.next_event_ns() == 300
    run_all(backend)
    assert backend.next_event_ns() is None


@pytest.mark.parametrize(("src", "dst", "scope", "match"), [
    (0, 2, "intra", "cross-host flow"),
    (0, 1, "inter", "same-host flow"),
    (1, 1, "all", "to itself"),
    (0, 9, "all", "does not exist"),
])
def test_out_of_scope_flows_raise(src: int, dst: int, scope: str, match: str) -> None:
    backend = FluidBackend(two_hosts(), scope)  # type: ignore[arg-type]
    with pytest.raises(BackendError, match=match):
        backend.add_flow(src, dst, 10, 0)


def test_invalid_inputs_raise() -> None:
    with pytest.raises(BackendError, match="unknown fluid backend scope"):
        FluidBackend(one_host(), "nvlink")  # type: ignore[arg-type]
    backend = FluidBackend(one_host(), "intra")
    with pytest.raises(BackendError, match="sizes must be >= 0"):
        backend.add_flow(0, 1, -1, 0)
    backend.close()
    with pytest.raises(BackendError, match="closed"):
        backend.add_flow(0, 1, 1, 0)


def test_stats_count_flows_and_bytes() -> None:
    backend = FluidBackend(one_host(), "intra")
    backend.add_flow(0, 1, 100, 0)
    backend.add_flow(1, 2, 50, 10)
    stats = backend.stats()
    assert (stats.backend, stats.flows, stats.bytes) == ("flow", 2, 150)


def random_workload(backend: NetworkBackend, seed: int, gpus: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        src, dst = rng.sample(range(gpus), 2)
        backend.add_flow(src, dst, rng.randrange(0, 200_000), rng.randrange(0, 20_000),
                         tag=rng.randrange(4))


def test_same_inputs_give_same_outputs() -> None:
    results = []
    for _ in range(2):
        backend = FluidBackend(two_hosts(hosts=4, spines=2), "all")
        random_workload(backend, seed=11, gpus=8)
        results.append(run_all(backend))
    assert results[0] == results[1]
    assert len(results[0]) == 200


# -- ECMP ----------------------------------------------------------------------------------

def test_ecmp_path_is_deterministic_per_connection_and_spreads_over_tags() -> None:
    paths = {tag: route(two_hosts(spines=4), "inter", 0, 2, tag) for tag in range(32)}
    again = {tag: route(two_hosts(spines=4), "inter", 0, 2, tag) for tag in range(32)}
    assert paths == again
    assert len({p.resources for p in paths.values()}) > 1
    assert all(p.latency_ns == INTER_LATENCY_NS and len(p.resources) == 4 for p in paths.values())


def test_routes_cross_links_in_the_direction_of_travel() -> None:
    topology = two_hosts()
    there = route(topology, "inter", 0, 2, 0).resources
    back = route(topology, "inter", 2, 0, 0).resources
    # Opposite directions of the NICs: resource 2*link is a -> b, 2*link + 1 is b -> a.
    assert there[0] ^ 1 == back[-1] and there[-1] ^ 1 == back[0]
    up, down = route(topology, "intra", 0, 1, 0).resources
    assert up // 2 == topology.nvlink_of(0) and down // 2 == topology.nvlink_of(1)
    assert up % 2 != down % 2
