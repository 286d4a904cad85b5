"""The DCTCP transport of the ns-3 backend: persistent TCP connections over ns-3's internet
stack, RED/ECN switch queues and per-flow hash ECMP.

Each flow is a message on a persistent TCP connection keyed by ``(src, dst, tag)``, like an
NCCL channel's connection. Connections open lazily: the first flow of a key creates the
connection at the backend's current time, so that flow pays the 3-way handshake (one round
trip, a few microseconds) and slow start from ``tcp_initial_cwnd_segments``; later flows reuse
the open connection and its congestion window.

A failed link's two interfaces go down and global routing is recomputed; packets that were on
the link then die at the down interface and TCP retransmits them (``retransmissions``).
"""

from types import SimpleNamespace
from typing import Any

from hwmodel.errors import BackendError
from phantora.cluster.topology import Topology
from phantora.network.ns3.config import Ns3Config
from phantora.network.ns3.fabric import (
    Fabric,
    build_fabric,
    connection_buffer_bytes,
    longest_path_buffer_bytes,
)


class TcpTransport:
    """Builds the TCP fabric and sends messages on its connections."""

    def __init__(self, lib: SimpleNamespace, topology: Topology, config: Ns3Config) -> None:
        self._topology = topology
        self._config = config
        tcp_buffer_bytes = (config.tcp_buffer_bytes if config.tcp_buffer_bytes is not None
                            else longest_path_buffer_bytes(topology, config))
        # Before the fabric: TCP's socket type is read when the internet stacks are installed.
        configure_tcp_defaults(lib.ns3, config, tcp_buffer_bytes)
        self.fabric: Fabric = build_fabric(
            lib.phantora.FabricHelper(config.mtu_bytes, config.switch_buffer_bytes,
                                      config.ecn_threshold_bytes, config.seed), topology)
        self._messages: Any = lib.phantora.MessageHelper()
        self.log: Any = self._messages.GetLog()
        self._connections: dict[tuple[int, int, int], int] = {}

    def send(self, src: int, dst: int, tag: int, flow_id: int, nbytes: int,
             start_ns: int) -> None:
        self._messages.Send(self._connection(src, dst, tag), flow_id, nbytes, start_ns)

    def failure(self) -> str:
        """TCP recovers from losses itself: nothing is ever fatal."""
        return ""

    def stuck_detail(self) -> str:
        return ""

    def extra(self) -> dict[str, int | float]:
        helper = self.fabric.helper
        return {"data_packets": int(helper.GetDataPackets()),
                "packet_hops": int(helper.GetPacketHops()),
                "drops": int(helper.GetDrops()),
                "ecn_marks": int(helper.GetEcnMarks()),
                "retransmissions": int(self._messages.GetRetransmissions()),
                "connections": len(self._connections)}

    def failure_extra(self) -> dict[str, int | float]:
        """Counters of link failures: links down so far, and packets that were on a link when
        it failed and died at its down interface."""
        helper = self.fabric.helper
        return {"link_failures": int(helper.GetLinkFailures()),
                "link_down_drops": int(helper.GetLinkDownDrops())}

    def hot_ports(self) -> list[dict[str, object]]:
        return []

    def close(self) -> None:
        self._messages = self.log = None

    def _connection(self, src: int, dst: int, tag: int) -> int:
        key = (src, dst, tag)
        connection = self._connections.get(key)
        if connection is None:
            try:
                send_buffer_bytes = (self._config.tcp_buffer_bytes
                                     or connection_buffer_bytes(self._topology, self._config,
                                                                src, dst))
                connection = int(self._messages.AddConnection(
                    self.fabric.helper.GetNode(self.fabric.gpu_node[src]),
                    self.fabric.helper.GetNode(self.fabric.gpu_node[dst]), send_buffer_bytes))
            except Exception as exc:  # cppyy turns the C++ std::length_error into this
                raise BackendError(f"add_flow: cannot open connection {key}: {exc}") from exc
            self._connections[key] = connection
        return connection


def configure_tcp_defaults(ns3: Any, config: Ns3Config, tcp_buffer_bytes: int) -> None:
    """Set the DCTCP defaults every socket of the next simulation is created with.

    Attribute defaults are process-global in ns-3 and survive ``Simulator::Destroy``, so every
    backend sets all of them before it creates a socket; nothing is inherited from an earlier
    backend in the same process. ``tcp_buffer_bytes`` is ``config.tcp_buffer_bytes`` resolved
    for the topology.
    """
    if config.transport != "dctcp":  # Ns3Config validates the name; roce has its own module
        raise NotImplementedError(f"transport {config.transport!r}")
    set_default = ns3.Config.SetDefault
    set_default("ns3::TcpL4Protocol::SocketType", ns3.TypeIdValue(ns3.TcpDctcp.GetTypeId()))
    set_default("ns3::TcpSocketBase::UseEcn", ns3.EnumValue["ns3::TcpSocketState::UseEcn_t"](
        ns3.TcpSocketState.On))
    set_default("ns3::TcpSocket::SegmentSize", ns3.UintegerValue(config.segment_bytes))
    set_default("ns3::TcpSocket::SndBufSize", ns3.UintegerValue(tcp_buffer_bytes))
    set_default("ns3::TcpSocket::RcvBufSize", ns3.UintegerValue(tcp_buffer_bytes))
    set_default("ns3::TcpSocket::InitialCwnd", ns3.UintegerValue(config.tcp_initial_cwnd_segments))
    set_default("ns3::TcpSocket::DelAckCount", ns3.UintegerValue(config.tcp_delayed_ack_segments))
    set_default("ns3::TcpSocket::DelAckTimeout",
                ns3.TimeValue(ns3.NanoSeconds(config.tcp_delayed_ack_timeout_ns)))
    set_default("ns3::TcpSocketBase::MinRto", ns3.TimeValue(ns3.NanoSeconds(config.tcp_min_rto_ns)))
    set_default("ns3::TcpSocketBase::ClockGranularity",
                ns3.TimeValue(ns3.NanoSeconds(config.tcp_clock_granularity_ns)))
