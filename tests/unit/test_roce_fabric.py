"""The RoCE transport of the ns-3 backend (PFC, ECN, DCQCN) on tiny fabrics, against closed
forms and known behaviour: line rate, lossless incast, loud failure on drops and deadlocks,
DCQCN's reaction and convergence, congestion spreading, determinism.

Framing (phantora.network.ns3.roce): a packet carries ``mtu - 44`` payload bytes and takes
``mtu + 38`` bytes of line time.
"""

import dataclasses
import math

import pytest

from hwmodel.errors import BackendError
from phantora.cluster.topology import (
    HostSpec,
    LinkKind,
    NodeKind,
    Topology,
    leaf_spine,
    rail_optimized,
)
from phantora.network.ns3.roce import ETHERNET_FRAMING_BYTES, ROCE_HEADER_BYTES
from phantora.network.roce_presets import PRESETS, RoceSettings, preset

from .test_ns3_backend import ns3_config, ns3_test, run_until_idle

GBPS = 100.0
LATENCY_NS = 1000
MTU = 9000
PAYLOAD = MTU - ROCE_HEADER_BYTES
FRAME = MTU + ETHERNET_FRAMING_BYTES
HOST = HostSpec(gpus_per_host=1, nvlink_gbps=3600.0, nvlink_latency_ns=100, nic_gbps=GBPS)


def star(hosts: int) -> Topology:
    """Every host's NIC on one switch (a single rail)."""
    return rail_optimized(HOST, hosts=hosts, spines=1, link_gbps=GBPS, latency_ns=LATENCY_NS)


def wire_ns(nbytes: int) -> float:
    """Line time of ``nbytes`` of payload, framing included."""
    packets = math.ceil(nbytes / PAYLOAD)
    return (nbytes + packets * (FRAME - PAYLOAD)) * 8 / GBPS


def settings(name: str = "simai", **overrides: object) -> RoceSettings:
    return dataclasses.replace(preset(name, GBPS), **overrides)  # type: ignore[arg-type]


PFC_ONLY = settings(congestion_control="none", buffer_bytes=1_000_000)
"""PFC without congestion control, with a buffer small enough to pause quickly."""


def run(topology: Topology, roce: RoceSettings, flows: list[tuple[int, int, int, int]],
        seed: int = 1) -> tuple[list[int], dict[str, object]]:
    """Run ``(src, dst, bytes, start_ns)`` flows; their end times and the backend's counters."""
    from phantora.network.ns3 import Ns3Backend

    with Ns3Backend(topology, ns3_config(transport="roce", roce=roce, seed=seed)) as backend:
        ids = [backend.add_flow(src, dst, nbytes, start, tag=i)
               for i, (src, dst, nbytes, start) in enumerate(flows)]
        ends = run_until_idle(backend)
        stats = backend.stats()
    return [ends[i] for i in ids], {**stats.extra, "hot_ports": stats.hot_ports}


@ns3_test
def test_one_queue_pair_runs_at_line_rate() -> None:
    """NIC -> switch -> NIC: the first frame's store-and-forward at the switch, then every
    frame back to back, plus two link latencies; ns-3 rounds each event up to a whole ns but
    the rounding never accumulates."""
    nbytes = 4 * 2**20
    (end,), stats = run(star(2), settings(), [(0, 1, nbytes, 0)])
    ideal = FRAME * 8 / GBPS + wire_ns(nbytes) + 2 * LATENCY_NS
    assert end == pytest.approx(ideal, abs=3)
    assert stats["ack_packets"] == stats["data_packets"] == math.ceil(nbytes / PAYLOAD)
    assert stats["drops"] == stats["pfc_pause_frames"] == stats["cnps"] == 0


@ns3_test
def test_incast_with_pfc_is_lossless_fair_and_ends_at_the_line_rate_bound() -> None:
    senders, nbytes = 8, 2_000_000
    ends, stats = run(star(senders + 1), PFC_ONLY,
                      [(host, 0, nbytes, 0) for host in range(1, senders + 1)])
    ideal_last = wire_ns(senders * nbytes) + 2 * LATENCY_NS
    assert stats["drops"] == 0
    assert stats["pfc_pause_frames"] > 0 and stats["pfc_paused_us_total"] > 0
    assert max(ends) == pytest.approx(ideal_last, rel=0.002)
    assert min(ends) >= 0.95 * max(ends)  # fair shares: every sender ends within 5%
    assert stats["rate_cuts"] == 0  # no congestion control: PFC alone kept it lossless
    hottest = stats["hot_ports"][0]
    assert hottest["paused_us"] > 0 and hottest["port"].startswith("host")


@ns3_test
def test_too_little_headroom_drops_and_fails_the_run_naming_the_switch() -> None:
    with pytest.raises(BackendError, match=r"switch rail0 dropped a packet .*headroom \(15000 "
                                           r"bytes\).*roce\.headroom"):
        run(star(9), dataclasses.replace(PFC_ONLY, headroom_bytes=15_000),
            [(host, 0, 2_000_000, 0) for host in range(1, 9)])


@ns3_test
def test_dcqcn_cuts_rates_under_incast_and_pfc_is_rarely_needed() -> None:
    flows = [(host, 0, 2_000_000, 0) for host in range(1, 9)]
    _, pfc_only = run(star(9), settings("dcqcn-paper", congestion_control="none",
                                         buffer_bytes=2_000_000), flows)
    _, dcqcn = run(star(9), settings("dcqcn-paper", buffer_bytes=2_000_000), flows)
    assert dcqcn["drops"] == 0
    assert dcqcn["cnps"] > 0 and dcqcn["rate_cuts"] > 0
    assert dcqcn["queue_pairs_rate_cut"] == 8
    assert dcqcn["min_rate_gbps"] < GBPS / 2
    assert dcqcn["pfc_pause_frames"] < pfc_only["pfc_pause_frames"] / 2


@ns3_test
def test_dcqcn_converges_two_competing_flows_to_fair_rates() -> None:
    """A runs alone at line rate, B joins 400 us later; with no PFC in play (a large buffer)
    only DCQCN can even them out: 600 us later their rates agree within 5%, and together they
    no longer exceed the bottleneck."""
    from phantora.network.ns3 import Ns3Backend

    roce = settings("dcqcn-paper", buffer_bytes=64_000_000)
    with Ns3Backend(star(3), ns3_config(transport="roce", roce=roce)) as backend:
        backend.add_flow(1, 0, 20_000_000, 0)
        backend.add_flow(2, 0, 20_000_000, 400_000)
        assert backend.advance_to(1_000_000) == []
        rates = list(backend.rates_gbps().values())
        stats = backend.stats().extra
    assert stats["pfc_pause_frames"] == 0 and stats["rate_cuts"] > 0
    assert min(rates) == pytest.approx(max(rates), rel=0.05)
    assert sum(rates) < GBPS


@ns3_test
def test_pfc_spreads_congestion_to_an_innocent_flow_and_dcqcn_contains_it() -> None:
    """Two-tier fabric, leaves of 3 hosts, one spine. Four hosts (two behind each leaf) send
    to host 3; the victim, host 2 -> host 4, shares only the spine -> leaf1 link with the
    incast and its own egress port is idle. PFC pauses the spine for the incast, and the
    victim waits behind it (head-of-line blocking); DCQCN slows the incast senders instead."""
    topology = leaf_spine(HOST, hosts=6, hosts_per_leaf=3, spines=1, link_gbps=GBPS,
                          latency_ns=LATENCY_NS)
    victim = (2, 4, 4_000_000, 0)
    incast = [(src, 3, 16_000_000, 0) for src in (0, 1, 4, 5)]
    base = settings("dcqcn-paper", buffer_bytes=2_000_000)
    (alone,), _ = run(topology, base, [victim])
    (blocked, *_), pfc_only = run(topology, dataclasses.replace(base, congestion_control="none"),
                                  [victim, *incast])
    (protected, *_), dcqcn = run(topology, base, [victim, *incast])
    assert alone == pytest.approx(wire_ns(4_000_000) + 4 * LATENCY_NS + 3 * FRAME * 8 / GBPS,
                                  abs=100)
    assert blocked > 3 * alone
    assert pfc_only["drops"] == dcqcn["drops"] == 0
    assert protected < 0.8 * blocked
    assert dcqcn["pfc_paused_us_total"] < 0.2 * pfc_only["pfc_paused_us_total"]


def ring(switches: int) -> Topology:
    """A ring of switches, one host on each: the classic cyclic buffer dependency."""
    topology = Topology("ring", switches, 1)
    gpus = [topology.add_node(NodeKind.GPU, f"host{i}") for i in range(switches)]
    topology.gpu_nodes.extend(gpus)
    ring_nodes = [topology.add_node(NodeKind.LEAF, f"sw{i}") for i in range(switches)]
    for gpu, switch in zip(gpus, ring_nodes):
        topology.add_link(gpu, switch, GBPS, LATENCY_NS, LinkKind.NIC)
    for i, switch in enumerate(ring_nodes):
        topology.add_link(switch, ring_nodes[(i + 1) % switches], GBPS, LATENCY_NS,
                          LinkKind.FABRIC)
    return topology


@ns3_test
def test_pfc_deadlock_fails_the_run_naming_the_cycle() -> None:
    """Five switches in a ring, each host sending two hops clockwise: every ring link carries
    two line-rate flows, every switch pauses its predecessor, and nothing moves again."""
    roce = settings(congestion_control="none", buffer_bytes=600_000, pfc_watchdog_ns=1_000_000)
    with pytest.raises(BackendError, match="PFC deadlock: the ports sw0->sw1, sw1->sw2, "
                                           "sw2->sw3, sw3->sw4, sw4->sw0 pause each other"):
        run(ring(5), roce, [(i, (i + 2) % 5, 50_000_000, 0) for i in range(5)])


@ns3_test
def test_same_seed_gives_identical_results() -> None:
    """ECN marking is random (Pmax) and ECMP hashes by seed: both are seeded, nothing else."""
    topology = leaf_spine(HOST, hosts=6, hosts_per_leaf=3, spines=2, link_gbps=GBPS,
                          latency_ns=LATENCY_NS)
    flows = [(src, 3, 3_000_000, 1_000 * src) for src in (0, 1, 2, 4, 5)] + [(3, 0, 1_000_000, 0)]
    first = run(topology, settings("dcqcn-paper", buffer_bytes=2_000_000), flows, seed=5)
    second = run(topology, settings("dcqcn-paper", buffer_bytes=2_000_000), flows, seed=5)
    assert first[1]["ecn_marks"] > 0

    def simulated(result: tuple[list[int], dict[str, object]]) -> tuple[object, ...]:
        ends, stats = result
        return ends, {k: v for k, v in stats.items() if not k.endswith("cpu_s")}

    assert simulated(first) == simulated(second)


@pytest.mark.parametrize("name", PRESETS)
def test_presets_scale_ecn_thresholds_with_the_nic_rate(name: str) -> None:
    slow, fast = preset(name, 100.0), preset(name, 400.0)  # type: ignore[arg-type]
    assert fast.ecn_kmin_bytes == 4 * slow.ecn_kmin_bytes
    assert 0 < fast.ecn_kmin_bytes < fast.ecn_kmax_bytes


@ns3_test
@pytest.mark.parametrize("hosts", [2, 4])
def test_ring_all_reduce_across_hosts_runs_at_the_nic_rate(hosts: int, tmp_path) -> None:
    """One GPU (one 400G NIC) per host, so the ring is NIC-bound: its busbw on an idle RoCE
    fabric is within 3% of the fluid model's (the analytic bound of the same NCCL flow DAG)
    and within 2% of the 46-48 GB/s nccl-tests measures on 400G NICs (validate_multihost.py)."""
    from rich.console import Console

    from phantora.run import run_scenario
    from phantora.scenario import parse_scenario

    busbw = {}
    for backend in ("ns3", "flow"):
        data = {"cluster": {"gpu": "h100", "hosts": hosts, "gpus_per_host": 1,
                            "network": {"backend": backend, "transport": "roce"}},
                "workload": {"collectives": {"ops": ["all_reduce"], "sizes": ["256MiB"]}}}
        summary = run_scenario(parse_scenario(data, source="test"), tmp_path / backend,
                               Console(quiet=True))
        busbw[backend] = summary.collectives[0].busbw_gbs
    assert busbw["ns3"] == pytest.approx(busbw["flow"], rel=0.03)
    assert 45.0 <= busbw["ns3"] <= 49.6  # 49.6: 400 Gbps less RoCE framing
