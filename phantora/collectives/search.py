"""What NCCL's topology search (``src/graph/search.cc``, ``connect.cc``) finds for a communicator.

NCCL searches ring, tree and NVLS *graphs*: a number of channels and a per-channel bandwidth
(GB/s) that fit the NVLink and NIC capacities, trying speeds from a per-architecture list. The
tuning model (:mod:`phantora.collectives.tuning`) turns them into predicted bandwidths, and
the number of channels (CTAs) a collective runs on follows from them.

NB: this is a closed-form emulation for the systems phantora builds (every host an NVSwitch,
one NIC per GPU), not NCCL's backtracking search over PCIe trees: a channel at speed ``s``
needs ``s`` on every NVLink it crosses and on its NIC. Multi-host rings enter and leave each
host through the same NIC (PXN), so every local GPU sends over NVLink once per channel.
"""

from collections.abc import Callable
from dataclasses import dataclass
from math import ceil, floor

from phantora.collectives.comm import Comm
from phantora.collectives.config import NcclConfig

MAX_CHANNELS = 64
"""``MAXCHANNELS``: the most channels (CTAs) a communicator has."""
_SEARCH_MAX_CHANNELS = MAX_CHANNELS // 2
"""Ring graphs search at most ``MAXCHANNELS / 2`` channels (``init.cc``)."""
_EPS = 1e-6

# Per-link NVLink bandwidth NCCL assumes (``SM80/SM90/SM100_NVLINK_BW``, ``topo.h``), GB/s.
_NVLINK_LINK_GBS = {80: 20.0, 90: 20.6, 100: 40.1}
_PCI_BW_GBS = 12.0  # ``PCI_BW``; also the threshold below which Simple uses 256 threads

# Speeds the search tries, highest first (``search.cc``), GB/s per channel.
_SPEEDS_INTRA = {
    0: (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    90: (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    100: (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
_SPEEDS_INTER = {
    0: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
        2.4, 1.2, 0.24, 0.12),
    90: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
         0.24, 0.12),
    100: (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
          6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
}
# NVLS CTAs of a one-host communicator (``NVLS_NCHANNELS_SM90`` / ``_SM100_NVL``, nvls.cc).
_NVLS_CHANNELS = {90: 16, 100: 24}


@dataclass(frozen=True, slots=True)
class Graph:
    """One searched graph: ``n_channels`` channels of ``bw_intra`` / ``bw_inter`` GB/s each."""

    n_channels: int
    bw_intra: float
    bw_inter: float


@dataclass(frozen=True, slots=True)
class Graphs:
    """Everything the tuning model and the planners need from the search."""

    ring: Graph
    tree: Graph
    nvls: Graph | None
    """``None`` where NVLS is off or unsupported (pre-Hopper, one GPU per host, several hosts)."""
    coll_channels: int
    """``comm->nChannels``: CTAs available to ring and tree collectives."""
    nvls_channels: int
    nvlink_gbs: float
    """NVLink bandwidth per GPU and direction as NCCL counts it."""
    net_gbs: float
    """NIC bandwidth per GPU and direction as NCCL counts it."""


def arch_key(sm_arch: int) -> int:
    """The tuning-table generation: 100 (Blackwell), 90 (Hopper), 80 (Ampere) or 0 (older)."""
    return 100 if sm_arch >= 100 else 90 if sm_arch >= 90 else 80 if sm_arch >= 80 else 0


def nccl_nvlink_gbs(comm: Comm) -> float:
    """NVLink GB/s per GPU as NCCL assumes: links x per-link figure, scaled to the line rate."""
    gpu = comm.system.gpu
    per_link = _NVLINK_LINK_GBS.get(arch_key(gpu.sm_arch), _NVLINK_LINK_GBS[80])
    return gpu.nvlink_links * per_link * comm.system.nvlink_gbps / gpu.nvlink_gbps


def search_graphs(comm: Comm, config: NcclConfig) -> Graphs:
    """Ring, tree and NVLS graphs and channel counts NCCL would settle on for ``comm``."""
    arch = arch_key(comm.system.gpu.sm_arch)
    nvl = nccl_nvlink_gbs(comm)
    net = comm.system.nic_gbps / 8.0
    multi = comm.nnodes > 1
    speed_table = _SPEEDS_INTER if multi else _SPEEDS_INTRA
    speeds = speed_table.get(arch, speed_table[0])
    local = comm.local_ranks

    ring = _search(speeds, _ring_capacity(local, multi, nvl, net), arch,
                   min_channels=1, max_channels=_SEARCH_MAX_CHANNELS)
    tree = _search(speeds, _tree_capacity(local, multi, nvl, net), arch,
                   min_channels=ring.n_channels, max_channels=ring.n_channels,
                   raise_intra_only=True)
    nvls = None
    if config.nvls is not False and arch >= 90 and not multi and local >= 2:
        nvls = _search_nvls(speeds, local, nvl)

    channels = min(MAX_CHANNELS, 2 * ring.n_channels)
    if arch >= 90 and multi and ring.bw_intra > 45.0 and channels < 16:
        channels *= 2  # "4 compute channels per search channel" (connect.cc)
    if config.max_channels is not None:
        channels = min(channels, config.max_channels)
    if config.min_channels is not None:
        channels = max(channels, config.min_channels)
    nvls_channels = _NVLS_CHANNELS.get(arch, 16) if nvls is not None else 0
    return Graphs(ring, tree, nvls, channels, nvls_channels, nvl, net)


Capacity = Callable[[float, float], int]
"""How many channels the links carry at ``(intra, inter)`` GB/s per channel."""


def _ring_capacity(local: int, multi: bool, nvl: float, net: float) -> Capacity:
    def channels(intra: float, inter: float) -> int:
        limits = []
        if local > 1:
            # Single host: each channel crosses every GPU's NVLink once in and once out.
            # Several hosts: the intra-host hops plus the PXN hop to the NIC's GPU, once each.
            limits.append(floor(nvl / intra + _EPS))
        if multi:
            limits.append(local * floor(net / inter + _EPS))  # one NIC per channel
        return min(limits) if limits else _SEARCH_MAX_CHANNELS
    return channels


def _tree_capacity(local: int, multi: bool, nvl: float, net: float) -> Capacity:
    def channels(intra: float, inter: float) -> int:
        limits = []
        if local > 1:
            # A chain through the host: all but the last GPU send once per channel.
            limits.append(floor(nvl * local / ((local - 1) * intra) + _EPS))
        if multi:
            limits.append(local * floor(net / inter + _EPS))
        return min(limits) if limits else _SEARCH_MAX_CHANNELS
    return channels


def _search(speeds: tuple[float, ...], capacity: Capacity, arch: int, min_channels: int,
            max_channels: int, raise_intra_only: bool = False) -> Graph:
    """Pass 1 (best channels x speed), channel duplication, pass 2 (raise the speed)."""
    best_channels, best_speed = 0, 0.0
    for speed in speeds:
        if best_channels and speed / best_speed <= 0.49:
            break
        found = min(capacity(speed, speed), max_channels)
        if found >= min_channels and found * speed > best_channels * best_speed + _EPS:
            best_channels, best_speed = found, speed
        if best_channels == max_channels:
            break
    if not best_channels:
        # NCCL falls back to one channel at the slowest speed rather than failing.
        return Graph(min_channels, speeds[-1], speeds[-1])
    channels, bw = best_channels, best_speed
    if bw >= 25.0 and not (arch > 80 and bw < 50.0 and channels > 4):
        duplicated = min(2 * channels, max_channels)
        bw /= ceil(duplicated / channels)
        channels = duplicated
    intra, inter = bw, bw
    for speed in sorted(s for s in speeds if s > bw + _EPS):
        if raise_intra_only:
            # Trees raise bwIntra one step at a time while it stays below 2x bwInter.
            if intra >= 2 * inter - _EPS or capacity(speed, inter) < channels:
                break
            intra = speed
        elif capacity(speed, speed) >= channels:
            intra = inter = speed
    return Graph(channels, intra, inter)


def _search_nvls(speeds: tuple[float, ...], local: int, nvl: float) -> Graph:
    """One NVLS channel per GPU; a head moves twice its share through its NVLink."""
    fitting = [s for s in speeds if (local + 1) * s <= nvl + _EPS]
    bw_intra = fitting[0] if fitting else speeds[-1]
    # Pass 2 raises bwInter (unused inside one host) while it is below 2x bwIntra.
    bw_inter = bw_intra
    for speed in reversed(speeds):
        if speed > bw_inter and bw_inter < 2 * bw_intra:
            bw_inter = speed
    return Graph(local, bw_intra, bw_inter)


def uses_pci_threads(graphs: Graphs) -> bool:
    """Ring/Simple runs 256 threads per CTA when the ring is PCIe-slow (``tuning.cc``)."""
    return graphs.ring.bw_intra * graphs.ring.n_channels <= _PCI_BW_GBS
