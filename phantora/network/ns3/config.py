"""Settings of the packet-level ns-3 backend, checked in Python before they reach ns-3.

ns-3 reports a bad attribute with ``NS_FATAL_ERROR``, which kills the whole process, so every
value is range-checked here and a bad one raises ``ValueError`` naming the field, the value
and the allowed range. Importing this module does not import ns-3.
"""

from dataclasses import dataclass, fields
from typing import Literal

from phantora.network.roce_presets import RoceSettings

Transport = Literal["dctcp", "roce"]
"""Transports the backend implements: TCP with DCTCP over ns-3's internet stack, or RDMA over
a lossless fabric (PFC, ECN, DCQCN) on our own NIC and switch models."""

TRANSPORTS: tuple[str, ...] = ("dctcp", "roce")

TCP_IP_HEADER_BYTES = 52
"""IPv4 (20) + TCP (20) + timestamp option padded to 12 bytes: MSS = MTU - 52."""

_UINT32_MAX = 2**32 - 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Ns3Config:
    """How the ns-3 backend models NICs, switches and the transport. What a scenario decides
    (transport, MTU, buffers, ECN threshold, RoCE settings, seed) has no default here: a run
    passes its resolved scenario's (:func:`phantora.run.assemble.make_backend`). The TCP
    stack's own constants have theirs."""

    transport: Transport
    """``"roce"`` (RDMA over PFC + DCQCN) or ``"dctcp"`` (TCP with DCTCP over ECN-marking
    switches); the ``tcp_*``, ``switch_buffer_bytes`` and ``ecn_threshold_bytes`` fields are
    DCTCP's, ``roce`` holds RoCE's."""

    mtu_bytes: int
    """IP MTU of every fabric link. Simulation cost grows with the packet count, so jumbo
    frames (the usual setting of GPU fabrics) are also 6-7x cheaper to simulate than 1500."""

    switch_buffer_bytes: int
    """Buffer of each switch egress port."""

    ecn_threshold_bytes: int
    """Backlog at which a switch port CE-marks packets (DCTCP's K; RED MinTh = MaxTh = K)."""

    roce: RoceSettings | None = None
    """RoCE settings, required with ``transport="roce"`` (a scenario's are resolved from its
    preset and overrides; :func:`~phantora.network.roce_presets.preset` gives a preset's)."""

    seed: int
    """Seeds ns-3's random numbers and the switches' ECMP hash: a different seed gives a
    different but equally valid assignment of connections to equal-cost paths."""

    tcp_buffer_bytes: int | None = None
    """TCP send and receive buffer per connection; the send buffer bounds the data in flight.
    ``None``: autotuned like Linux, twice the bandwidth-delay product: of the connection's
    own path for its send buffer, of the topology's longest path for receive buffers
    (:mod:`phantora.network.ns3.fabric`). That is enough for line rate; much larger windows
    only queue up in the NIC and make every packet (and loss recovery) costlier to simulate."""

    tcp_min_rto_ns: int = 1_000_000
    """Minimum retransmission timeout (datacenter stacks use ~1 ms; Linux's 200 ms default
    would let a single loss dominate a collective)."""

    tcp_clock_granularity_ns: int = 10_000
    """Granularity of TCP's RTT clock (10 us; ns-3's default 1 ms is far above DC RTTs)."""

    tcp_initial_cwnd_segments: int = 10
    """Initial congestion window, in segments, of a new connection (Linux default)."""

    tcp_delayed_ack_segments: int = 8
    """Full segments received before an ACK goes back. At 100-400 Gbps a Linux receiver acks
    once per GRO batch (up to 64 KB, about 7 jumbo frames), not every second segment. With
    ``tcp_delayed_ack_timeout_ns`` this models that, and costs ~22% fewer events than 2 (the
    classic every-other-segment ACK, still available)."""

    tcp_delayed_ack_timeout_ns: int = 1_000
    """Longest an ACK waits for more segments: a GRO batch ends with the receive poll, about a
    microsecond. Much longer (ns-3's default is 200 ms) stalls windows smaller than
    ``tcp_delayed_ack_segments`` segments, e.g. DCTCP flows in an incast."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "transport":
                if value not in TRANSPORTS:
                    raise ValueError(f"Ns3Config.transport: got {value!r}; expected one of "
                                     f"{', '.join(map(repr, TRANSPORTS))}")
            elif f.name in ("tcp_buffer_bytes", "roce") and value is None:
                continue
            elif f.name == "roce":
                if not isinstance(value, RoceSettings):
                    raise ValueError(f"Ns3Config.roce: got {value!r}; expected RoceSettings")
            elif isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"Ns3Config.{f.name}: got {value!r}; expected an integer")
        _check_range("mtu_bytes", self.mtu_bytes, 576, 65535,
                      "576 is IPv4's minimum; 65535 the most a point-to-point device takes")
        _check_range("switch_buffer_bytes", self.switch_buffer_bytes, 2 * self.mtu_bytes,
                     _UINT32_MAX, "at least two MTU-sized packets")
        _check_range("ecn_threshold_bytes", self.ecn_threshold_bytes, self.mtu_bytes,
                     self.switch_buffer_bytes - 1,
                     "at least one MTU and below switch_buffer_bytes, or nothing is ever marked")
        if self.tcp_buffer_bytes is not None:
            _check_range("tcp_buffer_bytes", self.tcp_buffer_bytes, 4 * self.segment_bytes,
                          2**30, "at least four segments (MTU - 52 bytes each), at most 1 GiB")
        _check_range("tcp_clock_granularity_ns", self.tcp_clock_granularity_ns, 1,
                     1_000_000_000, "1 ns to 1 s")
        _check_range("tcp_min_rto_ns", self.tcp_min_rto_ns, self.tcp_clock_granularity_ns,
                     60_000_000_000, "at least tcp_clock_granularity_ns, at most 60 s")
        _check_range("tcp_initial_cwnd_segments", self.tcp_initial_cwnd_segments, 1, 10_000,
                     "1 to 10000 segments")
        _check_range("tcp_delayed_ack_segments", self.tcp_delayed_ack_segments, 1, 64,
                     "1 to 64 segments")
        _check_range("tcp_delayed_ack_timeout_ns", self.tcp_delayed_ack_timeout_ns, 1,
                     1_000_000_000, "1 ns to 1 s")
        _check_range("seed", self.seed, 1, _UINT32_MAX, "ns-3 seeds are non-zero 32-bit")
        if self.transport == "roce":
            self.roce_settings()

    def roce_settings(self) -> RoceSettings:
        """The RoCE settings; a ``ValueError`` where ``transport="roce"`` comes without them."""
        if self.roce is None:
            raise ValueError("Ns3Config.roce: required with transport 'roce'; pass the "
                             "scenario's resolved settings or roce_presets.preset(name, "
                             "nic_gbps)")
        return self.roce

    @property
    def segment_bytes(self) -> int:
        """TCP payload per packet (MSS)."""
        return self.mtu_bytes - TCP_IP_HEADER_BYTES


def _check_range(name: str, value: int, low: int, high: int, why: str) -> None:
    if not low <= value <= high:
        raise ValueError(f"Ns3Config.{name}: got {value}; expected {low} <= {name} <= {high} "
                         f"({why})")
