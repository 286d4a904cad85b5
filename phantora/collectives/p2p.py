"""Point-to-point: send/recv, and all_to_all(v) as NCCL's grouped sends to every peer
(``scheduleP2pTasksToPlan`` / ``addP2pToPlan`` in ``src/enqueue.cc``, ``paths.cc``).

A transfer is striped over a few p2p channels (more for bigger messages); LL is used when
each channel gets at most ``NCCL_P2P_LL_THRESHOLD`` bytes, Simple otherwise. Inside a group
(all_to_all) every rank's sends and receives to all peers are in flight together.

NB: NCCL's tuning model has no p2p latency or bandwidth; a transfer is charged one ring/LL
step of latency (``TuningModel.p2p_latency``), LL its line format, and the channels' CTA
throughput (shared with the receive side inside a group, ``NcclEfficiency.grouped_p2p_duty``).
NCCL walks the peers in rounds of at most 8 per channel; here all peers start at once.
Channels of one same-host transfer take the same NVLink path and are one flow; across hosts
each channel is its own flow (own ECMP path).
"""

from collections.abc import Callable, Sequence
from math import ceil

from phantora.collectives.chunking import split_even
from phantora.collectives.comm import Comm
from phantora.collectives.config import Protocol
from phantora.collectives.search import Graphs
from phantora.collectives.system import SystemInfo
from phantora.collectives.writer import FlowWriter
from phantora.network.base import GpuId

P2P_LL_THRESHOLD = 16384
"""``NCCL_P2P_LL_THRESHOLD``: LL for up to this many bytes per channel."""
_P2P_NET_CHUNK = 1 << 17  # NCCL_P2P_NET_CHUNKSIZE (128 KiB), any communicator across hosts
_P2P_NVL_CHUNK = 1 << 19  # NCCL_P2P_NVL_CHUNKSIZE (512 KiB), all-NVLink communicators
_P2P_NET_CHANNEL_GBS = 14.0  # NCCL_P2P_PER_CHANNEL_NET_BW
_MAX_P2P_PER_BATCH = 8  # NCCL_MAX_DEV_WORK_P2P_PER_BATCH


def _pow2_up(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def p2p_channel_limits(comm: Comm, graphs: Graphs) -> tuple[int, int]:
    """``(nChannelsMin, nChannelsMax)`` a transfer may be striped over in this group."""
    p2p_channels = _pow2_up(min(graphs.coll_channels, 64))
    per_peer = 2 * comm.system.gpu.nvlink_links if comm.local_ranks > 1 else 64
    if comm.nnodes > 1:
        per_peer = min(per_peer, max(1, ceil(graphs.net_gbs / _P2P_NET_CHANNEL_GBS)))
    per_peer = _pow2_up(per_peer)
    if comm.nnodes > 1:
        while per_peer * ceil(comm.nranks / _MAX_P2P_PER_BATCH) > p2p_channels and per_peer > 1:
            per_peer //= 2
    n_min = per_peer
    while n_min * comm.nranks > p2p_channels and n_min > 1:
        n_min //= 2
    return n_min, per_peer


def p2p_channels(nbytes: int, comm: Comm, limits: tuple[int, int]) -> int:
    """Channels one transfer of ``nbytes`` is striped over (``addP2pToPlan``)."""
    n_min, n_max = limits
    if nbytes == 0:
        return 1
    step = _P2P_NET_CHUNK if comm.nnodes > 1 else _P2P_NVL_CHUNK
    min_part = step // 2 if comm.nnodes > 1 else step // 8
    max_part = step if comm.nnodes > 1 else step * 32
    channels = min(n_min, ceil(nbytes / min_part))
    part = max(min_part, ceil(nbytes / channels))
    while part > max_part and channels <= n_max // 2:
        channels *= 2
        part = ceil(nbytes / channels)
    return channels


def p2p_transfers(writer_for: Callable[[Protocol, int], FlowWriter], comm: Comm, graphs: Graphs,
                  transfers: Sequence[tuple[GpuId, GpuId, int]], budget: int) -> Protocol:
    """Emit every transfer ``(src, dst, bytes)``; returns the protocol of the largest one.

    ``writer_for(protocol, channels)`` gives the writer for a transfer striped over
    ``channels`` CTAs (their copy throughput may be what limits it).
    """
    limits = p2p_channel_limits(comm, graphs)
    system = comm.system
    planned = []
    for src, dst, nbytes in transfers:
        channels = p2p_channels(nbytes, comm, limits)
        protocol = Protocol.LL if nbytes <= channels * P2P_LL_THRESHOLD else Protocol.SIMPLE
        parts = 1 if system.host_of(src) == system.host_of(dst) else channels
        planned.append((src, dst, nbytes, protocol, channels, parts))
    max_parts = max(1, budget // max(1, len(planned)))
    for src, dst, nbytes, protocol, channels, parts in planned:
        # One flow per channel (tag = channel part) of nbytes / parts each.
        for part, payload in enumerate(split_even(nbytes, min(parts, max_parts))):
            writer_for(protocol, channels).send(src, dst, payload, tag=part)
    largest = max(planned, key=lambda plan: plan[2], default=None)
    return Protocol.SIMPLE if largest is None else largest[3]


def nvlink_sharing(system: SystemInfo, transfers: Sequence[tuple[GpuId, GpuId, int]]) -> int:
    """How many transfers of a group leave one GPU over NVLink at once, at most (1 or more):
    they share its link, so each CTA limit applies to a share of the line rate."""
    leaving: dict[GpuId, int] = {}
    for src, dst, nbytes in transfers:
        if nbytes > 0 and system.host_of(src) == system.host_of(dst):
            leaving[src] = leaving.get(src, 0) + 1
    return max(leaving.values(), default=1)


def pair_bytes(ranks: tuple[GpuId, ...], nbytes: int,
               splits: tuple[tuple[int, ...], ...] | None, dtype_bytes: int
               ) -> list[tuple[GpuId, GpuId, int]]:
    """(src, dst, bytes) of every transfer of an all_to_all (even) or all_to_allv (splits)."""
    n = len(ranks)
    if splits is None:
        per_peer = (nbytes // dtype_bytes // n) * dtype_bytes
        return [(src, dst, per_peer) for src in ranks for dst in ranks if src != dst]
    return [(ranks[i], ranks[j], splits[i][j]) for i in range(n) for j in range(n)
            if i != j and splits[i][j] > 0]
