"""The RoCE transport of the ns-3 backend: RDMA queue pairs over a lossless fabric (PFC, ECN,
DCQCN), on our own NIC, switch and link models (``ns3_models/model/roce-*.h``) driven by
ns-3's event scheduler.

One queue pair per ``(src, dst, tag)``, created on first use: messages on it are delivered in
order and take one ECMP path. Queue pairs need no handshake (an RDMA connection is set up
before NCCL runs), so a message starts at line rate.

Framing: a packet of ``mtu`` IP bytes carries ``mtu - 44`` bytes of payload (IPv4 20, UDP 8,
InfiniBand BTH 12, ICRC 4) and takes ``mtu + 38`` bytes of line time (Ethernet header and FCS
18, preamble and inter-frame gap 20); an ack (with AETH) takes 86, a PFC frame 84.

A failed link leaves the routing at once, but what was queued on it or in flight over it
then still arrives (the lossless drain model: a RoCE fabric must not drop). A queue pair's
packets on its new path may overtake those draining; the receiving NIC places them by offset
and completes a message when all its bytes are in (no go-back-N).
"""

import math
from types import SimpleNamespace
from typing import Any

from hwmodel.errors import BackendError
from phantora.cluster.topology import Topology
from phantora.network.ns3.config import Ns3Config
from phantora.network.ns3.fabric import Fabric, build_fabric
from phantora.network.roce_presets import RoceSettings

ROCE_HEADER_BYTES = 44
"""IPv4 20 + UDP 8 + BTH 12 + ICRC 4, inside the IP MTU."""
ETHERNET_FRAMING_BYTES = 38
"""Ethernet header 14 + FCS 4 + preamble 8 + inter-frame gap 12, on the line per frame."""
ACK_WIRE_BYTES = 86
"""IPv4 + UDP + BTH + AETH 4 + ICRC = 48, plus Ethernet framing."""
PFC_WIRE_BYTES = 84
"""A minimum Ethernet frame (64) plus preamble and gap."""
HOT_PORTS = 5
"""Ports listed in ``NetworkStats.hot_ports``: the most paused, then the longest queues."""


class RoceTransport:
    """Builds the RoCE fabric and sends messages on its queue pairs."""

    def __init__(self, lib: SimpleNamespace, topology: Topology, config: Ns3Config) -> None:
        self._topology = topology
        self._nic_gbps = topology.fastest_nic_gbps()
        self.settings = config.roce_settings()
        self._frame_bytes = config.mtu_bytes + ETHERNET_FRAMING_BYTES
        helper = lib.phantora.RoceFabricHelper(self._params(lib, config))
        try:
            self.fabric: Fabric = build_fabric(helper, topology)
        except Exception as exc:  # cppyy turns std::invalid_argument into this
            raise BackendError(f"cannot build the RoCE fabric: {exc}; raise "
                               "cluster.network.roce.buffer or lower "
                               "cluster.network.roce.headroom") from exc
        self.log: Any = helper.GetLog()
        self._queue_pairs: dict[tuple[int, int, int], int] = {}

    def send(self, src: int, dst: int, tag: int, flow_id: int, nbytes: int,
             start_ns: int) -> None:
        key = (src, dst, tag)
        qp = self._queue_pairs.get(key)
        helper = self.fabric.helper
        if qp is None:
            window = self._window_bytes(src, dst) if self.settings.window else 0
            qp = int(helper.AddQueuePair(self.fabric.gpu_node[src], self.fabric.gpu_node[dst],
                                         tag & 0xFFFFFFFF, window))
            self._queue_pairs[key] = qp
        helper.Send(qp, flow_id, nbytes, start_ns)

    def failure(self) -> str:
        """A drop or a pause the watchdog caught; the run cannot be trusted past it."""
        return str(self.fabric.helper.GetFailure())

    def stuck_detail(self) -> str:
        paused = str(self.fabric.helper.DescribePauses())
        return f"; ports paused now: {paused}" if paused else ""

    def extra(self) -> dict[str, int | float]:
        helper = self.fabric.helper
        ports = list(helper.GetPortReports())
        flows = helper.GetFlowTotals()
        paused_us = [float(port.pausedUs) for port in ports]
        return {
            "data_packets": int(helper.GetDataPackets()),
            "ack_packets": int(helper.GetAckPackets()),
            "packet_hops": int(helper.GetPacketHops()),
            "drops": int(helper.GetDrops()),
            "ecn_marks": sum(int(port.ecnMarks) for port in ports),
            "pfc_pause_frames": sum(int(port.pausesSent) for port in ports),
            "pfc_paused_ports": sum(1 for us in paused_us if us > 0),
            "pfc_paused_us_total": round(sum(paused_us), 3),
            "pfc_paused_us_max": round(max(paused_us, default=0.0), 3),
            "max_queue_bytes": max((int(port.maxQueueBytes) for port in ports), default=0),
            "max_shared_buffer_bytes": int(helper.GetMaxSharedBytes()),
            "queue_pairs": int(flows.qps),
            "queue_pairs_with_cnp": int(flows.qpsWithCnp),
            "queue_pairs_rate_cut": int(flows.qpsCut),
            "cnps": int(flows.cnps),
            "rate_cuts": int(flows.rateCuts),
            "max_cnps_per_queue_pair": int(flows.maxCnpsPerQp),
            "min_rate_gbps": round(float(flows.minRateBps) / 1e9, 6),
        }

    def failure_extra(self) -> dict[str, int | float]:
        """Counters of link failures: links down so far, packets that left through a down
        link after it failed (drained), (switch, destination) route sets that changed, and
        data packets that reached their NIC ahead of an earlier one of their queue pair."""
        totals = self.fabric.helper.GetFailureTotals()
        return {"link_failures": int(totals.linkFailures),
                "drained_packets": int(totals.drainedPackets),
                "changed_routes": int(totals.changedRoutes),
                "reordered_packets": int(totals.reorderedPackets)}

    def hot_ports(self) -> list[dict[str, object]]:
        """The ports that were paused longest (then the longest queues), named by link."""
        names = self.fabric.node_names
        ports = sorted(self.fabric.helper.GetPortReports(),
                       key=lambda port: (-float(port.pausedUs), -int(port.maxQueueBytes)))
        return [{"port": f"{names[int(port.node)]}->{names[int(port.peer)]}",
                 "pause_frames_received": int(port.pausesReceived),
                 "pause_frames_sent": int(port.pausesSent),
                 "paused_us": round(float(port.pausedUs), 3),
                 "max_queue_bytes": int(port.maxQueueBytes),
                 "ecn_marks": int(port.ecnMarks)}
                for port in ports[:HOT_PORTS] if port.maxQueueBytes or port.pausedUs]

    def rates_gbps(self) -> dict[tuple[int, int, int], float]:
        """Current DCQCN sending rate of each queue pair, by ``(src, dst, tag)``."""
        helper = self.fabric.helper
        return {key: float(helper.GetRateBps(qp)) / 1e9 for key, qp in self._queue_pairs.items()}

    def close(self) -> None:
        self.log = None

    # -- internals ------------------------------------------------------------------------
    def _params(self, lib: SimpleNamespace, config: Ns3Config) -> Any:
        s: RoceSettings = self.settings
        params = lib.phantora.roce.RoceParams()
        params.payloadBytes = config.mtu_bytes - ROCE_HEADER_BYTES
        params.dataOverheadBytes = ROCE_HEADER_BYTES + ETHERNET_FRAMING_BYTES
        params.ackBytes = ACK_WIRE_BYTES
        params.pfcFrameBytes = PFC_WIRE_BYTES
        params.dataPriority = s.data_priority
        params.ackHighPriority = s.ack_priority == "high"
        params.nicBitsPerSecond = self._nic_gbps * 1e9
        params.pfc = s.pfc
        params.bufferBytes = s.buffer_bytes
        params.pfcAlpha = s.pfc_alpha
        params.headroomBytes = s.headroom_bytes or 0
        params.reserveBytes = s.pfc_reserve_bytes
        params.resumeOffsetBytes = s.pfc_resume_offset_bytes
        params.watchdogPs = s.pfc_watchdog_ns * 1e3
        params.ecn = True
        params.kminBytes = s.ecn_kmin_bytes
        params.kmaxBytes = s.ecn_kmax_bytes
        params.pmax = s.ecn_pmax
        params.dcqcn = s.congestion_control == "dcqcn"
        params.g = s.dcqcn_g
        params.alphaIntervalPs = s.dcqcn_alpha_interval_ns * 1e3
        params.decreaseIntervalPs = s.dcqcn_decrease_interval_ns * 1e3
        params.rpTimerPs = s.dcqcn_rp_timer_ns * 1e3
        params.fastRecoverySteps = s.dcqcn_fast_recovery_steps
        params.rateAiBps = s.dcqcn_rate_ai_gbps * 1e9
        params.rateHaiBps = s.dcqcn_rate_hai_gbps * 1e9
        params.minRateBps = s.dcqcn_min_rate_gbps * 1e9
        params.rateOnFirstCnp = s.dcqcn_rate_on_first_cnp
        params.clampTargetRate = s.dcqcn_clamp_target_rate
        params.cnpIntervalPs = s.dcqcn_cnp_interval_ns * 1e3
        params.seed = config.seed
        return params

    def _window_bytes(self, src: int, dst: int) -> int:
        """The path's bandwidth-delay product at NIC rate, plus one frame: a data packet's
        round trip is its hops' latency both ways plus a frame and an ack serialised per hop."""
        links = [self._topology.links[i] for i in self._topology.fabric_path(src, dst, 0)]
        rtt_ns = sum(2 * link.latency_ns + (self._frame_bytes + ACK_WIRE_BYTES) * 8 / link.gbps
                     for link in links)
        return math.ceil(self._nic_gbps * rtt_ns / 8) + self._frame_bytes
