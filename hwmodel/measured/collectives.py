"""Measured NCCL efficiencies and latency corrections of the collective model.

``phantora.collectives.efficiency`` says how they combine into a flow's wire bytes and a
collective's latency, and builds ``DEFAULT_NCCL_EFFICIENCY`` from them; keys are the values of
``LinkKind``, ``Algorithm`` and ``Protocol``. They were fitted by hand to the measurements
named in their sources; rerun ``scripts/validate/validate_collectives.py`` after changing any of
them.
"""

from collections.abc import Mapping
from types import MappingProxyType

from hwmodel.measured.source import UNKNOWN, Measured, Source

_H200X2 = dict(file="scripts/data/collectives/h200x2/results.csv", date="2026-11-22",
               gpu="2x NVIDIA H200 (a two-GPU cloud VM, NV18, NVLS off)",
               nccl="2.28.9+cuda13.0", torch="2.11.0+cu130")
"""``scripts/measure/measure_collectives.py`` runs 1-3
(``scripts/data/collectives/h200x2/README.md``; the 2 and 4 GiB points in
``results_run2.csv``)."""

_H100X8 = dict(file="scripts/validate/validate_collectives.py (H100X8_ALL_REDUCE_US: the "
                    "all_reduce_perf sample output of NVIDIA/dgxc-benchmarking nccl/README.md)",
               date=UNKNOWN, gpu="8x NVIDIA H100 80GB HBM3, one node (NVLS on)", nccl=UNKNOWN,
               torch="n/a (nccl-tests)")
"""The public 8x H100 sweep ``validate_collectives.py`` checks against."""

LINK_EFFICIENCY: Mapping[str, Measured[float]] = MappingProxyType({
    "nvlink": Measured(0.822, Source(
        how="NVLink 4 (H100/H200), 450 GB/s per direction: broadcast (all sends) runs at "
            "368-370 GB/s from 128 MiB to 4 GiB; the NCCL maintainers quote ~370 GB/s "
            "effective (nccl-tests #212)", **_H200X2)),
    "nic": Measured(0.94, Source(
        file="nccl-tests issue #290 (AddyLaddy: \"you should see 46-48GB/s per NIC\")",
        date=UNKNOWN, gpu=UNKNOWN, nccl=UNKNOWN, torch="n/a (nccl-tests)",
        how="400G NDR InfiniBand, 50 GB/s line rate")),
})
"""Fraction of a bottleneck link's line rate that ring/Simple payload reaches, by link kind."""

CTA_GBS: Mapping[str, Measured[float]] = MappingProxyType({
    "simple": Measured(21.0, Source(
        how="24 channels, 64 MiB-1 GiB: all_reduce (duty 2/3) 300-332 GB/s per link, "
            "all_gather / reduce_scatter (duty 1/2) 250-270 GB/s", **_H200X2)),
    "ll": Measured(9.5, Source(
        how="LL at 1 MiB (24 channels): all_reduce 155 GB/s per link, all_gather 119 (forced "
            "Ring/LL at 1 GiB drops to 117 GB/s busbw, which this does not follow)",
        **_H200X2)),
    "ll128": Measured(19.4, Source(
        how="forced Ring/LL128 all_reduce at 1 GiB: busbw 310 GB/s", **_H200X2)),
})
"""Payload one channel (CTA) copies per second, GB/s, by protocol."""

CORRECTION: Mapping[tuple[str, str], Measured[float]] = MappingProxyType({
    ("nvls", "simple"): Measured(1.18, Source(
        how="all_reduce_perf (NVLS, 4-8 GiB): algbw ~330 GB/s at large chunks, i.e. the "
            "NVLinks at ring speed, not at NCCL's modeled 0.85 of it (nvlsEfficiency)",
        **_H100X8)),
    ("tree", "ll128"): Measured(0.77, Source(
        how="forced Tree/LL128 reaches 223 GB/s at 1 GiB; NCCL's ratio gives 288", **_H200X2)),
})
"""Measured / NCCL-modeled throughput, by (algorithm, protocol)."""

CHUNK_OVERHEAD_BYTES: Mapping[tuple[str, str], Measured[int]] = MappingProxyType({
    ("nvls", "simple"): Measured(26_000, Source(
        how="NVLS sweep, 4 MiB-8 GiB: NCCL's 16/32/64/128 KiB NVLS chunks fit time = 25 us + "
            "S / (330 GB/s x chunk / (chunk + 26 kB)) within 7%", **_H100X8)),
})
"""Fixed cost per pipeline chunk, in bytes of transfer, by (algorithm, protocol)."""

GROUPED_P2P_DUTY = Measured(0.75, Source(
    how="all_to_all, 1 MiB-4 GiB (16 then 32 channels per peer): send and receive share each "
        "channel's warps; 0.75 of a collective CTA's throughput fits within 25%", **_H200X2))
"""Share of a p2p CTA's throughput its send gets when the channel also receives."""

_LATENCY_H200X2 = Source(
    how="at 64 KiB, forced variants against NCCL's modeled latency + size/bw: Ring/Simple "
        "19.9 us (15.4), Tree/Simple 20.8 (16.5), Ring/LL 7.9 (8.3), Ring/LL128 16.6 (18.0), "
        "Tree/LL 9.6 (8.5), Tree/LL128 13.5 (16.7); also the 8x H100 public sweep's ring/LL at "
        "8 B: 13.0 (15.0). NVLS keeps NCCL's 25 us, which that sweep supports", **_H200X2)

LATENCY_SCALE: Mapping[tuple[str, str], Measured[float]] = MappingProxyType({
    ("ring", "simple"): Measured(1.3, _LATENCY_H200X2),
    ("tree", "simple"): Measured(1.3, _LATENCY_H200X2),
    ("ring", "ll"): Measured(0.9, _LATENCY_H200X2),
    ("tree", "ll"): Measured(1.1, _LATENCY_H200X2),
    ("ring", "ll128"): Measured(0.9, _LATENCY_H200X2),
    ("tree", "ll128"): Measured(0.8, _LATENCY_H200X2),
})
"""Measured / NCCL-modeled latency, by (algorithm, protocol)."""
