"""How NCCL cuts a buffer: channels, chunks (``calcCollChunking``, ``enqueue.cc``) and slots.

Each channel owns a contiguous part of the buffer and moves it in chunks through a FIFO of
``NCCL_STEPS`` slots per connection: a sender may run at most that many steps ahead of its
receiver. Pipelined algorithms (tree, broadcast/reduce chains) are modeled chunk by chunk;
when that would exceed the flow budget, consecutive chunks are merged into *pieces*.
"""

from dataclasses import dataclass
from math import ceil

from phantora.collectives.config import Algorithm, Protocol

NCCL_STEPS = 8
"""Slots per connection FIFO (``device.h``)."""

# Default per-connection buffers (``init.cc``): LL 8 lines x 512 threads x 8 steps x 16 B;
# LL128 120 elements x 640 threads x 8 steps x 8 B; Simple 4 MiB.
_BUFFER_BYTES = {Protocol.LL: 8 * 512 * NCCL_STEPS * 16,
                 Protocol.LL128: 120 * 640 * NCCL_STEPS * 8,
                 Protocol.SIMPLE: 1 << 22}
# Chunks are multiples of these (``ncclProtoGrainSize``).
_GRAIN_BYTES = {Protocol.LL: 16, Protocol.LL128: 32 * 8 // 16 * 15 * 8, Protocol.SIMPLE: 512}


def split_even(total: int, parts: int) -> list[int]:
    """``total`` units in ``parts`` near-equal shares, larger ones first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def step_chunk_bytes(algorithm: Algorithm, protocol: Protocol, nbytes: int, n_channels: int,
                     nnodes: int, ppn: float) -> int:
    """Payload bytes of one pipeline chunk of a tree or a broadcast/reduce chain.

    These run one step per chunk (``chunkSteps = 1``); LL lines carry half their bytes,
    LL128 lines 120 of 128; tree/LL128 shrinks chunks for small sizes so the pipeline fills.
    """
    chunk = _BUFFER_BYTES[protocol] // NCCL_STEPS
    if protocol is Protocol.LL:
        chunk //= 2
    elif protocol is Protocol.LL128:
        chunk = chunk // 16 * 15
        if algorithm is Algorithm.TREE:
            steps = 1 + (nnodes.bit_length() - 1) + 0.1 * ppn
            while nbytes // (n_channels * chunk) < steps * 64 / ppn and chunk > 131072:
                chunk //= 2
            while nbytes // (n_channels * chunk) < steps * 16 / ppn and chunk > 32768:
                chunk //= 2
    grain = _GRAIN_BYTES[protocol]
    return max(grain, chunk // grain * grain)


@dataclass(frozen=True, slots=True)
class Pipeline:
    """A channel's data cut into ``pieces`` flows of ``merge`` NCCL chunks each."""

    pieces: int
    merge: int

    @property
    def window(self) -> int:
        """Pieces a sender may have ahead of its receiver (the ``NCCL_STEPS`` slots)."""
        return max(1, ceil(NCCL_STEPS / self.merge))


def plan_pipeline(channel_bytes: int, chunk_bytes: int, max_pieces: int) -> Pipeline:
    """NCCL's chunk count for one channel, merged down to at most ``max_pieces`` pieces."""
    chunks = max(1, ceil(channel_bytes / chunk_bytes))
    pieces = max(1, min(chunks, max_pieces))
    merge = ceil(chunks / pieces)
    return Pipeline(ceil(chunks / merge), merge)


_NVLS_CHUNK_BYTES = 128 * 1024
"""``NCCL_NVLS_CHUNKSIZE`` default (``nvls.cc``)."""


def nvls_chunk_bytes(nbytes: int, n_channels: int, n_heads: int) -> int:
    """NVLS chunk on one host: 128 KiB, shrunk to 64/32/16 KiB when the buffer would give
    each of the ``n_channels x n_heads`` concurrent operations few chunks."""
    chunk = min(_BUFFER_BYTES[Protocol.SIMPLE] // NCCL_STEPS, _NVLS_CHUNK_BYTES)
    concurrent = n_channels * n_heads
    for factor, floor in ((64, 65536), (8, 32768), (2, 16384)):
        if nbytes < factor * concurrent * chunk and chunk > floor:
            chunk = floor
    return chunk
