"""SimFakeMode: every CUDA tensor is a FakeTensor, every GPU kernel is recorded, never run.

One mode per rank process, entered before the user's script starts (``intercept.device``).
For each aten op it

* runs small all-CPU work **for real** (data pipelines, DDP's bucket indices, step counters):
  an op whose tensor inputs are all real CPU tensors, or a CPU factory op whose output has at
  most :data:`REAL_CPU_MAX_NUMEL` elements; big CPU tensors (a model built on the CPU before
  ``.to('cuda')``) stay fake;
* otherwise executes it on fake tensors (shapes, dtypes, devices; no data) and, when it touches
  a CUDA tensor and would launch a kernel, calls ``runtime.kernel(spec, stream)`` with the
  current CUDA stream of the op's device; ``spec`` (``intercept.op_costs.kernel_spec``) names
  the aten op (``aten::mm``), or :data:`MEMCPY_HTOD` / :data:`MEMCPY_DTOH` for copies between
  host and device, whose ``bytes`` is the size moved;
* treats reading a CUDA value on the host (``.item()``, ``float()``, ``.tolist()``,
  ``print``, format, ``.cpu()``, data-dependent output shapes) and blocking copies between
  host and device as a host sync: ``runtime.sync("stream", current stream)``, then reads the
  value;
* keeps the real values of the tensors that steer control flow (integers, bools, small
  tensors: ``intercept.values``) and derives the integers of ops on fake floats (router top-k,
  comparisons) from the seeded value model (``intercept.value_model``).

What a host reads: a valued tensor's values; a fake float :data:`FLOAT_VALUE` (1.0: a loss or
grad norm that never divides by zero); an integer the simulator cannot know :data:`INT_VALUE`
(1), with a warning naming the script line; a bool :data:`BOOL_VALUE`. Data-dependent shapes
(``nonzero``, ``masked_select``, boolean indexing, ``unique``, ``bincount``,
``repeat_interleave``) follow the values; of unknown values they stop the run, or keep
:data:`SELECT_FRACTION` of the elements with ``simulation.unknown_shapes: half``.

Device memory (``torch.cuda.memory_allocated`` and friends, out-of-memory errors) comes from a
model of PyTorch's caching allocator per GPU (``intercept.allocator``) that fake CUDA storages
allocate from while they live (:class:`DeviceMemory`).

The interceptor's own CPU time (fake execution, recording) runs inside
``runtime.excluded()``; calls into the runtime (kernel, sync) and into the process group
(c10d and functional collectives) happen outside it, so the runtime never sees nesting.
Around all of it, the shim excludes the whole call from torch's C++ into
``__torch_dispatch__`` (and every ``prim.device`` query), and takes a calibrated deduction off
each op dispatch for the C++ glue outside that call (:func:`calibrate_dispatch_glue`): what is
left of an op in the rank's virtual time is about a plain Python call, plus the runtime's
modelled launch overhead. Real CPU work run on the script's behalf stays the script's, and so
does the dispatch of tensor subclasses (DTensor) and DTensor's shape propagation, which a real
host runs too.
"""

import contextlib
import functools
import os
import threading
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ContextManager, Protocol, TypeVar

import numpy as np
import torch
from torch._subclasses.fake_tensor import _DISPATCH_META_HANDLERS, FakeTensor, FakeTensorMode

from intercept import op_costs, shim
from intercept.allocator import CUDA_CONTEXT_BYTES, Block, CachingAllocator
from intercept.value_model import ValueModel
from intercept.value_policy import ValuePolicy
from intercept.values import ValueStore
from phantora.compute.spec import MEMCPY_DTOH, MEMCPY_HTOD, KernelSpec
from phantora.errors import SimulationError

aten = torch.ops.aten
_T = TypeVar("_T")

FLOAT_VALUE = 1.0
INT_VALUE = 1
BOOL_VALUE = False
SELECT_FRACTION = 0.5
REAL_CPU_MAX_NUMEL = 65536
VALUES_SOON_S = 2.0
VALUES_TIMEOUT_S = 120.0
"""How long a host read waits (wall time) for a collective's values: after its stream sync,
then after a device sync, before it gives up."""
CALIBRATION_ROUNDS = 10
CALIBRATION_OPS = 100
""":func:`calibrate_dispatch_glue` times this many rounds of this many ops (~0.1 s of CPU)."""

NO_KERNEL_OPS: frozenset[Any] = frozenset({
    # allocation without initialisation: the caching allocator, not a kernel
    aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
    aten.new_empty.default, aten.new_empty_strided.default, aten.resize_.default,
    # aliasing and metadata (in-place view ops are not flagged ``is_view``)
    aten._unsafe_view.default, aten.set_.source_Storage, aten.set_.source_Storage_storage_offset,
    aten.set_.source_Tensor, aten.set_.default, aten.as_strided_.default, aten.detach_.default,
    aten.squeeze_.default, aten.squeeze_.dim, aten.squeeze_.dims, aten.unsqueeze_.default,
    aten.t_.default, aten.transpose_.default, aten.swapdims_.default, aten.swapaxes_.default,
    aten.is_same_size.default, aten._has_compatible_shallow_copy_type.default,
    aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
    aten.sym_storage_offset.default, aten.is_contiguous.default, aten.is_contiguous.memory_format,
    aten.is_non_overlapping_and_dense.default,
})
"""Ops that launch no kernel although they are not flagged ``is_view`` (views never do)."""

COLLECTIVE_NAMESPACE = "c10d"
FUNCTIONAL_COLLECTIVE_NAMESPACE = "_c10d_functional"
NO_KERNEL_NAMESPACES = frozenset({"prim", "profiler", FUNCTIONAL_COLLECTIVE_NAMESPACE})
"""Namespaces with no kernels of their own (collectives are the process group's to record)."""
HOST_DEVICE_COPIES = frozenset({aten._to_copy.default, aten.copy_.default})
_METADATA_QUERIES: dict[Any, Callable[[Any], Any]] = dict(_DISPATCH_META_HANDLERS)
"""prim.device, aten.size/stride/storage_offset: answered from the FakeTensor's metadata."""


class Runtime(Protocol):
    """What the mode needs of ``intercept.runtime.RankRuntime``."""

    def excluded(self) -> ContextManager[None]: ...
    def kernel(self, spec: KernelSpec, stream: int, tensors: int = 1) -> None: ...
    def host_op(self, name: str) -> None: ...
    def sync(self, kind: str, target: int = 0) -> int: ...


FunctionalCollectiveHandler = Callable[[Any, tuple[Any, ...], dict[str, Any], Any], None]
"""``handler(func, args, kwargs, out)``: a ``_c10d_functional`` op FakeTensorMode answered."""


def plausible_value(dtype: torch.dtype) -> float | int | bool:
    """The value a fake scalar of ``dtype`` reads as on the host."""
    if dtype == torch.bool:
        return BOOL_VALUE
    if dtype.is_floating_point or dtype.is_complex:
        return FLOAT_VALUE
    return INT_VALUE


class DeviceMemory:
    """Fake CUDA storages -> the caching allocator of their GPU (``intercept.allocator``).

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


Launch = tuple[KernelSpec, int, bool]
"""``(the kernel, device index, host waits for it)``."""
_RUN_REAL = object()
"""Marks an op to run for real once the mode has left ``runtime.excluded()``."""


class SimFakeMode(FakeTensorMode):
    """FakeTensorMode that records kernels to a runtime (see the module docstring)."""

    # Higher-order operators (DTensor RNG, flex_attention, ...) look their mode rule up by
    # exact ``type(mode)``; with this flag they come to __torch_dispatch__ and are forwarded to
    # FakeTensorMode's rule.
    supports_higher_order_operators = True

    def __init__(self, runtime: Runtime, memory: DeviceMemory,
                 on_functional_collective: FunctionalCollectiveHandler | None = None,
                 policy: ValuePolicy = ValuePolicy(), rank: int = 0) -> None:
        super().__init__(allow_non_fake_inputs=True)
        self.runtime = runtime
        self.memory = memory
        self.on_functional_collective = on_functional_collective
        self.policy = policy
        generator = torch.Generator().manual_seed(policy.seed * 1_000_003 + rank)
        self.values = ValueStore(generator)
        """Real values of the valued fake tensors (``intercept.values``)."""
        self.value_model = ValueModel(self.values, policy.routing, policy.seed, rank)
        self._thread = threading.local()
        self._current_stream = shim.library().fakecuda_current_stream
        self._names: dict[Any, str] = {}

    @property
    def avoid_device_init(self) -> bool:
        # torch.cuda.is_available() is patched to True, which would make FakeTensorMode
        # constant-propagate small real CPU tensors for real across .to('cuda') (there is no
        # CUDA kernel to run them). Keep the behaviour of a machine without a device.
        return True

    def host_sync(self, t: torch.Tensor) -> None:
        """The host waits for the GPU before reading ``t`` (if ``t`` lives on a GPU)."""
        if t.device.type == "cuda":
            self.runtime.sync("stream", self._current_stream(t.device.index or 0))

    def host_values(self, t: torch.Tensor) -> torch.Tensor:
        """What the host reads of ``t`` after its host sync: its values where known, else
        :func:`plausible_value` everywhere (a real CPU tensor, no memory per element)."""
        self._await_values([t])
        with self.runtime.excluded():
            real = self.values.real(t)
            if real is not None:
                return real.detach()
            if not (t.dtype.is_floating_point or t.dtype.is_complex):
                _warn_unknown(t)
        return _stand_in(t)

    def _await_values(self, inputs: list[torch.Tensor]) -> None:
        """Values a collective has yet to deliver are needed now. The caller synchronised the
        stream that waits for the collective, as a real host does, so they are on their way
        (computed from other ranks' values): wait for them, in wall time only. If they do not
        come soon, that stream did not wait for the collective: synchronise the whole device
        (the collective's stream included), as the read would need on a GPU, and wait on."""
        if not any(self.values.pending(t) for t in inputs):
            return
        with self.runtime.excluded():
            arrived = self.values.wait(inputs, VALUES_SOON_S)
        if arrived:
            return
        self.runtime.sync("device")
        with self.runtime.excluded():
            if not self.values.wait(inputs, VALUES_TIMEOUT_S):
                raise SimulationError(
                    f"the values of a tensor read{_script_line()} did not arrive within "
                    f"{VALUES_TIMEOUT_S:.0f} s: a collective that produces them never completed "
                    "on every member (or a member exited before sending them)")

    @contextlib.contextmanager
    def kernels_replaced(self) -> Iterator[None]:
        """Ops run inside make their outputs and take device memory as usual but launch no
        kernels: a compiled graph, whose kernels ``intercept.compiled`` launches instead."""
        state = self._thread
        previous = getattr(state, "replaced", False)
        state.replaced = True
        try:
            yield
        finally:
            state.replaced = previous

    @contextlib.contextmanager
    def shapes_only(self) -> Iterator[None]:
        """Ops run inside only derive shapes, like the ops FakeTensorMode issues itself: they
        take no device memory and launch no kernel (DTensor's sharding propagation, which on
        a GPU runs in a private FakeTensorMode). Unlike those, their dispatch is the script's
        CPU time: a real host runs that FakeTensorMode too."""
        state = self._thread
        previous = getattr(state, "depth", 0), getattr(state, "counted", False)
        state.depth, state.counted = 1, True
        try:
            yield
        finally:
            state.depth, state.counted = previous

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        query = _METADATA_QUERIES.get(func)
        if query is not None:
            # ~7400 per GPT-2 step (C++ asking a FakeTensor for its device): answered at once;
            # the shim excludes the whole call from C++, so none of it is the script's time.
            return query(args)
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return self._higher_order(func, types, args, kwargs)
        state = self._thread
        if getattr(state, "depth", 0):
            # An op FakeTensorMode issues while executing another one: no kernel of its own.
            if getattr(state, "counted", False):
                shim.count_rest_of_dispatch()
            if func in DATA_DEPENDENT:
                return self._data_dependent(func, args, kwargs,
                                            op_costs.flat_tensors((args, kwargs)))
            return self.dispatch(func, types, args, kwargs)
        if func.namespace == COLLECTIVE_NAMESPACE:
            # c10d.allreduce_ & co. reach the process group, which accounts for its own time.
            return self.dispatch(func, types, args, kwargs)
        if func is aten._local_scalar_dense.default:
            return self._read_scalar(func, types, args, kwargs)
        if func in _SHAPE_FROM_VALUES:
            self._sync_pending_inputs(args, kwargs)
        state.depth = 1
        try:
            with self.runtime.excluded():
                out, launch = self._fake(func, types, args, kwargs)
        finally:
            state.depth = 0
        if out is _RUN_REAL:
            with shim.script_time():  # real CPU work a real host does too
                return func(*args, **kwargs)  # this mode is popped here: the real kernel runs
        if out is NotImplemented:
            # A tensor subclass (DTensor) dispatches the op next, in the same call from C++:
            # its sharding propagation and redistribution run on a real host too (100+ us per
            # op, most of a tensor-parallel step's host time). The ops it issues come back here.
            shim.count_rest_of_dispatch()
            return out
        if func.namespace == FUNCTIONAL_COLLECTIVE_NAMESPACE:
            if self.on_functional_collective is None:
                raise SimulationError(f"{func} needs a process group, but none is connected")
            self.on_functional_collective(func, args, kwargs, out)
        elif getattr(state, "replaced", False):
            pass  # an op of a compiled graph: intercept.compiled charges the graph's launches
        elif launch is not None:
            spec, device, host_waits = launch
            stream = self._current_stream(device)
            self.runtime.kernel(spec, stream, _list_length(args))
            if host_waits:
                self.runtime.sync("stream", stream)
        else:
            self.runtime.host_op(func._opname)
        return out

    def _fake(self, func: Any, types: Any, args: Any, kwargs: Any) -> tuple[Any, Launch | None]:
        """The op's fake result and the kernel it launches; :data:`_RUN_REAL` for real CPU work."""
        inputs = op_costs.flat_tensors(args)
        if kwargs:
            inputs += op_costs.flat_tensors(kwargs)
        if func.namespace == "aten" and _runs_real(func, args, kwargs, inputs):
            return _RUN_REAL, None
        if func is aten.record_stream.default:  # no fake implementation; no kernel
            self.memory.record_stream(args[0], args[1].stream_id)
            return None, None
        if func in DATA_DEPENDENT:
            out = self._data_dependent(func, args, kwargs, inputs)
        else:
            out = self.dispatch(func, types, args, kwargs)
            if out is not NotImplemented and func.namespace == "aten":
                # values of collectives travel with them (intercept.process_group)
                if self.value_model.handles(func, inputs):
                    self.value_model.apply(func, args, kwargs, out)
                else:
                    self.values.after_op(func, args, kwargs, out, inputs)
        return out, self._launch(func, args, kwargs, out, inputs)

    def _launch(self, func: Any, args: Any, kwargs: Any, out: Any,
                inputs: list[torch.Tensor]) -> Launch | None:
        """The kernel ``func`` launches, if any; also counts the CUDA storages it created."""
        if out is NotImplemented:  # a tensor subclass defers: the op comes again, unwrapped
            return None
        outputs = op_costs.flat_tensors(out)
        device = None
        for t in outputs:
            if isinstance(t, FakeTensor) and t.device.type == "cuda":
                self.memory.track(t)
                device = t.device.index or 0
        if device is not None and func in BLAS_OPS:
            self.memory.blas_workspace(func, device)
        if func.is_view or func in NO_KERNEL_OPS or func.namespace in NO_KERNEL_NAMESPACES:
            return None
        if device is None:
            source = next((t for t in inputs if t.device.type == "cuda"), None)
            if source is None:
                return None  # a CPU op on fake CPU tensors: no GPU kernel
            device = source.device.index or 0
            if outputs:  # CUDA inputs, CPU outputs: .cpu(), cpu_tensor.copy_(cuda_tensor)
                transferred = sum(op_costs.tensor_bytes(t) for t in outputs)
                return (KernelSpec(MEMCPY_DTOH, bytes=transferred), device,
                        not _non_blocking(func, args, kwargs))
            # else an in-place op that returns nothing (_foreach_add_): an ordinary kernel
        if func in HOST_DEVICE_COPIES and any(t.device.type == "cpu" for t in inputs):
            # a blocking copy synchronises the stream after it (ATen's memcpy_and_sync)
            transferred = sum(op_costs.tensor_bytes(t) for t in outputs)
            return (KernelSpec(MEMCPY_HTOD, bytes=transferred), device,
                    not _non_blocking(func, args, kwargs))
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = func._schema.name
        return (op_costs.kernel_spec(name, func, args, kwargs, out), device,
                _syncs_host(func, args))

    def _read_scalar(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """``.item()`` and friends: a device-to-host copy the host waits for, then the value.

        Small CPU constants FakeTensorMode tracks keep their real value.
        """
        t = args[0]
        if isinstance(t, FakeTensor) and t.constant is not None:
            with self.runtime.excluded():
                return self.dispatch(func, types, args, kwargs)
        if t.device.type == "cuda":
            stream = self._current_stream(t.device.index or 0)
            self.runtime.kernel(KernelSpec(MEMCPY_DTOH, bytes=t.element_size()), stream)
            self.runtime.sync("stream", stream)
        return self.host_values(t).item()

    def _sync_pending_inputs(self, args: Any, kwargs: Any) -> None:
        """An op whose output shape may depend on values a collective has yet to deliver: on a
        GPU it synchronises its stream to learn the shape, so the values are there."""
        with self.runtime.excluded():
            inputs = [t for t in op_costs.flat_tensors((args, kwargs)) if self.values.pending(t)]
        if inputs:
            self.host_sync(inputs[0])
            self._await_values(inputs)

    def _data_dependent(self, func: Any, args: Any, kwargs: Any,
                        inputs: list[torch.Tensor]) -> Any:
        """An op whose output shape depends on its input values: computed from them where they
        are known, else by ``simulation.unknown_shapes`` (an error by default)."""
        reals = [self.values.real(t) for t in inputs]
        if all(r is not None for r in reals):
            real_out = self.values.run_real(func, args, kwargs)
            if real_out is not None:
                device = inputs[0].device
                out = torch.utils._pytree.tree_map(
                    lambda r: self._fake_like(r, device) if isinstance(r, torch.Tensor) else r,
                    real_out)
                for fake, real in zip(torch.utils._pytree.tree_leaves(out),
                                      torch.utils._pytree.tree_leaves(real_out), strict=True):
                    if isinstance(fake, torch.Tensor):
                        self.values.set_values(fake, real)
                return out
        if self.policy.unknown_shapes == "error":
            raise SimulationError(
                f"{func._schema.name} needs the values of a tensor the simulator does not know "
                f"(computed from fake floating-point data){_script_line()}: its output shape "
                "cannot be bounded. Set simulation.unknown_shapes: half in the scenario to keep "
                "half of the elements, or derive the tensor from integer values.")
        return DATA_DEPENDENT[func](self, *args, **kwargs)

    def _fake_like(self, real: torch.Tensor, device: torch.device) -> Any:
        return _empty(self, tuple(real.shape), real.dtype, device)

    def _higher_order(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """Forward a HOP to FakeTensorMode's rule; the ops inside it are dispatched normally."""
        handler = func.python_key_table.get(FakeTensorMode)
        if handler is None or getattr(self._thread, "hop", None) is func:
            return self.dispatch(func, types, args, kwargs)
        previous, self._thread.hop = getattr(self._thread, "hop", None), func
        try:
            return handler(self, *args, **kwargs)
        finally:
            self._thread.hop = previous


class _NullRuntime:
    """Records nothing: the runtime of :func:`calibrate_dispatch_glue`'s private mode."""

    def excluded(self) -> ContextManager[None]:
        return contextlib.nullcontext()

    def kernel(self, spec: KernelSpec, stream: int, tensors: int = 1) -> None:
        return None

    def host_op(self, name: str) -> None:
        return None

    def sync(self, kind: str, target: int = 0) -> int:
        return 0


def _list_length(args: Any) -> int:
    """A foreach op's list length (its first argument), else 1: its host cost grows with it."""
    first = args[0] if args else None
    return len(first) if isinstance(first, (list, tuple)) else 1


def _plain_call(a: Any, b: Any) -> Any:
    """What calibration compares an op dispatch with: a plain Python call of two arguments."""
    return a


def calibrate_dispatch_glue(rounds: int = CALIBRATION_ROUNDS, ops: int = CALIBRATION_OPS) -> int:
    """CPU ns per op dispatch that no excluded section covers, beyond a plain Python call.

    Needs the shim's interpreter callbacks excluded (``shim.exclude_interpreter_callbacks``),
    the section deduction in force and no dispatch deduction. Times ``x.add_(y)`` on two small
    fake CUDA tensors, in a private mode and memory counter, against ``_plain_call(x, y)``, as
    the calling thread's CPU time that counts as the script's; returns the smallest difference
    per op over ``rounds`` (never negative). That difference is the Python binding, the
    dispatcher up to the Python key and the Python fallback's glue: a real GPU host's per-op
    framework and launch cost is the runtime's modelled launch overhead instead.

    The smallest round, not the median: on a loaded machine a round's CPU time inflates with
    contention (up to 3x on 2 shared cores), and a deduction above the glue's own cost would
    take the script's CPU time. Under load the glue costs more than deducted and the rest stays
    in virtual time, as the script's own CPU time inflates too.

    NB: one trivial op stands for all of them; ops with more arguments, outputs or autograd
    work have a little more glue, and ops the autograd engine issues (no Python binding) a
    little less (``intercept.clock`` gives the measured spread).
    """
    if shim.deductions().dispatch_ns:
        raise SimulationError("calibrate the dispatch glue while no dispatch deduction is in "
                              "force")
    counted_ns = shim.thread_counted_ns
    with SimFakeMode(_NullRuntime(), DeviceMemory(total_bytes=2**40, sm_arch=90)):
        x = torch.empty(16, device="cuda")
        y = torch.empty(16, device="cuda")
        for _ in range(ops):  # warm up FakeTensorMode's dispatch cache
            x.add_(y)
        per_round_ns = []
        for _ in range(rounds):
            start_ns = counted_ns()
            for _ in range(ops):
                x.add_(y)
            middle_ns = counted_ns()
            for _ in range(ops):
                _plain_call(x, y)
            end_ns = counted_ns()
            per_round_ns.append((middle_ns - start_ns) - (end_ns - middle_ns))
    return max(0, min(per_round_ns) // ops)


def _runs_real(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
               inputs: list[torch.Tensor]) -> bool:
    """True if ``func`` is small real CPU work that should run for real (module docstring)."""
    for t in inputs:
        if isinstance(t, FakeTensor) or t.device.type != "cpu":
            return False
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return False
    if inputs:
        return True
    numel = _factory_numel(func, args)
    return numel is not None and numel <= REAL_CPU_MAX_NUMEL


_SIZE_FIRST_FACTORIES = frozenset({
    aten.empty.memory_format, aten.empty_strided.default, aten.zeros.default, aten.ones.default,
    aten.full.default, aten.rand.default, aten.randn.default,
})


def _factory_numel(func: Any, args: tuple[Any, ...]) -> int | None:
    """Elements a CPU factory op would create, or None for an op this does not know."""
    if func in _SIZE_FIRST_FACTORIES:
        return _product(args[0])
    if func in (aten.randint.default, aten.randint.low):
        return _product(args[-1])
    if func is aten.scalar_tensor.default:
        return 1
    if func in (aten.arange.default, aten.arange.start, aten.arange.start_step):
        start, end, step = ((0, *args, 1) if len(args) == 1 else (*args, 1))[:3]
        if not all(isinstance(v, int) for v in (start, end, step)):
            return None
        return max(0, _round_up(end - start, step) // step)
    if func in (aten.randperm.default, aten.linspace.default, aten.logspace.default):
        return int(args[0] if func is aten.randperm.default else args[2])
    return None


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _product(sizes: Any) -> int:
    n = 1
    for s in sizes:
        n *= int(s)
    return n


def _non_blocking(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if func is aten.copy_.default and len(args) > 2:
        return bool(args[2])
    return bool(kwargs.get("non_blocking", False))


def _syncs_host(func: Any, args: tuple[Any, ...]) -> bool:
    """Ops whose CUDA kernels need the host to learn a count first (data-dependent shapes)."""
    if func in DATA_DEPENDENT:
        return True
    if func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
        return any(t.dtype == torch.bool for t in op_costs.flat_tensors(args[1]))
    return False


# --- data-dependent output shapes -------------------------------------------------------------
# FakeTensorMode raises DynamicOutputShapeException for these; they get a concrete size from the
# value policy in the module docstring instead.

def _empty(mode: SimFakeMode, shape: tuple[int, ...], dtype: torch.dtype,
           device: torch.device) -> Any:
    return mode.dispatch(aten.empty.memory_format, (), (list(shape),),
                         {"dtype": dtype, "device": device})


def _selected(numel: int) -> int:
    return int(numel * SELECT_FRACTION)


def _nonzero(mode: SimFakeMode, x: torch.Tensor) -> Any:
    return _empty(mode, (_selected(x.numel()), x.dim()), torch.long, x.device)


def _masked_select(mode: SimFakeMode, x: torch.Tensor, mask: torch.Tensor) -> Any:
    numel = torch.broadcast_shapes(x.shape, mask.shape).numel()
    return _empty(mode, (_selected(numel),), x.dtype, x.device)


def _bincount(mode: SimFakeMode, x: torch.Tensor, weights: Any = None, minlength: int = 0) -> Any:
    dtype = torch.long if weights is None else weights.dtype
    return _empty(mode, (max(int(minlength), INT_VALUE + 1),), dtype, x.device)


def _repeat_interleave(mode: SimFakeMode, repeats: torch.Tensor, output_size: Any = None) -> Any:
    numel = output_size if output_size is not None else repeats.numel() * INT_VALUE
    return _empty(mode, (int(numel),), repeats.dtype, repeats.device)


def _unique(mode: SimFakeMode, x: torch.Tensor, sorted: bool = True, return_inverse: bool = False,
            return_counts: bool = False) -> Any:
    kept = max(_selected(x.numel()), 1)
    return (_empty(mode, (kept,), x.dtype, x.device),
            _empty(mode, tuple(x.shape) if return_inverse else (0,), torch.long, x.device),
            _empty(mode, (kept,) if return_counts else (0,), torch.long, x.device))


DATA_DEPENDENT: dict[Any, Callable[..., Any]] = {
    aten.nonzero.default: _nonzero,
    aten.masked_select.default: _masked_select,
    aten.bincount.default: _bincount,
    aten.repeat_interleave.Tensor: _repeat_interleave,
    aten._unique2.default: _unique,
}


_SHAPE_FROM_VALUES = frozenset({*DATA_DEPENDENT, aten.index.Tensor, aten.index_put_.default,
                                aten.index_put.default})
"""Ops whose output shape can depend on input values (boolean indexing among them)."""


# --- host-side views of fake values (installed on FakeTensor by intercept.patches) ------------

_active: SimFakeMode | None = None


def activate(mode: SimFakeMode | None) -> None:
    """Make ``mode`` the process's mode: threads enter it, value reads sync through it."""
    global _active
    _active = mode


def active() -> SimFakeMode | None:
    """The mode :func:`activate` set, if any."""
    return _active


def _host_read(t: torch.Tensor) -> torch.Tensor:
    """Sync the host with the GPU before reading ``t``; what it reads (``host_values``)."""
    if _active is None:
        return _stand_in(t)
    _active.host_sync(t)
    return _active.host_values(t)


def _script_line() -> str:
    """`` at FILE:LINE`` of the innermost frame of the user's script (not torch's or ours)."""
    frame = _script_frame()
    return "" if frame is None else f" at {frame.filename}:{frame.lineno}"


def _script_frame() -> Any:
    ours = (os.path.dirname(torch.__file__), os.path.dirname(__file__))
    for frame in reversed(traceback.extract_stack()):
        if not frame.filename.startswith(ours) and not frame.filename.startswith("<"):
            return frame
    return None


def _warn_unknown(t: torch.Tensor) -> None:
    """An integer or bool read the simulator cannot know: say so once per script line."""
    frame = _script_frame()
    value = plausible_value(t.dtype)
    message = (f"phantora: reading a {t.dtype} tensor whose values the simulator does not know "
               f"(computed from fake floating-point data); it reads {value}")
    if frame is None:
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    else:
        warnings.warn_explicit(message, RuntimeWarning, frame.filename, frame.lineno or 0)


def _stand_in(t: torch.Tensor) -> torch.Tensor:
    """A real CPU tensor shaped like ``t`` holding its plausible value (no memory per element)."""
    with torch.utils._python_dispatch._disable_current_modes():
        return torch.full((), plausible_value(t.dtype), dtype=t.dtype).expand(t.shape)


def fake_format(self: torch.Tensor, spec: str) -> str:
    """``f"{loss:.4f}"``: Tensor.__format__ only uses .item() for exact torch.Tensor."""
    if self.dim() == 0:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


def fake_repr(self: torch.Tensor, *, tensor_contents: Any = None) -> str:
    """``print(t)``: what real torch prints (``torch._tensor_str._str_intern``'s dense case),
    with plausible values, after a host sync."""
    values = _host_read(self)
    tensor_str = torch._tensor_str
    prefix = "tensor("
    suffixes = []
    if (self.device.type != torch._C._get_default_device()
            or (self.device.type == "cuda" and torch.cuda.current_device() != self.device.index)):
        suffixes.append(f"device='{self.device}'")
    default_dtypes = (torch.get_default_dtype(), torch.int64, torch.bool,
                      torch.cdouble if torch.get_default_dtype() == torch.double else torch.cfloat)
    if self.numel() == 0:
        if self.dim() != 1:
            suffixes.append(f"size={tuple(self.shape)}")
        if self.dtype != torch.get_default_dtype():
            suffixes.append(f"dtype={self.dtype}")
        contents = "[]"
    else:
        if self.dtype not in default_dtypes:
            suffixes.append(f"dtype={self.dtype}")
        contents = tensor_str._tensor_str(values, len(prefix))
    if self.grad_fn is not None:
        suffixes.append(f"grad_fn=<{type(self.grad_fn).__name__}>")
    elif self.requires_grad:
        suffixes.append("requires_grad=True")
    if tensor_contents is not None:
        contents = tensor_contents
    text = tensor_str._add_suffixes(prefix + contents, suffixes, len(prefix), force_newline=False)
    if isinstance(self, torch.nn.Parameter):
        text = f"Parameter containing:\n{text}"
    return text


def fake_tolist(self: torch.Tensor) -> Any:
    """One host sync for the whole tensor (FakeTensor.tolist would sync per element)."""
    return _host_read(self).tolist()


def fake_numpy(self: torch.Tensor, *, force: bool = False) -> np.ndarray:
    """Plausible values; a CUDA tensor refuses exactly as real torch does."""
    if self.device.type != "cpu" and not force:
        raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use "
                        "Tensor.cpu() to copy the tensor to host memory first.")
    return _host_read(self).numpy(force=True).copy()


def fake_reduce_ex(self: torch.Tensor, protocol: int) -> tuple[Any, tuple[Any, ...]]:
    """``torch.save`` of a fake tensor writes a meta placeholder (dtype, shape, strides)."""
    return (torch._utils._rebuild_meta_tensor_no_storage,
            (self.dtype, tuple(self.shape), tuple(self.stride()), self.requires_grad))


ThreadBootstrap = Callable[[threading.Thread], None]


def bootstrap_thread_under_mode(original: ThreadBootstrap) -> ThreadBootstrap:
    """Wrap ``Thread._bootstrap_inner`` so script threads run under the active mode.

    Dispatch modes are thread-local: without this, a DataLoader pin-memory thread would make
    real tensors and fail on 'cuda'.
    """

    @functools.wraps(original)
    def bootstrap_inner(thread: threading.Thread) -> None:
        mode = _active
        with mode if mode is not None else contextlib.nullcontext():
            original(thread)

    return bootstrap_inner

