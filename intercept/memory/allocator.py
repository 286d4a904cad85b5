"""A model of PyTorch's CUDA caching allocator for one simulated GPU (pure Python, no torch).

What ``torch.cuda.memory_allocated()``, ``memory_reserved()``, ``mem_get_info()`` and the
out-of-memory error report depends on the allocator's rounding, caching and fragmentation, not
only on the bytes of live tensors. This module follows ``c10/cuda/CUDACachingAllocator.cpp``
(PyTorch 2.x) with its default configuration (no ``PYTORCH_CUDA_ALLOC_CONF``: no expandable
segments, no ``max_split_size_mb``, no garbage-collection threshold):

* sizes round up to :data:`MIN_BLOCK_BYTES`; requests up to :data:`SMALL_REQUEST_MAX_BYTES`
  come from the small pool, whose segments are :data:`SMALL_SEGMENT_BYTES`; larger ones from
  the large pool, whose segments are :data:`LARGE_SEGMENT_BYTES` for requests below
  :data:`MIN_LARGE_ALLOC_BYTES` and the request rounded up to :data:`LARGE_ROUNDING_BYTES`
  otherwise;
* cached blocks belong to the stream that allocated them: a request takes the smallest free
  block of its pool and stream that fits (best fit, ties by address) and splits off the rest
  if at least :data:`MIN_BLOCK_BYTES` (small pool) or more than
  :data:`SMALL_REQUEST_MAX_BYTES` (large pool) would remain;
* a freed block merges with free neighbours of its segment;
* without a fitting block a new segment is "cudaMalloc'ed"; if the device has no room for it,
  every cached segment with no block in use is released and the allocation retried once
  (``num_alloc_retries``); if that fails too, :class:`OutOfMemoryError` with PyTorch's message;
* :meth:`CachingAllocator.empty_cache` releases every cached segment with no block in use;
* a block used on another stream (:meth:`CachingAllocator.record_stream`) is not reused
  after its free until the host has synchronised with the device
  (:meth:`CachingAllocator.synchronized`), ``empty_cache`` or an out-of-memory retry.
  (The real allocator polls CUDA events at each allocation; the rank cannot see GPU progress
  without a round trip to the simulator, so the next host synchronisation stands in for it.)

The device: :attr:`CachingAllocator.capacity_bytes` is what ``cudaMalloc`` can hand out (the
GPU's memory minus :data:`CUDA_CONTEXT_BYTES`); ``mem_get_info``'s free is that minus the
reserved segments. Statistics are PyTorch's ``DeviceStats``: every counter has ``current``,
``peak``, ``allocated`` (total increase) and ``freed`` (total decrease), for the whole device
and per pool, as ``torch.cuda.memory_stats_as_nested_dict()`` returns them.

Not modelled: expandable segments and the other ``PYTORCH_CUDA_ALLOC_CONF`` options, CUDA-graph
private pools, oversize blocks (``max_split_size``), IPC. Deterministic: virtual addresses are
handed out in order, so the same calls give the same blocks.

Its CPU cost per call and its validation: ``docs/models/memory.md``.
"""

from bisect import bisect_left, insort
from collections.abc import Iterator

MIN_BLOCK_BYTES = 512
"""Every block is a multiple of this (``kMinBlockSize``)."""
SMALL_REQUEST_MAX_BYTES = 2**20
"""Largest request served by the small pool (``kSmallSize``)."""
SMALL_SEGMENT_BYTES = 2 * 2**20
"""Small-pool segments (``kSmallBuffer``)."""
LARGE_SEGMENT_BYTES = 20 * 2**20
"""Large-pool segment for requests below :data:`MIN_LARGE_ALLOC_BYTES` (``kLargeBuffer``)."""
MIN_LARGE_ALLOC_BYTES = 10 * 2**20
"""Requests from here on get a segment of their own size (``kMinLargeAlloc``)."""
LARGE_ROUNDING_BYTES = 2 * 2**20
"""Such segments round up to this (``kRoundLarge``)."""
CUDA_CONTEXT_BYTES = 512 * 2**20
"""Device memory a process's CUDA context holds outside the caching allocator (driver state,
loaded kernels, per-SM local memory): ``mem_get_info``'s free memory never includes it. Not
measured here (no device time for it): PyTorch's maintainers quote ~300 MB (pytorch/pytorch
#107667, 2023) and "around 400MB if CUDA >= 11.7 is used and lazy module loading enabled"
(#109888, 2023; lazy loading is PyTorch's default); an H100's 132 SMs reserve more local
memory than those GPUs, hence 512 MiB, one figure for every GPU. Replace it by
``total - mem_get_info()[0]`` right after ``torch.cuda.init()`` on a measured H100/H200."""

STAT_KINDS = ("all", "small_pool", "large_pool")
"""Pool breakdown of every counter (PyTorch's ``StatType``: aggregate, small, large)."""
_ALL, _SMALL, _LARGE = 0, 1, 2
METRICS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
           "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
"""PyTorch's ``DeviceStats`` counters, in ``memory_stats_as_nested_dict()``'s order."""
(_ALLOCATION, _SEGMENT, _ACTIVE, _INACTIVE_SPLIT, _ALLOCATED_BYTES, _RESERVED_BYTES,
 _ACTIVE_BYTES, _INACTIVE_SPLIT_BYTES, _REQUESTED_BYTES) = (3 * i for i in range(len(METRICS)))
"""Slot of a counter's aggregate; ``+ _SMALL`` / ``+ _LARGE`` its pools."""


class OutOfMemoryError(RuntimeError):
    """Raised when a request cannot be met (the device layer may raise torch's own instead)."""


class DeviceStats:
    """PyTorch's allocator counters: each has ``current``, ``peak``, ``allocated`` (total
    increase) and ``freed`` (total decrease), for the device and per pool.

    Kept in flat lists indexed by slot (counter + pool) and updated by straight-line code: they
    change on every allocation and free, which must stay cheap. ``allocated`` is derived
    (``freed + current - current at the last reset``). ``active`` is derived too: a block is
    active while allocated or freed but still used by another stream ("pending"), so active =
    allocated + pending, and only its peak while something is pending needs a counter of its
    own.
    """

    def __init__(self) -> None:
        slots = 3 * len(METRICS)
        self.current = [0] * slots
        self.peak = [0] * slots
        self.freed = [0] * slots
        self._base = [0] * slots
        """``current`` at the last reset of the accumulated counters."""
        self.pending = [0, 0, 0, 0, 0, 0]
        """Blocks (3 slots) and bytes (3 slots) freed but still used by another stream."""
        self._pending_in = [0] * 6
        self._pending_out = [0] * 6
        """What became pending, and what stopped being pending, since the last reset."""
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

    def on_alloc(self, kind: int, size: int, requested: int) -> None:
        """A block of ``size`` bytes (``requested`` asked for) was handed out."""
        # unrolled: this runs for every tensor the script creates
        current, peak = self.current, self.peak
        slot = _ALLOCATED_BYTES
        value = current[slot] = current[slot] + size
        if value > peak[slot]:
            peak[slot] = value
        slot += kind
        value = current[slot] = current[slot] + size
        if value > peak[slot]:
            peak[slot] = value
        slot = _ALLOCATION
        value = current[slot] = current[slot] + 1
        if value > peak[slot]:
            peak[slot] = value
        slot += kind
        value = current[slot] = current[slot] + 1
        if value > peak[slot]:
            peak[slot] = value
        slot = _REQUESTED_BYTES
        value = current[slot] = current[slot] + requested
        if value > peak[slot]:
            peak[slot] = value
        slot += kind
        value = current[slot] = current[slot] + requested
        if value > peak[slot]:
            peak[slot] = value
        if self.pending[_ALL]:  # active exceeds allocated: its peak needs its own counter
            for active, allocated, pending in ((_ACTIVE, _ALLOCATION, 0),
                                               (_ACTIVE_BYTES, _ALLOCATED_BYTES, 3)):
                for k in (_ALL, kind):
                    value = current[allocated + k] + self.pending[pending + k]
                    if value > peak[active + k]:
                        peak[active + k] = value

    def on_free(self, kind: int, size: int, requested: int) -> None:
        """A block of ``size`` bytes was given back; ``requested`` of it stops being active
        (0 while the block stays active, see ``pending``)."""
        current, freed = self.current, self.freed
        slot = _ALLOCATED_BYTES
        current[slot] -= size
        freed[slot] += size
        slot += kind
        current[slot] -= size
        freed[slot] += size
        slot = _ALLOCATION
        current[slot] -= 1
        freed[slot] += 1
        slot += kind
        current[slot] -= 1
        freed[slot] += 1
        if requested:
            slot = _REQUESTED_BYTES
            current[slot] -= requested
            freed[slot] += requested
            slot += kind
            current[slot] -= requested
            freed[slot] += requested

    def add_inactive_split(self, kind: int, nbytes: int, count: int) -> None:
        """Cached pieces of split segments (which ``empty_cache`` cannot release) change by
        ``count`` blocks of ``nbytes`` in all."""
        if nbytes:
            self.add(_INACTIVE_SPLIT_BYTES, kind, nbytes)
        if count:
            self.add(_INACTIVE_SPLIT, kind, count)

    def add(self, slot: int, kind: int, amount: int) -> None:
        """Change counter ``slot`` of the device and of pool ``kind`` by ``amount``."""
        current = self.current
        pool_slot = slot + kind
        value = current[slot] = current[slot] + amount
        pool_value = current[pool_slot] = current[pool_slot] + amount
        if amount < 0:
            freed = self.freed
            freed[slot] -= amount
            freed[pool_slot] -= amount
        else:
            peak = self.peak
            if value > peak[slot]:
                peak[slot] = value
            if pool_value > peak[pool_slot]:
                peak[pool_slot] = pool_value

    def add_pending(self, kind: int, size: int, count: int) -> None:
        """``count`` blocks of ``size`` bytes in all start (> 0) or stop (< 0) being pending."""
        for offset, amount in ((0, count), (3, size)):
            for k in (_ALL, kind):
                self.pending[offset + k] += amount
                if amount > 0:
                    self._pending_in[offset + k] += amount
                else:
                    self._pending_out[offset + k] -= amount

    def stat(self, slot: int) -> dict[str, int]:
        """Counter ``slot`` as PyTorch reports it."""
        metric, kind = divmod(slot, 3)
        if metric * 3 in (_ACTIVE, _ACTIVE_BYTES):
            return self._active(metric * 3 == _ACTIVE_BYTES, kind)
        current = self.current[slot]
        freed = self.freed[slot]
        return {"current": current, "peak": self.peak[slot],
                "allocated": freed + current - self._base[slot], "freed": freed}

    def _active(self, in_bytes: bool, kind: int) -> dict[str, int]:
        allocated = self.stat((_ALLOCATED_BYTES if in_bytes else _ALLOCATION) + kind)
        pending = 3 * in_bytes + kind
        slot = (_ACTIVE_BYTES if in_bytes else _ACTIVE) + kind
        return {"current": allocated["current"] + self.pending[pending],
                "peak": max(allocated["peak"], self.peak[slot]),
                "allocated": allocated["allocated"],
                "freed": (allocated["freed"] - self._pending_in[pending]
                          + self._pending_out[pending])}

    def reset_peak(self) -> None:
        self.peak[:] = self.current
        for active, allocated, pending in ((_ACTIVE, _ALLOCATION, 0),
                                           (_ACTIVE_BYTES, _ALLOCATED_BYTES, 3)):
            for k in (_ALL, _SMALL, _LARGE):
                self.peak[active + k] = self.current[allocated + k] + self.pending[pending + k]

    def reset_accumulated(self) -> None:
        self.freed = [0] * len(self.freed)
        self._base[:] = self.current
        self._pending_in = [0] * 6
        self._pending_out = [0] * 6
        self.num_alloc_retries = self.num_ooms = self.num_sync_all_streams = 0
        self.num_device_alloc = self.num_device_free = 0

    def nested(self) -> dict[str, object]:
        """``torch.cuda.memory_stats_as_nested_dict()``."""
        nested: dict[str, object] = {
            name: {kind: self.stat(3 * m + k) for k, kind in enumerate(STAT_KINDS)}
            for m, name in enumerate(METRICS)}
        zero = {"current": 0, "peak": 0, "allocated": 0, "freed": 0}
        nested.update({
            "num_alloc_retries": self.num_alloc_retries, "num_ooms": self.num_ooms,
            "num_sync_all_streams": self.num_sync_all_streams,
            "num_device_alloc": self.num_device_alloc, "num_device_free": self.num_device_free,
            "num_oom_rejections": 0,
            "oversize_allocations": dict(zero), "oversize_segments": dict(zero),
            "max_split_size": -1,  # unlimited: SIZE_MAX as int64
        })
        return nested


class Block:
    """A range of a segment: in use, cached in its pool, or freed but still used by a stream."""

    __slots__ = ("addr", "allocated", "cached", "next", "prev", "requested", "size", "small",
                 "stream", "stream_uses")

    def __init__(self, addr: int, size: int, stream: int, small: bool) -> None:
        self.addr = addr
        self.size = size
        self.requested = 0
        self.stream = stream
        self.small = small
        self.prev: Block | None = None
        self.next: Block | None = None
        """Neighbours in the same segment (``None`` at its ends)."""
        self.allocated = False
        self.cached = False
        """In its pool's free list (free and reusable)."""
        self.stream_uses: set[int] | None = None
        """Other streams the block was used on (``record_stream``), if any."""

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else "cached" if self.cached else "pending"
        return (f"Block(addr={self.addr:#x}, size={self.size}, stream={self.stream}, "
                f"{'small' if self.small else 'large'}, {state})")


_FreeList = list[tuple[int, int, Block]]
"""A pool of one stream: ``(size, addr, block)`` sorted, so bisection is best fit."""


def round_size(nbytes: int) -> int:
    """The block size of a request: at least :data:`MIN_BLOCK_BYTES`, a multiple of it."""
    if nbytes < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    return -(-nbytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


def segment_size(block_bytes: int) -> int:
    """Bytes ``cudaMalloc``'ed for a block of ``block_bytes`` that no cached block fits."""
    if block_bytes <= SMALL_REQUEST_MAX_BYTES:
        return SMALL_SEGMENT_BYTES
    if block_bytes < MIN_LARGE_ALLOC_BYTES:
        return LARGE_SEGMENT_BYTES
    return -(-block_bytes // LARGE_ROUNDING_BYTES) * LARGE_ROUNDING_BYTES


def format_size(nbytes: int) -> str:
    """c10's size pretty-printer, as it appears in out-of-memory messages."""
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    if nbytes <= 2**20:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= 2**30:
        return f"{nbytes / 2**20:.2f} MiB"
    return f"{nbytes / 2**30:.2f} GiB"


class CachingAllocator:
    """The caching allocator of one GPU (see the module docstring).

    Not thread-safe and not reentrant: the caller serialises calls (the fake device holds a
    lock and defers frees that arrive while a call is running).
    """

    def __init__(self, device: int, total_bytes: int, context_bytes: int = CUDA_CONTEXT_BYTES,
                 oom_error: type[Exception] = OutOfMemoryError) -> None:
        if not 0 <= context_bytes < total_bytes:
            raise ValueError(f"context of {context_bytes} bytes does not fit in a GPU of "
                             f"{total_bytes} bytes")
        self.device = device
        self.total_bytes = total_bytes
        self.capacity_bytes = total_bytes - context_bytes
        """What ``cudaMalloc`` can hand out in all."""
        self.allowed_bytes: int | None = None
        """``set_per_process_memory_fraction``'s limit on reserved memory, if set."""
        self.stats = DeviceStats()
        self._oom_error = oom_error
        self._pools: tuple[dict[int, _FreeList], dict[int, _FreeList]] = ({}, {})
        """[large pool, small pool]: stream -> its free list."""
        self._pending: list[tuple[int, Block]] = []
        """Freed blocks still used by other streams, with the synchronisations before."""
        self._next_addr = 1 << 32
        self._syncs = 0
        """Host synchronisations so far (pending blocks freed before one are reusable)."""

    @property
    def allocated_bytes(self) -> int:
        """``torch.cuda.memory_allocated()``."""
        return self.stats.current[_ALLOCATED_BYTES]

    @property
    def reserved_bytes(self) -> int:
        """``torch.cuda.memory_reserved()``."""
        return self.stats.current[_RESERVED_BYTES]

    def free_bytes(self) -> int:
        """``cudaMemGetInfo``'s free memory: what neither the context nor a segment holds."""
        return self.capacity_bytes - self.stats.current[_RESERVED_BYTES]

    def malloc(self, nbytes: int, stream: int) -> Block:
        """A block of at least ``nbytes`` for use on ``stream``; raises the out-of-memory error.

        ``nbytes`` must be positive (PyTorch hands out no block for an empty storage).
        """
        if self._pending:
            self._process_events()
        size = round_size(nbytes)
        small = size <= SMALL_REQUEST_MAX_BYTES
        pools = self._pools[small]
        free_list = pools.get(stream)
        if free_list is None:
            free_list = pools[stream] = []
        i = bisect_left(free_list, (size,))
        if i < len(free_list):
            block = free_list.pop(i)[2]
            block.cached = False
            was_split = block.prev is not None or block.next is not None
        else:
            block = self._new_segment(size, stream, small)
            was_split = False
        kind = _SMALL if small else _LARGE
        remaining = block.size - size
        if (remaining >= MIN_BLOCK_BYTES) if small else (remaining > SMALL_REQUEST_MAX_BYTES):
            block = self._split(block, size, free_list)
            if was_split:  # a cached piece of a segment shrinks
                self.stats.add_inactive_split(kind, -size, 0)
            else:  # the rest of a whole segment becomes a cached piece
                self.stats.add_inactive_split(kind, remaining, 1)
        elif was_split:  # a cached piece is taken whole
            self.stats.add_inactive_split(kind, -size, -1)
        block.allocated = True
        block.requested = nbytes
        self.stats.on_alloc(kind, block.size, nbytes)
        return block

    def free(self, block: Block) -> None:
        """Give ``block`` back: cached for reuse on its stream, or pending while another stream
        it was recorded on may still use it."""
        if not block.allocated:
            raise ValueError(f"{block} is not allocated")
        block.allocated = False
        kind = _SMALL if block.small else _LARGE
        if block.stream_uses:
            self.stats.on_free(kind, block.size, 0)
            self._pending.append((self._syncs, block))
            self.stats.add_pending(kind, block.size, 1)
        else:
            self.stats.on_free(kind, block.size, block.requested)
            self._free_block(block, kind)

    def record_stream(self, block: Block, stream: int) -> None:
        """``tensor.record_stream(stream)``: ``block`` is also used on ``stream``."""
        if stream != block.stream:
            if block.stream_uses is None:
                block.stream_uses = set()
            block.stream_uses.add(stream)

    def synchronized(self) -> None:
        """The host waited for the device: streams' earlier uses of freed blocks are over."""
        self._syncs += 1

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: release every cached segment with no block in use."""
        self._release_cached_blocks()

    def set_allowed_fraction(self, fraction: float) -> None:
        """``set_per_process_memory_fraction``: reserve at most ``fraction`` of the GPU."""
        self.allowed_bytes = int(fraction * self.total_bytes)

    def blocks(self) -> Iterator[Block]:
        """Every cached block, then every pending one (for tests and summaries)."""
        for pools in self._pools:
            for free_list in pools.values():
                for _, _, block in free_list:
                    yield block
        for _, block in self._pending:
            yield block

    # --- internals -----------------------------------------------------------------------------

    def _new_segment(self, size: int, stream: int, small: bool) -> Block:
        """A fresh segment holding ``size``; frees the cache and retries once, else raises."""
        alloc_bytes = segment_size(size)
        stats = self.stats
        if not self._fits(alloc_bytes):
            self._release_cached_blocks()
            stats.num_alloc_retries += 1
            if not self._fits(alloc_bytes):
                stats.num_ooms += 1
                raise self._oom_error(self._oom_message(alloc_bytes))
        block = Block(self._next_addr, alloc_bytes, stream, small)
        # segments never touch: the gap keeps neighbours of different segments apart
        self._next_addr += alloc_bytes + LARGE_ROUNDING_BYTES
        kind = _SMALL if small else _LARGE
        stats.add(_RESERVED_BYTES, kind, alloc_bytes)
        stats.add(_SEGMENT, kind, 1)
        stats.num_device_alloc += 1
        return block

    def _fits(self, alloc_bytes: int) -> bool:
        reserved = self.stats.current[_RESERVED_BYTES]
        if self.allowed_bytes is not None and reserved + alloc_bytes > self.allowed_bytes:
            return False
        return reserved + alloc_bytes <= self.capacity_bytes

    def _split(self, block: Block, size: int, free_list: _FreeList) -> Block:
        """Cut ``size`` off the front of ``block``; the rest stays cached. Returns the front."""
        front = Block(block.addr, size, block.stream, block.small)
        front.prev = block.prev
        if front.prev is not None:
            front.prev.next = front
        front.next = block
        block.prev = front
        block.addr += size
        block.size -= size
        block.cached = True
        insort(free_list, (block.size, block.addr, block))
        return front

    def _free_block(self, block: Block, kind: int) -> None:
        """Return ``block`` to its pool, merged with free neighbours."""
        free_list = self._pools[block.small][block.stream]
        split_bytes = split_count = 0
        prev, nxt = block.prev, block.next
        if prev is not None and prev.cached:
            self._remove(prev, free_list)
            split_bytes -= prev.size
            split_count -= 1
            block.addr = prev.addr
            block.size += prev.size
            block.prev = prev.prev
            if block.prev is not None:
                block.prev.next = block
        if nxt is not None and nxt.cached:
            self._remove(nxt, free_list)
            split_bytes -= nxt.size
            split_count -= 1
            block.size += nxt.size
            block.next = nxt.next
            if block.next is not None:
                block.next.prev = block
        block.cached = True
        insort(free_list, (block.size, block.addr, block))
        if block.prev is not None or block.next is not None:
            split_bytes += block.size
            split_count += 1
        if split_bytes or split_count:
            self.stats.add_inactive_split(kind, split_bytes, split_count)

    @staticmethod
    def _remove(block: Block, free_list: _FreeList) -> None:
        del free_list[bisect_left(free_list, (block.size, block.addr))]
        block.cached = False

    def _process_events(self, wait: bool = False) -> None:
        """Free the pending blocks whose other streams are done (all of them if ``wait``)."""
        still_pending = []
        for freed_at_sync, block in self._pending:
            if wait or freed_at_sync < self._syncs:
                kind = _SMALL if block.small else _LARGE
                self.stats.add_pending(kind, -block.size, -1)
                self.stats.add(_REQUESTED_BYTES, kind, -block.requested)
                block.stream_uses = None
                self._free_block(block, kind)
            else:
                still_pending.append((freed_at_sync, block))
        self._pending = still_pending

    def _release_cached_blocks(self) -> None:
        """Wait for pending blocks, then give every whole cached segment back to the device."""
        self.stats.num_sync_all_streams += 1
        self._process_events(wait=True)
        for pools in self._pools:
            for free_list in pools.values():
                whole = [entry for entry in free_list if not entry[2].is_split()]
                for entry in whole:
                    free_list.remove(entry)
                    block = entry[2]
                    block.cached = False
                    kind = _SMALL if block.small else _LARGE
                    self.stats.add(_RESERVED_BYTES, kind, -block.size)
                    self.stats.add(_SEGMENT, kind, -1)
                    self.stats.num_device_free += 1

    def _oom_message(self, alloc_bytes: int) -> str:
        """PyTorch's message (``DeviceCachingAllocator::malloc``, on a host with NVML)."""
        allocated = self.allocated_bytes
        reserved = self.reserved_bytes
        in_use = self.total_bytes - self.capacity_bytes + reserved
        allowed = ("" if self.allowed_bytes is None
                   else f"{format_size(self.allowed_bytes)} allowed; ")
        return (f"CUDA out of memory. Tried to allocate {format_size(alloc_bytes)}. "
                f"GPU {self.device} has a total capacity of {format_size(self.total_bytes)} of "
                f"which {format_size(self.free_bytes())} is free. Including non-PyTorch memory, "
                f"this process has {format_size(in_use)} memory in use. {allowed}Of the "
                f"allocated memory {format_size(allocated)} is allocated by PyTorch, and "
                f"{format_size(reserved - allocated)} is reserved by PyTorch but unallocated. "
                "If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
                "documentation for Memory Management  (https://docs.pytorch.org/docs/stable/"
                "notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")
