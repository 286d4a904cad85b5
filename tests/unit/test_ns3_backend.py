"""The packet-level ns-3 backend with the DCTCP transport: timing against closed forms,
sharing, the backend contract, determinism, ECN under incast, lifecycle and configuration
errors.

Fabric: rail-optimized, 2 GPUs per host, 2 spines, 400 Gbps NICs and links, 1000 ns per link.
Two GPUs of the same rail talk over NIC -> rail switch -> NIC, so a message of ``n`` bytes takes
``wire_ns(n) + 2 links x 1000 ns + one packet's store-and-forward at the switch`` on an open,
idle connection.
"""

import importlib.util
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hwmodel.errors import BackendError, MissingDependencyError
from phantora.cluster.topology import HostSpec, Link, LinkKind, Topology, rail_optimized
from phantora.network.base import FlowDone
from phantora.network.ns3 import Ns3Backend
from phantora.network.ns3.config import TCP_IP_HEADER_BYTES, Ns3Config

GBPS = 400.0
LATENCY_NS = 1000
GPUS_PER_HOST = 2
PPP_HEADER_BYTES = 2
"""ns-3's point-to-point devices add a 2-byte PPP header on the wire."""


def fabric(hosts: int = 4) -> Topology:
    host = HostSpec(gpus_per_host=GPUS_PER_HOST, nvlink_gbps=3600.0, nvlink_latency_ns=100,
                    nic_gbps=GBPS)
    return rail_optimized(host, hosts=hosts, spines=2, link_gbps=GBPS, latency_ns=LATENCY_NS)


def gpu(host: int, local: int = 0) -> int:
    return host * GPUS_PER_HOST + local


def ns3_config(**overrides: Any) -> Ns3Config:
    """The backend's settings these tests are written for: DCTCP on jumbo frames, 2 MiB port
    buffers, K = 150 KB, seed 1; ``overrides`` replace any (RoCE: transport and roce)."""
    return Ns3Config(**{"transport": "dctcp", "mtu_bytes": 9000, "switch_buffer_bytes": 2 * 2**20,
                        "ecn_threshold_bytes": 150_000, "seed": 1, **overrides})


DEFAULTS = ns3_config()


def wire_ns(nbytes: int) -> float:
    """Serialization of ``nbytes`` of payload with TCP/IP + PPP headers on every packet."""
    packets = math.ceil(nbytes / DEFAULTS.segment_bytes)
    return (nbytes + packets * (TCP_IP_HEADER_BYTES + PPP_HEADER_BYTES)) * 8 / GBPS


def idle_path_ns(nbytes: int) -> float:
    """A message on an open connection over an idle same-rail path (2 links)."""
    store_and_forward_ns = (DEFAULTS.mtu_bytes + PPP_HEADER_BYTES) * 8 / GBPS
    return wire_ns(nbytes) + 2 * LATENCY_NS + store_and_forward_ns


def run_until_idle(backend) -> dict[int, int]:
    """Drive the backend as the engine does, checking the contract on every step."""
    ends: dict[int, int] = {}
    while (bound := backend.next_event_ns()) is not None:
        before = backend.now_ns()
        assert bound >= before
        done = backend.advance_to(bound + 10**9)
        assert backend.now_ns() >= before
        for flow in done:
            assert flow.end_ns == backend.now_ns()
            ends[flow.flow_id] = flow.end_ns
    return ends


def ns3_test(test: Callable[..., None]) -> Callable[..., None]:
    """Marks a test that runs ns-3 (skipped where the ns3 wheel is not installed)."""
    skip = pytest.mark.skipif(importlib.util.find_spec("ns3") is None,
                              reason="ns3 is not installed")
    return pytest.mark.ns3(skip(test))


@ns3_test
def test_single_flow_is_serialization_plus_propagation() -> None:
    """First message: within [ideal, ideal + 4 RTT]; it pays the 3-way handshake (1 RTT) and
    slow start from 10 segments (a few RTTs). Second message on the open connection: no
    handshake, window already open, so within 0.5% + 50 ns of the closed form (ns-3 rounds
    each packet's serialization to whole ns)."""
    nbytes = 4 * 2**20
    rtt_ns = 2 * (2 * LATENCY_NS + 2 * wire_ns(DEFAULTS.segment_bytes))
    with Ns3Backend(fabric(), ns3_config()) as backend:
        backend.add_flow(gpu(0), gpu(1), nbytes, 0)
        (first,) = run_until_idle(backend).values()
        assert idle_path_ns(nbytes) <= first <= idle_path_ns(nbytes) + 4 * rtt_ns
        backend.add_flow(gpu(0), gpu(1), nbytes, first)
        (second_end,) = run_until_idle(backend).values()
        assert second_end - first == pytest.approx(idle_path_ns(nbytes), rel=0.005, abs=50)


@ns3_test
def test_two_flows_sharing_a_nic_each_get_about_half() -> None:
    nbytes = 4 * 2**20
    with Ns3Backend(fabric(), ns3_config()) as backend:
        for dst_host in (1, 2):  # two connections out of the same NIC, each to its own NIC
            backend.add_flow(gpu(0), gpu(dst_host), nbytes, 0)
        ends = sorted(run_until_idle(backend).values())
        stats = backend.stats().extra
    alone_ns = wire_ns(nbytes)
    # Together they need twice one flow's serialization; neither finishes much before that.
    assert ends[1] == pytest.approx(2 * alone_ns, rel=0.10)
    assert ends[0] >= 1.7 * alone_ns
    assert stats["drops"] == 0


@ns3_test
def test_contract_start_in_past_and_stop_at_first_completion() -> None:
    with Ns3Backend(fabric(), ns3_config()) as backend:
        assert backend.next_event_ns() is None
        assert backend.advance_to(5_000) == [] and backend.now_ns() == 5_000  # lands exactly
        with pytest.raises(BackendError, match="past"):
            backend.add_flow(gpu(0), gpu(1), 1000, 4_999)
        with pytest.raises(BackendError, match="same host"):
            backend.add_flow(gpu(0, 0), gpu(0, 1), 1000, 5_000)
        with pytest.raises(BackendError):
            backend.advance_to(4_000)
        small = backend.add_flow(gpu(0), gpu(1), 100_000, 5_000)
        large = backend.add_flow(gpu(1), gpu(2), 1_000_000, 5_000)
        assert backend.next_event_ns() >= backend.now_ns()
        first = backend.advance_to(10**9)
        assert [flow.flow_id for flow in first] == [small]
        assert backend.now_ns() == first[0].end_ns < 10**9  # stopped at the completion instant
        mid = backend.now_ns() + 10_000
        assert backend.advance_to(mid) == [] and backend.now_ns() == mid
        second = backend.advance_to(10**9)
        assert second == [FlowDone(large, backend.now_ns())]
        assert backend.next_event_ns() is None


def deterministic_run() -> tuple[dict[int, int], dict[str, int | float]]:
    """Same-rail and cross-rail (two spines: hash ECMP) flows with staggered starts; returns
    end times and the stats that do not depend on CPU time."""
    with Ns3Backend(fabric(), ns3_config(seed=7)) as backend:
        for src, dst, start in ((0, 2, 0), (2, 4, 0), (4, 6, 1_000), (6, 0, 2_000), (1, 3, 0),
                                (3, 1, 500), (0, 3, 0), (2, 7, 0), (5, 0, 300), (7, 2, 0)):
            backend.add_flow(src, dst, 300_000, start, tag=src)
        ends = run_until_idle(backend)
        stats = backend.stats().extra
    return ends, {k: v for k, v in stats.items() if not k.endswith("cpu_s")}


@ns3_test
def test_same_inputs_give_identical_results_in_one_process() -> None:
    """Backends created one after another in the same process (ns-3 destroyed in between)."""
    assert deterministic_run() == deterministic_run()


@ns3_test
@pytest.mark.slow
def test_first_backend_of_a_fresh_process_gives_the_same_results() -> None:
    """ns-3 keeps attribute defaults across simulations: the first backend of a process must
    not differ from later ones (it once did, when TCP's socket type was set too late)."""
    code = ("import json, sys; sys.path.insert(0, 'tests/unit'); "
            "from test_ns3_backend import deterministic_run; "
            "print(json.dumps(deterministic_run()))")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, cwd=Path(__file__).resolve().parents[2])
    ends, stats = json.loads(fresh.stdout.strip().splitlines()[-1])
    expected_ends, expected_stats = deterministic_run()
    assert {int(k): v for k, v in ends.items()} == expected_ends
    assert stats == expected_stats


@ns3_test
def test_incast_marks_ecn_and_keeps_the_receiver_busy() -> None:
    senders, nbytes = 3, 4 * 2**20
    with Ns3Backend(fabric(hosts=senders + 1), ns3_config()) as backend:
        for host in range(1, senders + 1):
            backend.add_flow(gpu(host), gpu(0), nbytes, 0)
        last = max(run_until_idle(backend).values())
        stats = backend.stats().extra
    assert stats["ecn_marks"] > 0
    assert stats["drops"] == 0
    # The receiver's link carries all bytes back to back: the incast ends near that bound
    # (handshakes, slow start and DCTCP's window cuts leave it idle for a few percent).
    assert wire_ns(senders * nbytes) <= last <= 1.10 * wire_ns(senders * nbytes)


@ns3_test
def test_one_backend_at_a_time_and_reopen_after_close() -> None:
    first = Ns3Backend(fabric(), ns3_config())
    with pytest.raises(BackendError, match="close"):
        Ns3Backend(fabric(), ns3_config())
    first.add_flow(gpu(0), gpu(1), 10_000, 0)
    run_until_idle(first)
    first.close()
    assert first.stats().flows == 1  # final counters survive close()
    with pytest.raises(BackendError, match="closed"):
        first.add_flow(gpu(0), gpu(1), 10_000, 0)
    with Ns3Backend(fabric(), ns3_config()) as second:
        assert second.now_ns() == 0
        second.add_flow(gpu(0), gpu(1), 10_000, 0)
        assert len(run_until_idle(second)) == 1


@ns3_test
def test_bad_topology_is_a_clear_error() -> None:
    topology = fabric(hosts=2)
    nic = topology.nic_of(0)
    link = topology.links[nic]
    topology.links[nic] = Link(link.a, link.b, 0.0, link.latency_ns, LinkKind.NIC)
    with pytest.raises(BackendError, match="gbps=0.0"):
        Ns3Backend(topology, ns3_config())


@pytest.mark.parametrize(("field", "value", "message"), [
    ("mtu_bytes", 100, "576 <= mtu_bytes <= 65535"),
    ("mtu_bytes", 70_000, "got 70000"),
    ("switch_buffer_bytes", 1_000, "switch_buffer_bytes"),
    ("ecn_threshold_bytes", 3 * 2**20, "below switch_buffer_bytes"),
    ("tcp_buffer_bytes", 1_000, "tcp_buffer_bytes"),
    ("tcp_min_rto_ns", 0, "tcp_min_rto_ns"),
    ("tcp_delayed_ack_segments", 0, "tcp_delayed_ack_segments"),
    ("seed", 0, "seed"),
    ("transport", "tcp", "'dctcp', 'roce'"),
    ("mtu_bytes", 9000.5, "expected an integer"),
])
def test_invalid_config_names_field_value_and_range(field: str, value: object,
                                                    message: str) -> None:
    with pytest.raises(ValueError, match=f"Ns3Config.{field}") as error:
        ns3_config(**{field: value})
    assert message in str(error.value)


def test_missing_ns3_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from phantora.network.ns3 import loader

    monkeypatch.setattr(loader.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingDependencyError, match="pip install 'ns3=="):
        loader._load()
