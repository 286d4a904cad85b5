"""Maps :class:`Ns3Config`'s transport settings onto ns-3 attribute defaults.

Attribute defaults are process-global in ns-3 and survive ``Simulator::Destroy``, so every
backend sets all of them before it creates a socket; nothing is inherited from an earlier
backend in the same process.
"""

from typing import Any

from phantora.network.ns3.config import Ns3Config


def configure_transport(ns3: Any, config: Ns3Config, tcp_buffer_bytes: int) -> None:
    """Set the TCP defaults every socket of the next simulation is created with.

    ``tcp_buffer_bytes`` is ``config.tcp_buffer_bytes`` resolved for the topology.
    """
    if config.transport != "dctcp":  # the only one so far; Ns3Config validates the name
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
