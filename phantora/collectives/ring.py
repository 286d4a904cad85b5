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
inside a step is lost). Long rings (``NcclConfig.stepwise_ring_ranks``) and rings over the
flow budget merge consecutive steps into blocks (see :func:`_emit_ring`): a 1024-rank ring
is 1023 steps of 1024 flows, too many to simulate per collective. Channels on the same
ring take identical paths and are one flow carrying their summed bytes (NCCL's duplicated
channels: ``c`` and ``c + nSearch``).
"""

from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
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


StepBytes = Callable[[int, int, int], int]
"""``(position, first, stop) -> payload bytes`` a ring position sends over steps
``first .. stop-1``."""


def ring_collective(writer: FlowWriter, comm: Comm, op: CollectiveOp, nbytes: int,
                    dtype_bytes: int, n_channels: int, n_search: int, budget: int, *,
                    stepwise: bool = True) -> None:
    """all_reduce / all_gather / reduce_scatter on every ring: one flow per rank and step
    (``stepwise``, steps merged only above ``budget``), else one block of all steps."""
    rings = build_rings(comm, n_channels, n_search)
    n = comm.nranks
    nsteps = 2 * (n - 1) if op is CollectiveOp.ALL_REDUCE else n - 1
    flows_per_step = sum(n + _pxn_legs(ring) for ring in rings)
    # Steps per flow: as few as the budget allows (one block per ring at the very least);
    # merged blocks add a zero-byte hold per rank and ring.
    blocks = budget // flows_per_step if stepwise else 1
    if stepwise and blocks < nsteps:
        blocks = budget // (flows_per_step + n * len(rings))
    merge = ceil(nsteps / max(1, blocks))
    # Elements of each channel (all_reduce) or of each rank's shard per channel (AG/RS).
    channel_elems = split_even(nbytes // dtype_bytes, n_channels)
    group_rank = {gpu: rank for rank, gpu in enumerate(comm.ranks)}
    for ring in rings:
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
            by_position = [shard[group_rank[gpu]] for gpu in ring.order]
            step_bytes = (_all_gather_steps(by_position) if op is CollectiveOp.ALL_GATHER
                          else _reduce_scatter_steps(by_position))
        _emit_ring(writer, ring, nsteps, merge, step_bytes)


def _window_sums(values: list[int]) -> Callable[[int, int], int]:
    """``(start, count) -> sum(values[i % n] for i in range(start, start + count))`` in O(1):
    merged ring steps sum runs of consecutive chunks (or hop latencies) around the ring."""
    n = len(values)
    prefix = list(accumulate(values + values, initial=0))

    def window(start: int, count: int) -> int:
        laps, rest = divmod(count, n)
        first = start % n
        return laps * prefix[n] + prefix[first + rest] - prefix[first]
    return window


def _all_reduce_steps(chunk: list[int], n: int) -> StepBytes:
    window = _window_sums(chunk)

    def step_bytes(p: int, first: int, stop: int) -> int:
        # Reduce-scatter step s < n-1: position p sends chunk p-1-s (partial sums) to p+1;
        # all-gather step t = s-(n-1): it sends chunk p-t (final values).
        scatter_stop, gather_first = min(stop, n - 1), max(first, n - 1)
        total = 0
        if first < scatter_stop:
            total += window(p - scatter_stop, scatter_stop - first)
        if gather_first < stop:
            total += window(p - (stop - n), stop - gather_first)
        return total
    return step_bytes


def _all_gather_steps(shard: list[int]) -> StepBytes:
    # Step s: position p forwards the shard that started at position p-s.
    window = _window_sums(shard)
    return lambda p, first, stop: window(p - stop + 1, stop - first)


def _reduce_scatter_steps(shard: list[int]) -> StepBytes:
    # Step s: position p sends the partial sum of the shard position p-1-s ends up with.
    window = _window_sums(shard)
    return lambda p, first, stop: window(p - stop, stop - first)


def _pxn_legs(ring: Ring) -> int:
    return sum(1 for p, via in enumerate(ring.via) if via is not None and via != ring.order[p])


def _emit_ring(writer: FlowWriter, ring: Ring, nsteps: int, merge: int,
               step_bytes: StepBytes) -> None:
    """Per step block and position: a flow to the next position after the previous block's
    arrival at this position (merged blocks of ``merge`` steps only above the flow budget).

    NB: a merged block stands for ``merge`` pipelined steps: its flows pay one step's latency
    and a zero-byte flow holds its delivery until the step latencies of the hops the exact
    ring's dependency chain crosses in those steps (step s at p waits for step s-1 at p-1:
    the ``merge`` hops ending at p) have passed. Latency thus overlaps transmission, as it
    does in the unmerged ring where other rings fill a link while one waits.
    """
    n = len(ring.order)
    hop_latency = _window_sums([writer.hop_ns(ring.order[p], ring.order[(p + 1) % n])
                                for p in range(n)])
    arrived: list[tuple[int, ...]] = [()] * n
    for first in range(0, nsteps, merge):
        stop = min(first + merge, nsteps)
        steps = stop - first
        delivered: list[tuple[int, ...]] = [()] * n
        for p in range(n):
            # Chunk(s) of steps first..stop-1 from ring.order[p] to ring.order[p+1].
            chain_ns = hop_latency(p - steps + 1, steps) if merge > 1 else None
            delivered[(p + 1) % n] = writer.relay(
                ring.order[p], ring.order[(p + 1) % n], step_bytes(p, first, stop), ring.tag,
                arrived[p], ring.via[p], chain_ns)
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
            sent[i].append(writer.relay(chain[i], chain[i + 1], payload, tag, deps, via[i]))
