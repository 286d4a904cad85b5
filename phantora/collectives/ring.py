"""Ring algorithms (``src/device/all_reduce.h``, ``all_gather.h``, ``reduce_scatter.h``,
``broadcast.h``, ``reduce.h``; rings from ``src/graph/rings.cc`` and ``search.cc``).

Every channel runs its own ring over its part of the buffer. A ring step moves one chunk
from every rank to the next; a rank forwards what it received at the previous step:

* all_reduce: reduce-scatter (n-1 steps) then all-gather (n-1 steps), ``2(n-1)`` steps;
* all_gather, reduce_scatter: ``n-1`` steps;
* broadcast / reduce: a pipelined chain from (to) the root, chunk by chunk.

Rings across hosts enter and leave every host through the same NIC rail: channel ``c``
enters host ``h`` at the GPU on rail ``c mod localRanks``, visits the other local GPUs in
rail order and leaves through the entry GPU's NIC to the same rail of the next host (PXN,
an extra NVLink hop from the last local GPU to the entry GPU). Same-rail traffic thus stays
on a rail-optimized fabric's rail switch.

NB: one flow per (ring, rank, step): a step carries that rank's chunks of every loop of
every channel in the ring (NCCL splits them into loops of ``nChannels x n x chunkSize`` and
slices of ``NCCL_STEPS`` slots; the links see the same bytes, only the overlap of loops
inside a step is lost). Channels on the same ring take identical paths and are one flow
carrying their summed bytes (NCCL's duplicated channels: ``c`` and ``c + nSearch``).
"""

from collections.abc import Callable
from dataclasses import dataclass
from math import ceil

from phantora.collectives.chunking import plan_pipeline, split_even
from phantora.collectives.comm import Comm
from phantora.collectives.request import CollectiveOp
from phantora.collectives.writer import FlowWriter
from phantora.network.base import GpuId


@dataclass(frozen=True, slots=True)
class Ring:
    """One distinct ring: positions in order, and which channels run on it."""

    order: tuple[GpuId, ...]
    via: tuple[GpuId | None, ...]
    """Per position, the GPU whose NIC carries its send to the next host (None: same host)."""
    channels: tuple[int, ...]
    tag: int


def build_rings(comm: Comm, n_channels: int, n_search: int) -> list[Ring]:
    """The distinct rings; channel ``c`` follows search ring ``c % n_search``."""
    layouts: dict[tuple[GpuId, ...], tuple[tuple[GpuId | None, ...], list[int]]] = {}
    for channel in range(n_channels):
        order, via = _ring_order(comm, channel % n_search)
        layouts.setdefault(order, (via, []))[1].append(channel)
    return [Ring(order, via, tuple(channels), tag)
            for tag, (order, (via, channels)) in enumerate(layouts.items())]


def _ring_order(comm: Comm, search_channel: int
                ) -> tuple[tuple[GpuId, ...], tuple[GpuId | None, ...]]:
    order: list[GpuId] = []
    via: list[GpuId | None] = []
    for node in comm.nodes:
        # One host: every channel is the same cycle through the NVSwitch (rotations are alike).
        entry = search_channel % len(node) if comm.nnodes > 1 else 0
        local = node[entry:] + node[:entry]
        order += local
        via += [None] * (len(local) - 1) + [local[0] if comm.nnodes > 1 else None]
    return tuple(order), tuple(via)


StepBytes = Callable[[int, int], int]
"""``(position, step) -> payload bytes`` a ring position sends at a step."""


def ring_collective(writer: FlowWriter, comm: Comm, op: CollectiveOp, nbytes: int,
                    dtype_bytes: int, n_channels: int, n_search: int, budget: int) -> None:
    """all_reduce / all_gather / reduce_scatter on every ring, one flow per rank and step."""
    rings = build_rings(comm, n_channels, n_search)
    n = comm.nranks
    nsteps = 2 * (n - 1) if op is CollectiveOp.ALL_REDUCE else n - 1
    flows_per_step = sum(n + _pxn_legs(ring) for ring in rings)
    # Steps per flow: as few as the budget allows (one block per ring at the very least).
    merge = ceil(nsteps / max(1, budget // flows_per_step))
    # Elements of each channel (all_reduce) or of each rank's shard per channel (AG/RS).
    channel_elems = split_even(nbytes // dtype_bytes, n_channels)
    for ring in rings:
        rank_at = [comm.rank_of(gpu) for gpu in ring.order]
        if op is CollectiveOp.ALL_REDUCE:
            # Chunk q of a channel is reduced at position q; sizes summed over the ring's channels.
            chunk = [0] * n
            for channel in ring.channels:
                for q, elems in enumerate(split_even(channel_elems[channel], n)):
                    chunk[q] += elems * dtype_bytes
            step_bytes = _all_reduce_steps(chunk, n)
        else:
            # Shard of group rank r (nccl-tests: nbytes / n each), split over the channels.
            shard = [0] * n
            for r, elems in enumerate(split_even(nbytes // dtype_bytes, n)):
                parts = split_even(elems, n_channels)
                shard[r] = sum(parts[c] for c in ring.channels) * dtype_bytes
            by_position = [shard[r] for r in rank_at]
            step_bytes = (_all_gather_steps(by_position, n) if op is CollectiveOp.ALL_GATHER
                          else _reduce_scatter_steps(by_position, n))
        _emit_ring(writer, ring, nsteps, merge, step_bytes)


def _all_reduce_steps(chunk: list[int], n: int) -> StepBytes:
    def step_bytes(p: int, s: int) -> int:
        # Reduce-scatter step s: position p sends chunk p-1-s (partial sums) to p+1;
        # all-gather step t = s-(n-1): it sends chunk p-t (final values).
        return chunk[(p - 1 - s) % n] if s < n - 1 else chunk[(p - (s - (n - 1))) % n]
    return step_bytes


def _all_gather_steps(shard: list[int], n: int) -> StepBytes:
    # Step s: position p forwards the shard that started at position p-s.
    return lambda p, s: shard[(p - s) % n]


def _reduce_scatter_steps(shard: list[int], n: int) -> StepBytes:
    # Step s: position p sends the partial sum of the shard position p-1-s ends up with.
    return lambda p, s: shard[(p - 1 - s) % n]


def _pxn_legs(ring: Ring) -> int:
    return sum(1 for p, via in enumerate(ring.via) if via is not None and via != ring.order[p])


def _emit_ring(writer: FlowWriter, ring: Ring, nsteps: int, merge: int,
               step_bytes: StepBytes) -> None:
    """Per step block and position: a flow to the next position after the previous block's
    arrival at this position (merged blocks of ``merge`` steps only above the flow budget)."""
    n = len(ring.order)
    arrived: list[tuple[int, ...]] = [()] * n
    for first in range(0, nsteps, merge):
        steps = range(first, min(first + merge, nsteps))
        delivered: list[tuple[int, ...]] = [()] * n
        for p in range(n):
            # Chunk(s) of steps `steps` from ring.order[p] to ring.order[p+1].
            payload = sum(step_bytes(p, s) for s in steps)
            delivered[(p + 1) % n] = writer.relay(
                ring.order[p], ring.order[(p + 1) % n], payload, ring.tag, arrived[p],
                hops=len(steps), via=ring.via[p])
        arrived = delivered


def ring_chain(writer: FlowWriter, comm: Comm, op: CollectiveOp, nbytes: int, dtype_bytes: int,
               root: int, n_channels: int, n_search: int, chunk_bytes: int, budget: int) -> None:
    """broadcast (root first) / reduce (root last): each ring as a chunk-pipelined chain."""
    rings = build_rings(comm, n_channels, n_search)
    channel_bytes = [e * dtype_bytes for e in split_even(nbytes // dtype_bytes, n_channels)]
    hops = sum(comm.nranks - 1 + _pxn_legs(ring) for ring in rings)
    pipeline = plan_pipeline(max(channel_bytes), chunk_bytes, max(1, budget // hops))
    root_gpu = comm.ranks[root]
    for ring in rings:
        start = ring.order.index(root_gpu) + (0 if op is CollectiveOp.BROADCAST else 1)
        chain = ring.order[start:] + ring.order[:start]
        via = ring.via[start:] + ring.via[:start]
        # Piece k of the ring: NCCL chunks k*merge .. (k+1)*merge-1 of each of its channels.
        pieces = [0] * pipeline.pieces
        for channel in ring.channels:
            for k, size in enumerate(split_even(channel_bytes[channel], pipeline.pieces)):
                pieces[k] += size
        _emit_chain(writer, chain, via, pieces, ring.tag, pipeline.window)


def _emit_chain(writer: FlowWriter, chain: tuple[GpuId, ...], via: tuple[GpuId | None, ...],
                pieces: list[int], tag: int, window: int) -> None:
    """Hop i sends piece k after receiving it (hop i-1) and once hop i+1 has forwarded piece
    k-window, freeing a slot in the receiver's FIFO."""
    n_hops = len(chain) - 1
    sent: list[list[tuple[int, ...]]] = [[] for _ in range(n_hops)]
    for k, payload in enumerate(pieces):
        for i in range(n_hops):
            deps = list(sent[i - 1][k]) if i > 0 else []
            if i + 1 < n_hops and k >= window:
                deps += sent[i + 1][k - window]
            # Piece k (payload bytes) from chain[i] to chain[i+1].
            sent[i].append(writer.relay(chain[i], chain[i + 1], payload, tag, deps,
                                        via=via[i]))
