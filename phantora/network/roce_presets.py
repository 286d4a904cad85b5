"""RoCE fabric settings (PFC, ECN, DCQCN) and the named presets they start from.

A preset is a published parameter set, scaled to the fabric's NIC rate the way its source
scales it; the scenario (``cluster.network.roce``) may override any single value. Sources are
the HPCC fork (alibaba-edu/High-Precision-Congestion-Control, ``mix/run.py``) and SimAI's
ns-3 (aliyun/SimAI ``SimAI.conf``); `shared/research/roce_and_traces.md` section 3 tabulates
them. Pure Python: importing it does not load ns-3.
"""

from dataclasses import dataclass, replace
from typing import Literal

PresetName = Literal["simai", "dcqcn-paper", "hpcc-dcqcn"]
CongestionControl = Literal["dcqcn", "none"]
AckPriority = Literal["high", "data"]

PRESETS: tuple[str, ...] = ("simai", "dcqcn-paper", "hpcc-dcqcn")


@dataclass(frozen=True, kw_only=True, slots=True)
class RoceSettings:
    """Every RoCE setting, resolved, in base units (the scenario echoes it)."""

    preset: PresetName
    congestion_control: CongestionControl
    """dcqcn: NICs react to CNPs; none: PFC only, queue pairs stay at line rate."""
    pfc: bool
    """Lossless priority flow control. Off, a full buffer drops, which fails the run (the NICs
    do not retransmit)."""
    buffer_bytes: int
    """Shared packet buffer of each switch."""
    headroom_bytes: int | None
    """Per port; ``None``: what the link needs (its round trip of bytes, three full frames,
    the PFC frame)."""
    pfc_alpha: float
    """Dynamic PFC threshold: a queue may take this fraction of the free shared buffer
    (at NIC rate; doubled per doubling of a port's rate, as in the forks)."""
    pfc_reserve_bytes: int
    """Guaranteed buffer per ingress port and priority."""
    pfc_resume_offset_bytes: int
    """XON hysteresis: resume once the queue is this far below the threshold."""
    pfc_watchdog_ns: int
    """A pause in force this long fails the run and names the ports (deadlock, storm)."""
    ecn_kmin_bytes: int
    """Egress queue (at NIC rate; scaled by port rate) above which data packets may be marked."""
    ecn_kmax_bytes: int
    """Queue above which every data packet is marked."""
    ecn_pmax: float
    """Marking probability at Kmax (linear from 0 at Kmin)."""
    dcqcn_g: float
    dcqcn_alpha_interval_ns: int
    dcqcn_decrease_interval_ns: int
    dcqcn_rp_timer_ns: int
    dcqcn_fast_recovery_steps: int
    dcqcn_rate_ai_gbps: float
    dcqcn_rate_hai_gbps: float
    dcqcn_min_rate_gbps: float
    dcqcn_rate_on_first_cnp: float
    dcqcn_clamp_target_rate: bool
    dcqcn_cnp_interval_ns: int
    """Notification point: at most one CNP per queue pair per interval; 0: one per marked packet."""
    window: bool
    """Bound each queue pair's bytes in flight by its path's bandwidth-delay product, scaled by
    its current rate (the forks' HAS_WIN/VAR_WIN)."""
    data_priority: int
    """PFC priority (1-7) of data packets."""
    ack_priority: AckPriority
    """high: acks and CNPs in the strict control class, never paused; data: behind data, and
    paused with it (SimAI's setting)."""


def preset(name: PresetName, nic_gbps: float) -> RoceSettings:
    """The preset ``name`` for NICs of ``nic_gbps``."""
    if name == "simai":
        return _SIMAI_400G if nic_gbps == 400 else replace(
            _SIMAI_400G, ecn_kmin_bytes=round(800_000 * nic_gbps / 400),
            ecn_kmax_bytes=round(3_200_000 * nic_gbps / 400))
    if name == "dcqcn-paper":
        scale = nic_gbps / 40  # the paper's testbed ran 40 Gbps
        return replace(_DCQCN_PAPER_40G, ecn_kmin_bytes=round(5_000 * scale),
                       ecn_kmax_bytes=round(200_000 * scale))
    scale = nic_gbps / 25  # HPCC's run.py scales by bandwidth / 25 Gbps
    return replace(_HPCC_DCQCN_25G, ecn_kmin_bytes=round(100_000 * scale),
                   ecn_kmax_bytes=round(400_000 * scale), buffer_bytes=round(16e6 * nic_gbps / 50),
                   dcqcn_rate_ai_gbps=0.005 * scale, dcqcn_rate_hai_gbps=0.05 * scale)


_COMMON = {
    "congestion_control": "dcqcn", "pfc": True, "headroom_bytes": None, "pfc_alpha": 0.125,
    "pfc_reserve_bytes": 4096, "pfc_resume_offset_bytes": 3072, "pfc_watchdog_ns": 10_000_000,
    "data_priority": 3,
}

_SIMAI_400G = RoceSettings(
    preset="simai", buffer_bytes=32_000_000, ecn_kmin_bytes=800_000, ecn_kmax_bytes=3_200_000,
    ecn_pmax=0.2, dcqcn_g=1 / 256, dcqcn_alpha_interval_ns=1_000, dcqcn_decrease_interval_ns=4_000,
    dcqcn_rp_timer_ns=900_000, dcqcn_fast_recovery_steps=1, dcqcn_rate_ai_gbps=0.05,
    dcqcn_rate_hai_gbps=0.1, dcqcn_min_rate_gbps=0.1, dcqcn_rate_on_first_cnp=1.0,
    dcqcn_clamp_target_rate=False, dcqcn_cnp_interval_ns=0, window=True, ack_priority="data",
    **_COMMON)
"""SimAI.conf at 400 Gbps: K 800/3200 KB, Pmax 0.2, 900 us rate-increase timer, BDP window,
acks at data priority."""

_DCQCN_PAPER_40G = RoceSettings(
    preset="dcqcn-paper", buffer_bytes=12_000_000, ecn_kmin_bytes=5_000, ecn_kmax_bytes=200_000,
    ecn_pmax=0.01, dcqcn_g=1 / 256, dcqcn_alpha_interval_ns=55_000,
    dcqcn_decrease_interval_ns=50_000, dcqcn_rp_timer_ns=55_000, dcqcn_fast_recovery_steps=5,
    dcqcn_rate_ai_gbps=0.04, dcqcn_rate_hai_gbps=0.2, dcqcn_min_rate_gbps=0.1,
    dcqcn_rate_on_first_cnp=1.0, dcqcn_clamp_target_rate=True, dcqcn_cnp_interval_ns=50_000,
    window=False, ack_priority="high", **_COMMON)
"""Zhu et al., SIGCOMM 2015 (40 Gbps, Trident II 12 MB): Kmin 5 KB, Kmax 200 KB, Pmax 1%,
g 1/256, 55 us timers, F 5, one CNP per 50 us; K scaled by NIC rate / 40 Gbps. The paper's
byte counter (10 MB) is not modelled: increases come from the timer only."""

_HPCC_DCQCN_25G = RoceSettings(
    preset="hpcc-dcqcn", buffer_bytes=8_000_000, ecn_kmin_bytes=100_000, ecn_kmax_bytes=400_000,
    ecn_pmax=0.2, dcqcn_g=1 / 256, dcqcn_alpha_interval_ns=1_000, dcqcn_decrease_interval_ns=4_000,
    dcqcn_rp_timer_ns=300_000, dcqcn_fast_recovery_steps=1, dcqcn_rate_ai_gbps=0.005,
    dcqcn_rate_hai_gbps=0.05, dcqcn_min_rate_gbps=1.0, dcqcn_rate_on_first_cnp=1.0,
    dcqcn_clamp_target_rate=False, dcqcn_cnp_interval_ns=0, window=False, ack_priority="high",
    **_COMMON)
"""The DCQCN runs of the HPCC paper (run.py ``dcqcn``): K 100/400 KB, AI 5 Mbps, HAI 50 Mbps
and buffer 16 MB per 50 Gbps, all scaled by NIC rate / 25 Gbps; 300 us timer."""
