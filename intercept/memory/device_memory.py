"""Device memory of fake CUDA storages: each GPU's caching-allocator model, and the cuBLAS
workspaces PyTorch allocates through it (their sizes are PyTorch's defaults)."""

import functools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from intercept.memory.allocator import CUDA_CONTEXT_BYTES, Block, CachingAllocator
from intercept.process import shim

aten = torch.ops.aten
_T = TypeVar("_T")


class DeviceMemory:
    """Fake CUDA storages -> the caching allocator of their GPU (``intercept.memory.allocator``).

    A storage gets a block when the op creating it is recorded (:meth:`track`, on the device's
    current stream), a new one when it is resized (FSDP2 frees and re-allocates unsharded
    parameters that way), and gives it back when the storage dies (a weak reference's
    callback, on whatever thread drops the last reference). A matrix multiply also gets the
    cuBLAS workspaces PyTorch allocates through the same allocator (:meth:`blas_workspace`).
    Out-of-memory raises ``torch.OutOfMemoryError`` from the op, as on a GPU.

    Thread-safe. Frees can arrive re-entrantly (a garbage collection inside an allocator call
    runs storage finalizers on the same thread): they are queued and applied when the
    allocator call returns.
    """

    def __init__(self, total_bytes: int, sm_arch: int,
                 context_bytes: int = CUDA_CONTEXT_BYTES) -> None:
        self.total_bytes = total_bytes
        self._context_bytes = context_bytes
        self._cublas_workspace_bytes = cublas_workspace_bytes(sm_arch)
        # reentrant: see the class docstring
        self._lock = threading.RLock()
        self._busy = False
        self._deferred: list[tuple[int, Block]] = []
        self._allocators: dict[int, CachingAllocator] = {}
        self._tracked: dict[int, _TrackedStorage] = {}
        """Storage key -> its weak reference, device and block (``None``: empty)."""
        self._workspaces: set[tuple[int, int, int, bool]] = set()
        """(thread, device, stream, cuBLASLt) that have their workspace (kept for good)."""
        self._simulator_time = shim.simulator_time()
        self._current_stream = shim.library().fakecuda_current_stream

    def device_allocator(self, device: int) -> CachingAllocator:
        """The allocator of GPU ``device`` (created on first use)."""
        found = self._allocators.get(device)
        if found is None:
            found = self._allocators[device] = CachingAllocator(
                device, self.total_bytes, self._context_bytes, torch.OutOfMemoryError)
        return found

    def track(self, t: torch.Tensor) -> None:
        """Allocate ``t``'s storage if it is new (freed when the storage dies), or again if an
        op grew it (``resize_``, ``out=``)."""
        storage = t.untyped_storage()
        key = storage._cdata
        nbytes = storage.nbytes()
        tracked = self._tracked.get(key)
        if tracked is not None and tracked.nbytes == nbytes:
            return
        with self._lock:
            tracked = self._tracked.get(key)
            if tracked is not None:
                self._reallocate(tracked, nbytes)
                return
            device = t.device.index or 0
            block = self._malloc(device, nbytes) if nbytes else None
            # a plain weak reference: its callback costs less than weakref.finalize's machinery
            ref = weakref.ref(storage, functools.partial(self._release, key))
            self._tracked[key] = _TrackedStorage(ref, device, nbytes, block)

    def address(self, storage: torch.UntypedStorage) -> int | None:
        """The device address of ``storage``'s first byte, as ``data_ptr()`` reports it on a GPU
        (0 while it is empty: PyTorch's null pointer); ``None`` if no GPU tracks it."""
        tracked = self._tracked.get(storage._cdata)
        if tracked is None:
            return None
        if tracked.block is None:
            return 0
        return DEVICE_ADDRESS_BASE + (tracked.device << DEVICE_ADDRESS_BITS) + tracked.block.addr

    def resize(self, storage: torch.UntypedStorage, nbytes: int) -> None:
        """``storage.resize_(nbytes)`` is about to run: a tracked storage gets a new block."""
        with self._lock:
            tracked = self._tracked.get(storage._cdata)
            if tracked is not None:
                self._reallocate(tracked, nbytes)

    def record_stream(self, t: torch.Tensor, stream: int) -> None:
        """``t.record_stream(stream)``: its block is not reused before ``stream`` is done."""
        with self._lock:
            tracked = self._tracked.get(t.untyped_storage()._cdata)
            if tracked is not None and tracked.block is not None:
                self.device_allocator(tracked.device).record_stream(tracked.block, stream)

    def blas_workspace(self, func: Any, device: int) -> None:
        """``func`` (one of :data:`BLAS_OPS`) runs on ``device``: PyTorch gives each (cuBLAS
        handle, stream) a workspace from the caching allocator on first use and keeps it
        (``CublasHandlePool.cpp``); each thread has its own handle (autograd runs backward on
        a thread of its own); cuBLASLt calls (:data:`BLAS_LT_OPS`) have a second workspace."""
        thread, stream = threading.get_ident(), self._current_stream(device)
        for lt in (False, True) if func in BLAS_LT_OPS else (False,):
            key = (thread, device, stream, lt)
            if key not in self._workspaces:
                with self._lock:
                    self._malloc(device, CUBLASLT_WORKSPACE_BYTES if lt
                                 else self._cublas_workspace_bytes)
                    self._workspaces.add(key)

    def synchronized(self) -> None:
        """The host waited for the device (blocks used on other streams become reusable)."""
        with self._lock:
            for found in self._allocators.values():
                found.synchronized()

    def nested_stats(self, device: int) -> dict[str, Any]:
        """``torch.cuda.memory_stats_as_nested_dict()``."""
        with self._lock:
            return self.device_allocator(device).stats.nested()

    def mem_get_info(self, device: int) -> tuple[int, int]:
        """``torch.cuda.mem_get_info()``: ``(free, total)`` bytes of the GPU."""
        with self._lock:
            return self.device_allocator(device).free_bytes(), self.total_bytes

    def reset_peak(self, device: int) -> None:
        with self._lock:
            self.device_allocator(device).stats.reset_peak()

    def reset_accumulated(self, device: int) -> None:
        with self._lock:
            self.device_allocator(device).stats.reset_accumulated()

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: every GPU releases its unused cached segments."""
        with self._lock:
            for found in self._allocators.values():
                self._run(found.empty_cache)

    def set_fraction(self, device: int, fraction: float) -> None:
        """``set_per_process_memory_fraction``: reserve at most ``fraction`` of the GPU."""
        with self._lock:
            self.device_allocator(device).set_allowed_fraction(fraction)

    def fraction(self, device: int) -> float:
        """``get_per_process_memory_fraction``."""
        with self._lock:
            allowed = self.device_allocator(device).allowed_bytes
        return 1.0 if allowed is None else allowed / self.total_bytes

    def _reallocate(self, tracked: "_TrackedStorage", nbytes: int) -> None:
        """A new block for a storage that now holds ``nbytes`` (lock held)."""
        if nbytes == tracked.nbytes:
            return
        block = self._malloc(tracked.device, nbytes) if nbytes else None
        if tracked.block is not None:
            self._free(tracked.device, tracked.block)
        tracked.nbytes, tracked.block = nbytes, block

    def _malloc(self, device: int, nbytes: int) -> Block:
        """A block on ``device``'s current stream (lock held)."""
        found = self.device_allocator(device)
        return self._run(found.malloc, nbytes, self._current_stream(device))

    def _free(self, device: int, block: Block) -> None:
        """Give ``block`` back now, or after the allocator call under way (lock held)."""
        self._deferred.append((device, block))
        if not self._busy:
            self._drain()

    def _run(self, call: Callable[..., _T], *args: Any) -> _T:
        """``call(*args)`` on an allocator, then the frees that arrived meanwhile (lock held)."""
        self._busy = True
        try:
            return call(*args)
        finally:
            self._busy = False
            self._drain()

    def _drain(self) -> None:
        """Apply the queued frees (lock held)."""
        self._busy = True
        try:
            while self._deferred:
                device, block = self._deferred.pop()
                self._allocators[device].free(block)
        finally:
            self._busy = False

    def _release(self, key: int, ref: object) -> None:
        """A tracked storage died (on whichever thread; the simulator's CPU time)."""
        with self._simulator_time, self._lock:
            tracked = self._tracked.pop(key, None)
            if tracked is not None and tracked.block is not None:
                self._free(tracked.device, tracked.block)


@dataclass(slots=True)
class _TrackedStorage:
    """A fake CUDA storage the allocator knows."""

    ref: "weakref.ref[torch.UntypedStorage]"
    """Keeps the callback that frees the block alive."""
    device: int
    nbytes: int
    block: Block | None
    """``None`` while the storage is empty (PyTorch allocates nothing for 0 bytes)."""


def cublas_workspace_bytes(sm_arch: int) -> int:
    """PyTorch's default cuBLAS workspace (``CUBLAS_WORKSPACE_CONFIG`` unset): ``:4096:8``
    (32 MiB) on sm90 (H100, H200), else ``:4096:2:16:8`` (``CublasHandlePool.cpp``)."""
    if sm_arch == 90:
        return 4096 * 1024 * 8
    return 4096 * 1024 * 2 + 16 * 1024 * 8


DEVICE_ADDRESS_BASE = 0x7000_0000_0000
"""Where GPU 0's addresses start: high in a 64-bit Linux process's 47-bit address space, where
CUDA's unified addressing puts device memory."""
DEVICE_ADDRESS_BITS = 40
"""Each GPU's addresses lie in a range of their own, ``2**40`` bytes wide, so no two storages
of a process share one (``intercept.memory.allocator`` starts at ``2**32`` and moves on by each new
segment: it would have to ``cudaMalloc`` a TiB in all to leave its range)."""
CUBLASLT_WORKSPACE_BYTES = 2**20
"""PyTorch's default cuBLASLt workspace (``CUBLASLT_WORKSPACE_SIZE`` unset: 1024 KiB)."""
BLAS_OPS: frozenset[Any] = frozenset({
    aten.mm.default, aten.mm.out, aten.bmm.default, aten.bmm.out, aten.baddbmm.default,
    aten.baddbmm.out, aten.addbmm.default, aten.addmv.default, aten.mv.default,
    aten.dot.default, aten.vdot.default, aten.addmm.default, aten.addmm.out,
    aten._addmm_activation.default, aten._scaled_mm.default,
})
"""Ops whose CUDA kernels are cuBLAS calls (they take a cuBLAS handle and its workspace)."""
BLAS_LT_OPS: frozenset[Any] = frozenset({
    aten.addmm.default, aten.addmm.out, aten._addmm_activation.default, aten._scaled_mm.default,
})
"""Ops that go through cuBLASLt (``gemm_and_bias``, scaled mm) with its own workspace.
NB: ``addmm`` does so only with a 1-D bias and ``beta == 1``; counted always (1 MiB)."""
