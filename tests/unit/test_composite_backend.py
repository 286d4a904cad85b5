"""CompositeBackend: routing by host, id mapping, and both parts kept on one clock.

Same topology numbers as test_flow_backend: NVLink 30 B/ns with 200 ns per same-host route,
NICs 10 B/ns with 4000 ns per cross-host route.
"""

import random

import pytest

from hwmodel.errors import BackendError
from phantora.cluster.topology import HostSpec, Topology, leaf_spine, single_host
from phantora.network.composite import CompositeBackend
from phantora.network.flow import FluidBackend

INTRA_LATENCY_NS = 200
INTER_LATENCY_NS = 4000
HOST = HostSpec(gpus_per_host=2, nvlink_gbps=240.0, nvlink_latency_ns=100, nic_gbps=80.0)


def cluster(hosts: int = 2) -> Topology:
    return leaf_spine(HOST, hosts=hosts, hosts_per_leaf=1, spines=2, link_gbps=160.0,
                      latency_ns=1000)


class Parts:
    """A composite of two fluid backends, with the parts kept for inspection."""

    def __init__(self, topology: Topology) -> None:
        self.intra = FluidBackend(topology, "intra")
        self.inter = FluidBackend(topology, "inter")
        self.backend = CompositeBackend(topology, self.intra, self.inter)

    def advance_to(self, t_ns: int) -> list[tuple[int, int]]:
        done = self.backend.advance_to(t_ns)
        assert self.intra.now_ns() == self.inter.now_ns() == self.backend.now_ns()
        return [(flow.flow_id, flow.end_ns) for flow in done]

    def run_all(self) -> dict[int, int]:
        ends: dict[int, int] = {}
        while (bound := self.backend.next_event_ns()) is not None:
            for flow_id, end_ns in self.advance_to(bound + 10**9):
                assert end_ns >= bound and flow_id not in ends
                ends[flow_id] = end_ns
        return ends


def test_flows_go_to_the_part_for_their_hosts() -> None:
    parts = Parts(cluster())
    ids = [parts.backend.add_flow(0, 1, 30_000, 0), parts.backend.add_flow(0, 2, 10_000, 0),
           parts.backend.add_flow(2, 3, 3_000, 0)]
    assert ids == [0, 1, 2]
    assert (parts.intra.stats().flows, parts.inter.stats().flows) == (2, 1)
    assert parts.run_all() == {0: 1000 + INTRA_LATENCY_NS, 1: 1000 + INTER_LATENCY_NS,
                               2: 100 + INTRA_LATENCY_NS}


def test_stops_at_the_earliest_completion_of_either_part() -> None:
    parts = Parts(cluster())
    inter = parts.backend.add_flow(0, 2, 1_000, 0)       # 100 ns + 4000 ns
    intra = parts.backend.add_flow(0, 1, 300_000, 0)     # 10,000 ns + 200 ns
    assert parts.advance_to(10**6) == [(inter, 100 + INTER_LATENCY_NS)]
    assert parts.advance_to(10**6) == [(intra, 10_000 + INTRA_LATENCY_NS)]
    assert parts.advance_to(10**6) == []
    assert parts.backend.now_ns() == 10**6


def test_reaches_target_across_internal_events_of_the_intra_part() -> None:
    # The intra flow's last byte leaves at 1000 ns (an internal event) but lands at 1200:
    # advancing to 1100 must get there with nothing completed instead of stopping at 1000.
    parts = Parts(cluster())
    parts.backend.add_flow(0, 1, 30_000, 0)
    parts.backend.add_flow(0, 2, 100_000, 0)
    assert parts.advance_to(1_100) == []
    assert parts.backend.now_ns() == 1_100


def test_simultaneous_completions_come_back_together_in_id_order() -> None:
    parts = Parts(cluster())
    inter = parts.backend.add_flow(0, 2, 10_000, 0)          # ends 1000 + 4000
    intra = parts.backend.add_flow(1, 0, 30_000, 3_800)      # ends 3800 + 1000 + 200
    assert parts.advance_to(10**6) == [(inter, 5_000), (intra, 5_000)]


def test_matches_one_fluid_backend_for_everything() -> None:
    rng = random.Random(5)
    topology = cluster(hosts=4)
    parts = Parts(topology)
    whole = FluidBackend(topology, "all")
    for _ in range(150):
        src, dst = rng.sample(range(topology.num_gpus), 2)
        args = (src, dst, rng.randrange(0, 100_000), rng.randrange(0, 30_000), rng.randrange(3))
        assert parts.backend.add_flow(*args) == whole.add_flow(*args)
    ends: dict[int, int] = {}
    while (bound := whole.next_event_ns()) is not None:
        ends.update((done.flow_id, done.end_ns) for done in whole.advance_to(bound + 10**9))
    assert parts.run_all() == ends


def test_start_in_the_past_and_backwards_advance_raise() -> None:
    parts = Parts(cluster())
    parts.advance_to(500)
    with pytest.raises(BackendError, match="before the backend's clock"):
        parts.backend.add_flow(0, 2, 10, 499)
    with pytest.raises(BackendError, match="before the backend's clock"):
        parts.backend.add_flow(0, 1, 10, 499)
    with pytest.raises(BackendError, match="never moves backwards"):
        parts.backend.advance_to(499)


def test_single_host_needs_no_inter_part() -> None:
    topology = single_host(HostSpec(4, 240.0, 100, 80.0))
    backend = CompositeBackend(topology, FluidBackend(topology, "intra"), None)
    flow = backend.add_flow(0, 3, 30_000, 0)
    assert backend.next_event_ns() == 1000  # the last byte leaves; it lands 200 ns later
    assert [(d.flow_id, d.end_ns) for d in backend.advance_to(10**6)] == [
        (flow, 1000 + INTRA_LATENCY_NS)]
    assert backend.next_event_ns() is None


def test_cross_host_flow_without_inter_part_raises() -> None:
    topology = cluster()
    backend = CompositeBackend(topology, FluidBackend(topology, "intra"), None)
    with pytest.raises(BackendError, match="no inter-host part"):
        backend.add_flow(0, 2, 10, 0)


def test_parts_must_start_on_the_same_clock() -> None:
    topology = cluster()
    late = FluidBackend(topology, "inter")
    late.advance_to(10)
    with pytest.raises(BackendError, match="different times"):
        CompositeBackend(topology, FluidBackend(topology, "intra"), late)


def test_stats_merge_both_parts() -> None:
    parts = Parts(cluster())
    parts.backend.add_flow(0, 1, 100, 0)
    parts.backend.add_flow(0, 2, 50, 0)
    parts.run_all()
    stats = parts.backend.stats()
    assert (stats.backend, stats.flows, stats.bytes) == ("flow+flow", 2, 150)
    assert stats.extra["intra.rate_computations"] == 1
    assert stats.extra["inter.rate_computations"] == 1


def test_close_closes_both_parts() -> None:
    parts = Parts(cluster())
    parts.backend.close()
    for part in (parts.intra, parts.inter):
        with pytest.raises(BackendError, match="closed"):
            part.add_flow(0, 1, 1, 0)
