"""The packet-level and fluid backends cross-checked on the same fabric.

Uncongested traffic (one flow per NIC) must give the same completion times within 10% on
either transport: both then see the line rate, ns-3 only adds headers (and, for DCTCP, the
handshake and slow start). Under incast the models differ on purpose: the fluid model shares
the receiver's NIC perfectly (every sender finishes at the same instant); DCTCP against a
switch queue finishes senders at different times and the switch marks ECN; RoCE's PFC keeps
the receiver's link busy without loss, so its last byte lands where the fluid model's does.
"""

import pytest

from phantora.cluster.topology import HostSpec, Topology, rail_optimized
from phantora.network.base import NetworkBackend
from phantora.network.flow import FluidBackend
from phantora.network.roce_presets import preset

from .test_ns3_backend import ns3_config

pytestmark = pytest.mark.ns3

MIB = 2**20
_HORIZON_NS = 10**12


def _topology(hosts: int, gpus_per_host: int) -> Topology:
    host = HostSpec(gpus_per_host=gpus_per_host, nvlink_gbps=3600.0, nvlink_latency_ns=300,
                    nic_gbps=400.0)
    return rail_optimized(host, hosts, spines=1, link_gbps=400.0, latency_ns=500)


def _completion_ns(backend: NetworkBackend, flows: list[tuple[int, int, int]]) -> list[int]:
    """Start every ``(src, dst, bytes)`` flow at 0; return each one's completion time."""
    ids = [backend.add_flow(src, dst, nbytes, 0, tag=i) for i, (src, dst, nbytes) in
           enumerate(flows)]
    end: dict[int, int] = {}
    while len(end) < len(ids):
        for done in backend.advance_to(_HORIZON_NS):
            end[done.flow_id] = done.end_ns
    return [end[flow_id] for flow_id in ids]


def _both(topology: Topology, flows: list[tuple[int, int, int]], transport: str
          ) -> tuple[list[int], list[int], dict[str, int | float | str]]:
    from phantora.network.ns3 import Ns3Backend

    fluid = FluidBackend(topology, scope="inter")
    fluid_ns = _completion_ns(fluid, flows)
    roce = preset("simai", topology.fastest_nic_gbps()) if transport == "roce" else None
    with Ns3Backend(topology, ns3_config(transport=transport, roce=roce)) as packets:
        packet_ns = _completion_ns(packets, flows)
        extra = packets.stats().extra
    return fluid_ns, packet_ns, extra


@pytest.mark.parametrize("transport", ["roce", "dctcp"])
def test_uncongested_flows_agree_within_ten_percent(transport: str) -> None:
    topology = _topology(hosts=2, gpus_per_host=4)
    flows = [(gpu, 4 + gpu, 16 * MIB) for gpu in range(4)]  # one flow per rail
    fluid_ns, packet_ns, _ = _both(topology, flows, transport)
    for fluid, packet in zip(fluid_ns, packet_ns):
        assert packet == pytest.approx(fluid, rel=0.10)


def test_incast_differs_the_fluid_model_shares_perfectly_dctcp_queues() -> None:
    topology = _topology(hosts=5, gpus_per_host=1)
    flows = [(sender, 0, 8 * MIB) for sender in range(1, 5)]  # 4 hosts into GPU 0
    fluid_ns, packet_ns, extra = _both(topology, flows, "dctcp")
    assert len(set(fluid_ns)) == 1  # perfect max-min sharing: all end together
    assert max(packet_ns) > min(packet_ns)  # DCTCP's sharing is not perfect
    assert extra["ecn_marks"] > 0
    # The receiver's NIC is the bottleneck in both: the last byte cannot beat 4 x 8 MiB at
    # line rate, and ns-3 stays within 25% of the fluid finish.
    assert max(packet_ns) == pytest.approx(fluid_ns[0], rel=0.25)
    assert max(packet_ns) >= 0.99 * fluid_ns[0]


def test_roce_incast_keeps_the_receiver_busy_like_the_fluid_model() -> None:
    topology = _topology(hosts=5, gpus_per_host=1)
    flows = [(sender, 0, 8 * MIB) for sender in range(1, 5)]
    fluid_ns, packet_ns, extra = _both(topology, flows, "roce")
    assert extra["drops"] == 0
    # Framing (~1%) and two link latencies are all that separate the last bytes.
    assert max(packet_ns) == pytest.approx(fluid_ns[0], rel=0.02)
