"""Rail mirroring (phantora.network.mirror) gives the completions of simulating every rail.

Ring-like rounds of flows on a small rail-optimized fabric (4 hosts x 4 GPUs), each round
starting when the previous one ended, run on the wrapped backend alone and mirrored: identical
rails are simulated once, rails that start differing split off (a restart), a flow across
rails falls back to every rail, a one-rail flow while the others idle stays solo. The fluid
backend is the cheap inner model; one case runs on ns-3 RoCE and checks counters too.
"""

import importlib.util
from collections.abc import Callable
from dataclasses import replace

import pytest

from phantora.cluster.topology import HostSpec, Topology, leaf_spine, rail_optimized
from phantora.network.base import NetworkBackend
from phantora.network.flow import FluidBackend
from phantora.network.mirror import APPROXIMATE_SIZE_TOLERANCE, RailMirrorBackend, rail_mirrored
from phantora.network.rails import find_rails

from .test_ns3_backend import ns3_config

HOSTS = 4
RAILS = 4
HOST = HostSpec(gpus_per_host=RAILS, nvlink_gbps=3600.0, nvlink_latency_ns=100, nic_gbps=400.0)

Flow = tuple[int, int, int, int]
"""(src GPU, dst GPU, bytes, tag)."""


def rails_fabric() -> Topology:
    return rail_optimized(HOST, hosts=HOSTS, spines=2, link_gbps=400.0, latency_ns=500)


def ring(sizes: list[int]) -> list[Flow]:
    """Every rail's ring of hosts, rail ``r`` moving ``sizes[r]`` bytes per hop."""
    return [(host * RAILS + rail, (host + 1) % HOSTS * RAILS + rail, sizes[rail], rail)
            for rail in range(RAILS) for host in range(HOSTS)]


def run(backend: NetworkBackend, rounds: list[list[Flow]]) -> dict[tuple[int, Flow], int]:
    """Each round's flows start 100 ns after the previous round ended; their ends by round."""
    ends: dict[tuple[int, Flow], int] = {}
    start = 0
    for index, flows in enumerate(rounds):
        ids = {backend.add_flow(src, dst, nbytes, start + 100, tag): (src, dst, nbytes, tag)
               for src, dst, nbytes, tag in flows}
        while ids:
            for done in backend.advance_to(2**62):
                ends[index, ids.pop(done.flow_id)] = done.end_ns
                start = max(start, done.end_ns)
    backend.close()
    return ends


def fluid(topology: Topology) -> Callable[[], NetworkBackend]:
    return lambda: FluidBackend(topology, scope="inter")


def mirrored(topology: Topology, approximate: bool = False) -> RailMirrorBackend:
    rails, _ = find_rails(topology)
    return RailMirrorBackend(rails, fluid(topology), approximate)


def test_rails_of_a_rail_fabric_and_none_elsewhere() -> None:
    rails, _ = find_rails(rails_fabric())
    assert rails is not None and rails.count == RAILS
    assert rails.rail_of[:RAILS + 1] == (0, 1, 2, 3, 0) and rails.host_of[RAILS] == 1
    rails, why = find_rails(leaf_spine(HOST, hosts=HOSTS, hosts_per_leaf=1, spines=2,
                                       link_gbps=100.0, latency_ns=500))
    assert rails is None and "no rails" in why


def test_a_slow_host_keeps_the_rails_but_not_the_two_host_rings() -> None:
    topology = rails_fabric()
    for gpu in range(RAILS):  # host 0's NICs at half rate, on every rail alike
        nic = topology.nic_of(gpu)
        topology.links[nic] = replace(topology.links[nic], gbps=200.0)
    rails, _ = find_rails(topology)
    assert rails is not None and not rails.alike_hosts
    backend = rail_mirrored(topology, fluid(topology), "approximate")
    rounds = [ring([1_000_000] * RAILS)]
    assert run(backend, rounds) == run(fluid(topology)(), rounds)
    assert "symmetry.ring_hosts_simulated" not in backend.stats().extra


def test_identical_rails_are_simulated_once() -> None:
    topology = rails_fabric()
    rounds = [ring([1_000_000] * RAILS), ring([2_000_000] * RAILS), ring([1_000_000] * RAILS)]
    backend = mirrored(topology)
    assert run(backend, rounds) == run(fluid(topology)(), rounds)
    extra = backend.stats().extra
    assert extra["symmetry"] == "mirrored" and extra["symmetry.rails_simulated"] == 1
    assert extra["symmetry.flows_mirrored"] == 3 * HOSTS * (RAILS - 1)
    assert extra["symmetry.restarts"] == 0


def test_rails_that_differ_split_off_and_stay_exact() -> None:
    topology = rails_fabric()
    rounds = [ring([1_000_000] * RAILS), ring([2_000_000] * 2 + [1_999_000] * 2),
              ring([1_000_000] * RAILS)]
    backend = mirrored(topology)
    assert run(backend, rounds) == run(fluid(topology)(), rounds)
    extra = backend.stats().extra
    assert extra["symmetry.rails_simulated"] == 2 and extra["symmetry.restarts"] == 1
    assert extra["symmetry.restart_divergent_flows"] == 0
    assert "rails [2, 3] left rail 0's class" in str(extra["symmetry.splits"])


def test_approximate_mirrors_sizes_within_tolerance() -> None:
    topology = rails_fabric()
    rounds = [ring([2_000_000] * 2 + [1_999_000] * 2)]
    backend = mirrored(topology, approximate=True)
    got, want = run(backend, rounds), run(fluid(topology)(), rounds)
    assert backend.stats().extra["symmetry.rails_simulated"] == 1
    assert all(abs(got[key] - end) <= APPROXIMATE_SIZE_TOLERANCE * end
               for key, end in want.items())


def test_a_flow_across_rails_falls_back_to_every_rail() -> None:
    topology = rails_fabric()
    rounds = [ring([1_000_000] * RAILS), [(0, RAILS + 1, 5_000, 9)], ring([1_000_000] * RAILS)]
    backend = mirrored(topology)
    assert run(backend, rounds) == run(fluid(topology)(), rounds)
    extra = backend.stats().extra
    assert extra["symmetry"] == "full" and "crosses rails" in str(extra["symmetry.fallback"])
    assert extra["symmetry.bytes_simulated_share"] == 1.0


def test_one_rail_alone_splits_it_off_unless_approximate() -> None:
    topology = rails_fabric()
    rounds = [ring([1_000_000] * RAILS), [(0, RAILS, 5_000, 9)], ring([1_000_000] * RAILS)]
    want = run(fluid(topology)(), rounds)
    exact = mirrored(topology)
    assert run(exact, rounds) == want
    assert exact.stats().extra["symmetry.rails_simulated"] == 2
    approximate = mirrored(topology, approximate=True)
    assert run(approximate, rounds) == want  # the solo flow holds no mirrored flow up
    extra = approximate.stats().extra
    assert extra["symmetry.flows_solo"] == 1 and extra["symmetry.rails_simulated"] == 1


def test_a_fabric_without_rails_simulates_everything_and_says_why() -> None:
    topology = leaf_spine(HOST, hosts=HOSTS, hosts_per_leaf=1, spines=2, link_gbps=100.0,
                          latency_ns=500)
    backend = rail_mirrored(topology, fluid(topology), "auto")
    rounds = [ring([1_000_000] * RAILS)]
    assert run(backend, rounds) == run(fluid(topology)(), rounds)
    assert "no rails" in str(backend.stats().extra["symmetry.fallback"])


@pytest.mark.ns3
@pytest.mark.skipif(importlib.util.find_spec("ns3") is None, reason="needs the ns3 package")
def test_ns3_roce_mirrored_equals_every_rail_with_counters() -> None:
    from phantora.network.ns3 import Ns3Backend
    from phantora.network.roce_presets import preset

    topology = rails_fabric()
    config = ns3_config(transport="roce", roce=preset("simai", HOST.nic_gbps))
    rounds = [ring([1_000_000] * RAILS), ring([3_000_000] * RAILS)]
    full = Ns3Backend(topology, config)
    want = run(full, rounds)
    full_extra = full.stats().extra
    backend = rail_mirrored(topology, lambda: Ns3Backend(topology, config), "auto")
    assert run(backend, rounds) == want
    extra = backend.stats().extra
    for key in ("data_packets", "packet_hops", "queue_pairs"):
        assert extra[key] == full_extra[key]
    assert int(extra["events"]) < int(full_extra["events"]) / 2
    approximate = rail_mirrored(topology, lambda: Ns3Backend(topology, config), "approximate")
    got = run(approximate, rounds)
    assert all(abs(got[key] - end) <= 1e-3 * end for key, end in want.items())
    extra = approximate.stats().extra
    assert extra["symmetry.ring_hosts_simulated"] == 2
    assert abs(int(extra["data_packets"]) - int(full_extra["data_packets"])) <= \
        0.1 * int(full_extra["data_packets"])


def test_approximate_runs_rings_on_two_hosts() -> None:
    topology = rails_fabric()
    rounds = [ring([1_000_000] * RAILS), [(0, RAILS, 5_000, 9)], ring([2_000_000] * RAILS)]
    backend = rail_mirrored(topology, fluid(topology), "approximate")
    assert run(backend, rounds) == run(fluid(topology)(), rounds)
    extra = backend.stats().extra
    assert extra["symmetry.ring_hosts_simulated"] == 2 and extra["symmetry.rings_broken"] == ""
    assert extra["symmetry.flows_host_mirrored"] == 2 * (HOSTS - 2)
    assert extra["symmetry.flows_on_own_hosts"] == 1


def test_a_rail_whose_flows_stop_being_rings_simulates_every_host() -> None:
    topology = rails_fabric()
    later = [(rail, 2 * RAILS + rail, 500_000, 9) for rail in range(RAILS)]  # while rings run

    def flows(backend: NetworkBackend) -> dict[int, int]:
        for src, dst, nbytes, tag in ring([1_000_000] * RAILS):
            backend.add_flow(src, dst, nbytes, 100, tag)
        backend.advance_to(200)
        for src, dst, nbytes, tag in later:
            backend.add_flow(src, dst, nbytes, 200, tag)
        ends = {done.flow_id: done.end_ns for _ in range(len(later) + HOSTS * RAILS)
                for done in backend.advance_to(2**62)}
        backend.close()
        return ends

    backend = rail_mirrored(topology, fluid(topology), "approximate")
    assert flows(backend) == flows(fluid(topology)())
    extra = backend.stats().extra
    assert "no ring" in str(extra["symmetry.rings_broken"]) and extra["symmetry.restarts"] == 1
