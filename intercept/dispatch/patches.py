"""Every patch that makes a CPU-only torch look like a host with CUDA GPUs of the scenario's kind.

All patch points are in :data:`PATCHES`, one table, checked against torch
:data:`TORCH_VERSION_CHECKED`. The C++ shim (``intercept.process.shim``, loaded before torch)
provides the CUDA device guard and hooks underneath: devices, streams and events then work natively
through ``torch.Stream``/``torch.Event``/``torch.accelerator``, and every stream or event
operation reaches the simulator through the shim's callback. The patches cover what the CPU
build's Python layer still refuses (``torch._C._cuda_*`` functions it lacks), what must report
the simulated GPU (names, properties, memory), and what has no meaning without data.

Rules:
* a target must exist (a renamed torch function fails loudly instead of being silently
  "patched" into an attribute nobody reads);
* a module-level target is replaced under every module attribute bound to the same object
  when :func:`install` runs (``torch.cuda.random`` has its own ``from . import current_device``),
  so a patch holds however torch reaches the function;
* functions get one object per target (dynamo keys handlers by function object and refuses a
  second registration of the same one).

Not patched on purpose: ``torch.cuda._is_compiled`` (dynamo would then import CUDA-only symbols
of ``torch._C``), ``torch.version.cuda`` (stays None).
"""

import contextlib
import functools
import importlib
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.cuda.nvtx
import torch.distributed.tensor._sharding_prop
import torch.optim.optimizer
import torch.utils._foreach_utils
import torch.utils.cpp_extension
from torch._prims_common import suggest_memory_format
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, is_fake
from torch.nn.attention import SDPBackend

from intercept.dispatch import cpp_extensions, cuda_ops, cuda_wheels, dispatch_glue, fake_mode
from intercept.memory import device_memory
from intercept.process import shim
from intercept.values import host_reads
from intercept.values.store import valuable
from phantora.cluster.catalogue import GpuSpec
from phantora.errors import SimulationError

TORCH_VERSION_CHECKED = "2.13.0"
DEFAULT_CUDA_SEED = 67280421310721
"""What ``torch.cuda.initial_seed()`` reports before any seeding (c10's default seed)."""
RUNNABLE_COMPILE_BACKENDS = frozenset({"eager", "aot_eager"})
"""``torch.compile`` backends that run on fake tensors; inductor needs real buffers and Triton."""


@dataclass(frozen=True)
class DeviceProperties:
    """What ``torch.cuda.get_device_properties()`` reports, from the GPU catalogue."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    uuid: str
    warp_size: int = 32
    is_integrated: int = 0
    is_multi_gpu_board: int = 0

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB, "
                f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid})")


@dataclass(frozen=True)
class FakeDevices:
    """The simulated devices of this process, as :func:`install` set them up."""

    gpu: GpuSpec
    device_count: int
    memory: device_memory.DeviceMemory

    def properties(self, device: Any = None) -> DeviceProperties:
        index = _index(device)
        return DeviceProperties(
            name=self.gpu.marketing_name, major=self.gpu.sm_arch // 10,
            minor=self.gpu.sm_arch % 10, total_memory=self.gpu.memory_bytes,
            multi_processor_count=self.gpu.sm_count,
            uuid=f"GPU-00000000-0000-0000-0000-{index:012d}")


_installed: FakeDevices | None = None
_seed = DEFAULT_CUDA_SEED
_compile_warned = False


def installed() -> FakeDevices:
    """The devices :func:`install` set up."""
    if _installed is None:
        raise SimulationError("the fake CUDA devices are not installed; call "
                              "intercept.dispatch.device.prepare() first")
    return _installed


def _index(device: Any = None) -> int:
    """A CUDA device index that exists on the simulated host (None: the current device)."""
    index = torch.cuda._utils._get_device_index(device, optional=True)
    count = installed().device_count
    if not 0 <= index < count:
        raise RuntimeError(f"CUDA error: invalid device ordinal {index} "
                           f"(the simulated host has {count} GPUs)")
    return index


# --- devices ----------------------------------------------------------------------------------

def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def lazy_init() -> None:
    """Nothing to initialise: the shim's hooks are always ready."""


def init() -> None:
    """``torch.cuda.init()``: nothing to initialise."""


def device_count() -> int:
    return installed().device_count


def set_device(device: Any) -> None:
    index = torch.cuda._utils._get_device_index(device)
    if index >= 0:
        shim.library().fakecuda_set_device(_index(index))


def current_device() -> int:
    return int(shim.library().fakecuda_current_device())


def exchange_device(device: int) -> int:
    """Make ``device`` current and return the previous one (-1 leaves it unchanged)."""
    if device < 0:
        return -1
    previous = current_device()
    set_device(device)
    return previous


def maybe_exchange_device(device: int) -> int:
    return exchange_device(device)


def get_device_properties(device: Any = None) -> DeviceProperties:
    return installed().properties(device)


def get_device_name(device: Any = None) -> str:
    return installed().properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    properties = installed().properties(device)
    return properties.major, properties.minor


def get_arch_list() -> list[str]:
    return [f"sm_{installed().gpu.sm_arch}"]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return installed().gpu.sm_arch >= 80  # BF16 tensor cores since Ampere


def is_tf32_supported() -> bool:
    return installed().gpu.sm_arch >= 80


# --- streams, events, synchronisation ---------------------------------------------------------

class Stream(torch.Stream):
    """``torch.cuda.Stream``: a ``torch.Stream`` on a fake CUDA device.

    ``wait_event``, ``wait_stream``, ``record_event``, ``query`` and ``synchronize`` are
    torch.Stream's own, which the shim's device guard forwards to the simulator.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:  # wrapping an existing stream
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("cuda", _index(device)), priority=priority)

    @property
    def cuda_stream(self) -> int:
        return self.stream_id


class Event(torch.Event):
    """``torch.cuda.Event``: record/wait/query/synchronize/elapsed_time reach the simulator;
    ``elapsed_time`` is in milliseconds of virtual time."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> "Event":
        return super().__new__(cls, device="cuda", enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)

    def elapsed_time(self, end_event: torch.Event) -> float:
        # torch.Event's own method refuses anything but an exact torch.Event as end_event.
        if not (self.query() and end_event.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return shim.elapsed_ms(self.event_id, end_event.event_id)


def current_stream(device: Any = None) -> Stream:
    stream = torch.accelerator.current_stream(_index(device))
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                  device_type=shim.CUDA_DEVICE_TYPE)


def default_stream(device: Any = None) -> Stream:
    return Stream(stream_id=0, device_index=_index(device), device_type=shim.CUDA_DEVICE_TYPE)


def set_stream(stream: torch.Stream | None) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


def synchronize(device: Any = None) -> None:
    """The stand-in's Python is the simulator's: the call's host cost is the table's
    (``sync_ns``, charged where the wait reaches the simulator)."""
    with shim.simulator_time():
        torch.accelerator.synchronize(_index(device))


def is_current_stream_capturing() -> bool:
    return False  # CUDA graphs are not simulated


# --- memory (intercept.memory.device_memory.DeviceMemory: a caching-allocator model per GPU)
# ---------

def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    return installed().memory.nested_stats(_index(device))


def reset_peak_memory_stats(device: Any = None) -> None:
    installed().memory.reset_peak(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    installed().memory.reset_accumulated(_index(device))


def empty_cache() -> None:
    """Every GPU's allocator releases its unused cached segments (as PyTorch's does)."""
    installed().memory.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes: free is what neither the CUDA context nor the allocator holds."""
    return installed().memory.mem_get_info(_index(device))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """The allocator reserves at most ``fraction`` of the GPU (checks as torch does)."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    installed().memory.set_fraction(_index(device), fraction)


def get_per_process_memory_fraction(device: Any = None) -> float:
    return installed().memory.fraction(_index(device))


def sharding_propagation_shapes_only(original: Callable[..., Any]) -> Callable[..., Any]:
    """DTensor derives an op's global output shape by running it on global-shape fake tensors
    in the active fake mode (a private one on a GPU host): here that is SimFakeMode, which
    must not give those tensors device memory or launch their kernels."""

    @functools.wraps(original)
    def propagate(self: Any, op_schema: Any) -> Any:
        mode = fake_mode.active()
        with mode.shapes_only() if mode is not None else contextlib.nullcontext():
            return original(self, op_schema)

    return propagate


def push_mode_counting_its_dispatch(original: Callable[..., Any]) -> Callable[..., Any]:
    """A script's own dispatch mode runs on a real host too (selective activation
    checkpointing caches or replays every op through one). torch calls its
    ``__torch_dispatch__`` from inside the call into Python that the shim excludes for the
    fake mode, so the mode's class gets a dispatch that first hands the rest of that call to
    the script's time; the op it forwards comes back to the fake mode excluded again.
    Fake tensor modes (the simulator's own, DTensor's shape propagation) keep their own
    accounting. Patched on the class, not the instance: a bound method kept on the mode would
    be a reference cycle, keeping a checkpoint's cached activations alive until a collection."""

    @functools.wraps(original)
    def push_mode(mode: Any, *args: Any, **kwargs: Any) -> Any:
        mode_class = type(mode)
        dispatch = mode_class.__torch_dispatch__
        if not isinstance(mode, FakeTensorMode) and not getattr(dispatch, _COUNTED, False):
            mode_class.__torch_dispatch__ = _counting_dispatch(dispatch)
        return original(mode, *args, **kwargs)

    return push_mode


_COUNTED = "_phantora_counts_as_script"


def _counting_dispatch(dispatch: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(dispatch)
    def counted_dispatch(*args: Any, **kwargs: Any) -> Any:
        shim.count_rest_of_dispatch()
        return dispatch(*args, **kwargs)

    setattr(counted_dispatch, _COUNTED, True)
    return counted_dispatch


def storage_resize_reallocating(original: Callable[..., Any]) -> Callable[..., Any]:
    """``UntypedStorage.resize_`` of a fake CUDA storage gets a new block first (FSDP2 frees
    and re-allocates unsharded parameters this way; no op reaches the dispatcher)."""

    @functools.wraps(original)
    def resize_(self: torch.UntypedStorage, size: int) -> Any:
        installed().memory.resize(self, int(size))
        return original(self, size)

    return resize_


def storage_from_buffer_real(original: Callable[..., Any]) -> Callable[..., Any]:
    """``UntypedStorage.from_buffer`` makes a real CPU storage, as without a fake mode (under
    one it makes a meta storage, which ``torch.ByteTensor(storage)`` then refuses): object
    collectives pickle into one."""

    @functools.wraps(original)
    def from_buffer(*args: Any, **kwargs: Any) -> Any:
        with torch.utils._python_dispatch._disable_current_modes():
            return original(*args, **kwargs)

    return from_buffer


def fake_data_ptr(self: torch.Tensor) -> int:
    """``Tensor.data_ptr()`` of a fake tensor: where its first element lies, as on a GPU (a
    fake storage's own pointer is null, so every tensor would alias every other, and torch
    warns that reading it will become an error). A GPU storage's address is its block's in
    the simulated allocator; a fake host storage's is the storage object's own (unique while
    it lives); a meta or empty one's is null."""
    storage = self.untyped_storage()
    address = installed().memory.address(storage)
    if address is None:
        address = 0 if self.device.type == "meta" or not storage.nbytes() else storage._cdata
    return address + self.storage_offset() * self.element_size()


def storage_data_ptr_simulated(original: Callable[..., int]) -> Callable[..., int]:
    """``UntypedStorage.data_ptr()`` of a fake GPU storage: its address in the simulated
    allocator (see :func:`fake_data_ptr`); other storages keep their own."""

    @functools.wraps(original)
    def data_ptr(self: torch.UntypedStorage) -> int:
        address = installed().memory.address(self)
        return original(self) if address is None else address

    return data_ptr


def accelerator_memory_stats(device_index: Any = None, /) -> dict[str, Any]:
    return torch.cuda.memory_stats(device_index)


def accelerator_reset_peak_memory_stats(device_index: Any = None, /) -> None:
    reset_peak_memory_stats(device_index)


def accelerator_reset_accumulated_memory_stats(device_index: Any = None, /) -> None:
    reset_accumulated_memory_stats(device_index)


def accelerator_empty_cache() -> None:
    empty_cache()


def accelerator_get_memory_info(device_index: Any = None, /) -> tuple[int, int]:
    return mem_get_info(device_index)


# --- random numbers: fake random ops produce no values; only the seed bookkeeping is kept ------

def manual_seed(seed: int) -> None:
    global _seed
    _seed = int(seed)


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    manual_seed(torch.initial_seed())


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return _seed


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    """16 bytes like a CUDA generator's state: the seed, then a zero offset (little endian)."""
    state = (_seed % 2**64).to_bytes(8, "little") + bytes(8)
    with torch.utils._python_dispatch._disable_current_modes():
        return torch.tensor(list(state), dtype=torch.uint8)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(installed().device_count)]


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    with torch.utils._python_dispatch._disable_current_modes():
        manual_seed(int.from_bytes(bytes(new_state[:8].tolist()), "little"))


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for state in new_states:
        set_rng_state(state)


class CudaGenerator:
    """A GPU's default generator (``torch.cuda.default_generators[i]``; a CPU build has none).
    Its state is the simulator's one CUDA seed; a cloned state is a snapshot of it."""

    def __init__(self, index: int, snapshot: int | None = None) -> None:
        self.device = torch.device("cuda", index)
        self._snapshot = snapshot

    def manual_seed(self, new_seed: int) -> "CudaGenerator":
        manual_seed(new_seed)
        return self

    def seed(self) -> int:
        seed()
        return _seed

    def initial_seed(self) -> int:
        return _seed

    def get_state(self) -> torch.Tensor:
        return get_rng_state(self.device)

    def set_state(self, new_state: torch.Tensor) -> "CudaGenerator":
        set_rng_state(new_state)
        return self

    def clone_state(self) -> "CudaGenerator":
        return CudaGenerator(self.device.index or 0, _seed)

    def graphsafe_get_state(self) -> "CudaGenerator":
        return self.clone_state()

    def graphsafe_set_state(self, state: "CudaGenerator") -> "CudaGenerator":
        manual_seed(_seed if state._snapshot is None else state._snapshot)
        return self


class DefaultGenerators(Sequence[CudaGenerator]):
    """``torch.cuda.default_generators``: one :class:`CudaGenerator` per simulated GPU."""

    def __getitem__(self, index: Any) -> Any:
        return tuple(CudaGenerator(i) for i in range(installed().device_count))[index]

    def __len__(self) -> int:
        return installed().device_count


class _NvtxStub:
    """Stands in for ``torch._C._nvtx``: every NVTX call is a no-op returning 0."""

    def __getattr__(self, name: str) -> Callable[..., int]:
        return lambda *args, **kwargs: 0


# --- tensors ----------------------------------------------------------------------------------

def tensor_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
                memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
    """``Tensor.cuda()``: the C++ binding asks for a real CUDA device; ``.to`` does not."""
    return self.to(torch.device("cuda", _index(device)), non_blocking=non_blocking,
                   memory_format=memory_format)


def tensor_pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """Pinned host memory only speeds real copies up; a fake tensor has no pin_memory kernel."""
    return self


def swap_tensors_forgetting_memo(original: Callable[..., None]) -> Callable[..., None]:
    """``Module.to('cuda')`` swaps fake parameters (on a GPU, real ones take the ``.data =``
    path instead); swap_tensors refuses a tensor that has weakrefs. FakeTensorConverter's memo
    holds one to every converted tensor (forgotten here), and a framework may hold
    ``weakref.finalize`` hooks on parameters (DeepSpeed names them for debugging): those are
    detached for the swap and attached again to the same objects (a swap keeps identities)."""

    @functools.wraps(original)
    def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
        for t in (t1, t2):
            if isinstance(t, FakeTensor):
                memo = t.fake_mode.fake_tensor_converter.tensor_memo
                for key in [k for k, v in list(memo.items()) if v is t]:
                    del memo[key]
        detached = []
        if weakref.getweakrefcount(t1) or weakref.getweakrefcount(t2):  # else nothing to find
            registry = weakref.finalize._registry  # type: ignore[attr-defined]
            detached = [f.detach() for f in list(registry) if _finalizes(f, t1, t2)]
        try:
            original(t1, t2)
        finally:
            for found in detached:
                if found is not None:
                    obj, func, args, kwargs = found
                    weakref.finalize(obj, func, *args, **kwargs)

    return swap_tensors


def module_apply_keeping_parameters(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Module.to('cuda')``, ``.bfloat16()``: on a GPU, ``_apply`` converts each parameter in
    place (``param.data = ...``), so the object, its attributes and weight ties survive. A fake
    parameter, or a real one turning fake, cannot take that path: ``_apply`` swaps the fake one
    with a new ``Parameter`` (``__dict__`` included) or puts a new object in the real one's place.
    Frameworks would lose what they set on their parameters (Megatron's
    ``tensor_model_parallel``, ``sequence_parallel``, ``shared``: its grad norm and gradient
    all-reduces depend on them). The outermost call puts each parameter's attributes back on
    the object that holds it afterwards (the converted tensor's own keep theirs), and a
    parameter two modules share stays one object."""
    state = threading.local()

    @functools.wraps(original)
    def _apply(self: torch.nn.Module, fn: Callable[..., Any], recurse: bool = True) -> Any:
        if getattr(state, "active", False):
            return original(self, fn, recurse)
        members = [(module, key, param, dict(vars(param)))
                   for module in (self.modules() if recurse else (self,))
                   for key, param in module._parameters.items() if param is not None]
        state.active = True
        try:
            result = original(self, fn, recurse)
        finally:
            state.active = False
        moved: dict[int, torch.Tensor] = {}
        for module, key, old, attributes in members:
            now = module._parameters.get(key)
            if now is None:
                continue
            first = moved.setdefault(id(old), now)
            if first is not now:
                module._parameters[key] = first
            for name, value in attributes.items():
                vars(first).setdefault(name, value)
        return result

    return _apply


def _finalizes(finalizer: weakref.finalize, *objects: object) -> bool:
    """Whether ``finalizer`` is alive and watches one of ``objects`` (by identity)."""
    watched = finalizer.peek()
    return watched is not None and any(watched[0] is obj for obj in objects)


def trunc_normal_without_rejection(
        original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``nn.init.trunc_normal_`` redraws the samples outside ``[a, b]`` until none is left
    (``mask.any()``). Of fake floats the simulator knows no values, so the loop would never end:
    their comparisons are coin flips. Samples the simulator cannot know are drawn once and
    clamped instead (two kernels at initialisation, where a GPU runs a few rounds of small
    ones); tensors with values run the original."""

    @functools.wraps(original)
    def trunc_normal(tensor: torch.Tensor, mean: float, std: float, a: float, b: float,
                     generator: torch.Generator | None = None) -> torch.Tensor:
        if not is_fake(tensor) or valuable(tensor):
            return original(tensor, mean, std, a, b, generator=generator)
        with torch.no_grad():
            return tensor.normal_(mean, std, generator=generator).clamp_(a, b)

    return trunc_normal


def with_fake_tensor(original: list[type]) -> list[type]:
    """Optimizers and clip_grad_norm_ only use foreach/fused kernels for types in this list
    (else a per-parameter loop: 3x the kernels); DTensor adds itself the same way."""
    return [*original, FakeTensor]


def compile_with_runnable_backend(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile`` with Inductor (the default backend) runs ``intercept.dispatch.compiled``'s
    stand-in, which launches what Inductor would (fused kernels, extern kernels) without
    generating code; other backends that need real buffers run as ``aot_eager``."""

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        global _compile_warned
        backend = kwargs.get("backend") or "inductor"
        if backend == "inductor":
            from intercept.dispatch import compiled  # imports Inductor: only for a compile

            kwargs.update(backend=compiled.backend(kwargs.get("mode")), mode=None,
                          options=None)
        elif backend not in RUNNABLE_COMPILE_BACKENDS and isinstance(backend, str):
            if not _compile_warned:
                _compile_warned = True
                warnings.warn(f"phantora: torch.compile backend {backend!r} replaced by "
                              "'aot_eager' (fake GPUs cannot run generated kernels)",
                              RuntimeWarning, stacklevel=2)
            kwargs.update(backend="aot_eager", mode=None, options=None)
        return original(*args, **kwargs)

    return compile


def conv_memory_format_as_cudnn(original: Callable[..., Any]) -> Callable[..., Any]:
    """Convolutions on (fake) CUDA tensors lay their outputs out as cuDNN does: channels_last
    where the input or the weight is (``cudnn_conv_suggest_memory_format``). A CPU build picks
    a CPU backend for them, whose outputs are NCHW: the rest of a channels_last CNN would then
    run, and be costed, in the wrong layout."""

    @functools.wraps(original)
    def determine(input: torch.Tensor, weight: torch.Tensor, backend: Any) -> Any:
        if input.device.type == "cuda" and input.dim() == 4:
            if any(suggest_memory_format(t) is torch.channels_last for t in (input, weight)):
                return torch.channels_last
            return torch.contiguous_format
        return original(input, weight, backend)

    return determine


def local_scalar_dense_cuda(t: torch.Tensor) -> Any:
    """``torch.tensor([cuda_scalar, ...])`` reads each element below the Python key, so no
    mode sees the read: it reaches this kernel, which reads through the active mode as
    ``.item()`` does (a device-to-host copy the host waits for, then the value)."""
    mode = fake_mode.active()
    if mode is None or not isinstance(t, FakeTensor):
        raise SimulationError("a CUDA scalar was read outside the simulator's fake mode")
    return mode.read_scalar(t)


# --- scaled dot-product attention -------------------------------------------------------------

def sdpa_cuda(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
              is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False) -> torch.Tensor:
    """Pick the kernel a CUDA build picks: the first backend in torch's priority order
    (``torch.nn.attention.sdpa_kernel(..., set_priority=True)`` changes it; by default flash,
    memory-efficient, math, cuDNN) that is enabled and takes these inputs.

    A CPU build's composite SDPA only knows the math path (bmm, softmax, bmm) for 'cuda'.
    NB: grouped-query attention is expanded with repeat_interleave (copies real kernels skip).
    """
    # The selection stands in for C++ code: the simulator's time; the kernels dispatch as usual.
    with shim.simulator_time():
        aten = torch.ops.aten
        if enable_gqa and key.size(-3) != query.size(-3):
            repeats = query.size(-3) // key.size(-3)
            key = key.repeat_interleave(repeats, -3)
            value = value.repeat_interleave(repeats, -3)
        backend = _sdpa_backend(query, attn_mask)
        if backend == SDPBackend.FLASH_ATTENTION:  # pybind enums: equal, not identical
            return aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        needs_logsumexp = torch.is_grad_enabled() and any(
            t.requires_grad for t in (query, key, value))
        if backend == SDPBackend.EFFICIENT_ATTENTION:
            return aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, needs_logsumexp, dropout_p, is_causal,
                scale=scale)[0]
        if backend == SDPBackend.CUDNN_ATTENTION:
            return aten._scaled_dot_product_cudnn_attention(
                query, key, value, attn_mask, needs_logsumexp, dropout_p, is_causal, False,
                scale=scale)[0]
        return aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale)[0]


def _sdpa_backend(query: torch.Tensor, attn_mask: torch.Tensor | None) -> SDPBackend:
    """The backend of :func:`sdpa_cuda`: flash and cuDNN take half precision without a mask
    (head size up to 256 and 128), memory-efficient any 4-D input, math anything. Raises as
    torch does when the enabled backends take none."""
    backends = torch.backends.cuda
    four_d, head = query.dim() == 4, query.size(-1)
    half = query.dtype in (torch.float16, torch.bfloat16)
    takes = {
        SDPBackend.FLASH_ATTENTION: backends.flash_sdp_enabled() and four_d and half
        and attn_mask is None and head <= 256,
        SDPBackend.EFFICIENT_ATTENTION: backends.mem_efficient_sdp_enabled() and four_d,
        SDPBackend.CUDNN_ATTENTION: backends.cudnn_sdp_enabled() and four_d and half
        and attn_mask is None and head <= 128,
        SDPBackend.MATH: backends.math_sdp_enabled(),
    }
    for code in torch._C._get_sdp_priority_order():
        backend = SDPBackend(code)
        if takes.get(backend, False):
            return backend
    raise RuntimeError("No available kernel. Aborting execution. (phantora: no enabled "
                       "scaled_dot_product_attention backend takes these inputs)")


# --- the table --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Patch:
    """Replace the object at ``target`` (a dotted path) by ``new``."""

    target: str
    new: Any
    reason: str


@dataclass(frozen=True)
class Wrap:
    """Replace the object at ``target`` by ``wrapper(original)``."""

    target: str
    wrapper: Callable[[Any], Any]
    reason: str


@dataclass(frozen=True)
class Register:
    """Register ``kernel`` for the aten operator ``op`` at ``dispatch_key``."""

    op: str
    dispatch_key: str
    kernel: Callable[..., Any]
    reason: str


_NO_CUDA = "the CPU build raises 'Torch not compiled with CUDA enabled'"
_NO_C = "calls a torch._C._cuda_* function a CPU build lacks"
_MEMORY = "answered by the simulated caching allocator"

PATCHES: tuple[Patch | Wrap | Register, ...] = (
    # devices
    Patch("torch.cuda.is_available", is_available, "a CPU build reports False"),
    Patch("torch.cuda.is_initialized", is_initialized, "gates memory stats and RNG calls"),
    Patch("torch.cuda._lazy_init", lazy_init, _NO_CUDA),
    Patch("torch.cuda.init", init, _NO_CUDA),
    Patch("torch.cuda.device_count", device_count, "the scenario's GPUs per host"),
    Patch("torch.cuda.set_device", set_device, _NO_C),
    Patch("torch.cuda.current_device", current_device, _NO_CUDA),
    Patch("torch.cuda._exchange_device", exchange_device, "torch.cuda.device(i); " + _NO_C),
    Patch("torch.cuda._maybe_exchange_device", maybe_exchange_device, "torch.cuda.device exit"),
    Patch("torch.cuda.get_device_properties", get_device_properties, "the catalogue GPU"),
    Patch("torch.cuda.get_device_name", get_device_name, "the catalogue's marketing name"),
    Patch("torch.cuda.get_device_capability", get_device_capability, "catalogue sm_arch"),
    Patch("torch.cuda.get_arch_list", get_arch_list, "a CPU build returns []"),
    Patch("torch.cuda.is_bf16_supported", is_bf16_supported, "a CPU build says False"),
    Patch("torch.cuda.is_tf32_supported", is_tf32_supported, "a CPU build says False"),
    # streams, events, synchronisation
    Patch("torch.cuda.Stream", Stream, "the CPU build's class is a dummy that refuses to exist"),
    Patch("torch.cuda.Event", Event, "the CPU build's class is a dummy that refuses to exist"),
    Patch("torch.cuda.current_stream", current_stream, _NO_C),
    Patch("torch.cuda.default_stream", default_stream, _NO_C),
    Patch("torch.cuda.set_stream", set_stream, _NO_C),
    Patch("torch.cuda.synchronize", synchronize, _NO_C + "; the host waits on the simulator"),
    Patch("torch.cuda.is_current_stream_capturing", is_current_stream_capturing, _NO_C),
    # memory
    Patch("torch.cuda.memory.memory_stats_as_nested_dict", memory_stats_as_nested_dict,
          _MEMORY + "; memory_allocated/max_memory_*/memory_stats/memory_summary build on it"),
    Patch("torch.cuda.memory.reset_peak_memory_stats", reset_peak_memory_stats, _NO_C),
    Patch("torch.cuda.memory.reset_accumulated_memory_stats", reset_accumulated_memory_stats,
          _NO_C),
    Patch("torch.cuda.memory.empty_cache", empty_cache, _MEMORY),
    Patch("torch.cuda.memory.mem_get_info", mem_get_info, "calls cudart"),
    Patch("torch.cuda.memory.set_per_process_memory_fraction", set_per_process_memory_fraction,
          _NO_C),
    Patch("torch.cuda.memory.get_per_process_memory_fraction", get_per_process_memory_fraction,
          _NO_C),
    Wrap("torch.UntypedStorage.from_buffer", storage_from_buffer_real,
         "object collectives (send_object_list, broadcast_object_list) pickle into a buffer"),
    Wrap("torch.UntypedStorage.resize_", storage_resize_reallocating,
         "a fake storage's resize_ changes its size in C++ only; the allocator must know"),
    Patch("torch._subclasses.fake_tensor.FakeTensor.data_ptr", fake_data_ptr,
          "a fake storage's pointer is null (every tensor aliases) and deprecated (warns)"),
    Wrap("torch.UntypedStorage.data_ptr", storage_data_ptr_simulated,
         "a fake storage's pointer is null (every storage aliases) and deprecated (warns)"),
    Wrap("torch.distributed.tensor._sharding_prop.ShardingPropagator."
         "_propagate_tensor_meta_non_cached", sharding_propagation_shapes_only,
         "TP: global-shape tensors (1.5 GiB of GPT-2 logits) counted as device memory"),
    Patch("torch.accelerator.memory.memory_stats", accelerator_memory_stats,
          "the C++ device allocator of a CPU build asserts"),
    Patch("torch.accelerator.memory.reset_peak_memory_stats",
          accelerator_reset_peak_memory_stats, "no C++ device allocator"),
    Patch("torch.accelerator.memory.reset_accumulated_memory_stats",
          accelerator_reset_accumulated_memory_stats, "no C++ device allocator"),
    Patch("torch.accelerator.memory.empty_cache", accelerator_empty_cache,
          "no C++ device allocator"),
    Patch("torch.accelerator.memory.get_memory_info", accelerator_get_memory_info,
          "no C++ device allocator"),
    # random numbers
    Patch("torch.cuda.manual_seed", manual_seed, "no CUDA generators in a CPU build"),
    Patch("torch.cuda.manual_seed_all", manual_seed_all, "torch.manual_seed calls it"),
    Patch("torch.cuda.seed", seed, "no CUDA generators"),
    Patch("torch.cuda.seed_all", seed_all, "no CUDA generators"),
    Patch("torch.cuda.initial_seed", initial_seed, "no CUDA generators"),
    Patch("torch.cuda.get_rng_state", get_rng_state, "checkpointing and fork_rng save it"),
    Patch("torch.cuda.get_rng_state_all", get_rng_state_all, "no CUDA generators"),
    Patch("torch.cuda.set_rng_state", set_rng_state, "checkpointing restores it"),
    Patch("torch.cuda.set_rng_state_all", set_rng_state_all, "no CUDA generators"),
    Patch("torch.cuda.default_generators", DefaultGenerators(), "a CPU build has none"),
    # profiling annotations
    Patch("torch.cuda.nvtx._nvtx", _NvtxStub(), "a CPU build raises 'NVTX functions not "
          "installed'"),
    # tensors
    Patch("torch.Tensor.cuda", tensor_cuda, "the binding needs a real device: 'Cannot access "
          "accelerator device when none is available'"),
    Patch("torch.Tensor.pin_memory", tensor_pin_memory, "NYI aten._pin_memory under fake"),
    Patch("torch._subclasses.fake_tensor.FakeTensor.__format__", host_reads.fake_format,
          "Tensor.__format__ reads .item() only for exact torch.Tensor"),
    Patch("torch._subclasses.fake_tensor.FakeTensor.__repr__", host_reads.fake_repr,
          "print(t) shows values like real torch, after a host sync"),
    Patch("torch._subclasses.fake_tensor.FakeTensor.tolist", host_reads.fake_tolist,
          "one host sync instead of one per element"),
    Patch("torch._subclasses.fake_tensor.FakeTensor.numpy", host_reads.fake_numpy,
          "would return uninitialised memory"),
    Patch("torch._subclasses.fake_tensor.FakeTensor.__reduce_ex__", host_reads.fake_reduce_ex,
          "torch.save fails pickling the fake mode; writes meta placeholders instead"),
    Wrap("torch.nn.Module._apply", module_apply_keeping_parameters,
         "Module.to('cuda') of CPU parameters makes new ones, without their attributes"),
    Wrap("torch.utils.swap_tensors", swap_tensors_forgetting_memo,
         "Module.to('cuda'): 'Cannot swap t1 because it has weakref associated with it'"),
    Wrap("torch.nn.init._no_grad_trunc_normal_", trunc_normal_without_rejection,
         "a rejection loop on values the simulator does not know never ends"),
    Wrap("torch.utils._foreach_utils._foreach_supported_types", with_fake_tensor,
         "clip_grad_norm_ falls back to a per-tensor loop"),
    Wrap("torch.optim.optimizer._foreach_supported_types", with_fake_tensor,
         "optimizers fall back to a per-parameter loop"),
    Register("_local_scalar_dense", "CUDA", local_scalar_dense_cuda,
             "torch.tensor() of CUDA scalars reads them below the Python key"),
    Register("scaled_dot_product_attention", "AutogradCUDA", sdpa_cuda,
             "a CPU build only has the math path for 'cuda'"),
    *(Register(op, "CUDA", cuda_ops.placeholder_kernel(op),
               "without a CUDA kernel, AutogradCUDA decomposes it (intercept.dispatch.cuda_ops)")
      for op in cuda_ops.FUSED_ON_CUDA),
    Wrap("torch._C._conv_determine_backend_memory_format", conv_memory_format_as_cudnn,
         "a CPU build has no cuDNN: channels_last convolutions would return NCHW"),
    # CUDA extensions built at first use (intercept.dispatch.cpp_extensions)
    Wrap("torch.utils.cpp_extension.CUDA_HOME", cpp_extensions.stand_in_toolkit,
         "a CPU build has none; DeepSpeed asks its nvcc for the CUDA version before it builds"),
    Patch("torch.utils.cpp_extension.load", cpp_extensions.load,
          "would compile CUDA code for the GPU the rank does not have"),
    Patch("torch.utils.cpp_extension.load_inline", cpp_extensions.load_inline,
          "would compile CUDA code for the GPU the rank does not have"),
    # compilation and threads
    Wrap("torch.compile", compile_with_runnable_backend, "inductor needs real buffers + Triton"),
    Wrap("torch.utils._python_dispatch._push_mode", push_mode_counting_its_dispatch,
         "a script's dispatch mode would run inside the shim's excluded call, for free"),
    Wrap("threading.Thread._bootstrap_inner", host_reads.bootstrap_thread_under_mode,
         "dispatch modes are thread-local; script threads must make fake tensors too"),
)

_library: torch.library.Library | None = None  # keeps the Register kernels alive


def install(gpu: GpuSpec, device_count: int) -> FakeDevices:
    """Apply every patch for ``device_count`` GPUs of kind ``gpu``; once per process."""
    global _installed, _library
    if _installed is not None:
        if (_installed.gpu, _installed.device_count) != (gpu, device_count):
            raise SimulationError(f"fake CUDA devices already installed as "
                                  f"{_installed.device_count} x {_installed.gpu.name}")
        return _installed
    if torch.__version__.split("+")[0] != TORCH_VERSION_CHECKED:
        warnings.warn(f"phantora: torch {torch.__version__} is installed; the CUDA patches were "
                      f"checked against {TORCH_VERSION_CHECKED}", RuntimeWarning, stacklevel=2)
    if device_count < 1:
        raise SimulationError(f"a simulated host needs at least one GPU, got {device_count}")
    shim.library().fakecuda_set_device_count(device_count)
    _installed = FakeDevices(gpu, device_count,
                             device_memory.DeviceMemory(gpu.memory_bytes, gpu.sm_arch))
    replacements: dict[int, Any] = {}
    for entry in PATCHES:
        if isinstance(entry, Register):
            _library = _library or torch.library.Library("aten", "IMPL")
            _library.impl(entry.op, entry.kernel, entry.dispatch_key)
            continue
        owner, name = _resolve(entry.target)
        original = getattr(owner, name)
        new = entry.new if isinstance(entry, Patch) else entry.wrapper(original)
        setattr(owner, name, new)
        if original is not None:  # every unset attribute is None: copies of it are not copies
            replacements[id(original)] = (original, new)
    _rebind_copies(replacements)
    cuda_wheels.prepare_torchvision()
    shim.mark_cuda_initialized()
    # The simulator's own CPU time: every call from torch into Python.
    shim.exclude_interpreter_callbacks()
    return _installed


_calibrated = False


def calibrate_deductions() -> None:
    """Measure the shim's deductions for the CPU time no excluded section covers, once per
    process (a fork server's ranks inherit them); after :func:`install`. Only a script's
    measured CPU time (``simulation.host_time: measured``) needs them."""
    global _calibrated
    if _calibrated:
        return
    section_ns = shim.calibrate_section_deduction()
    shim.set_deductions(shim.Deductions(section_ns, 0))
    shim.set_deductions(shim.Deductions(section_ns, dispatch_glue.calibrate_dispatch_glue()))
    _calibrated = True


def _resolve(target: str) -> tuple[Any, str]:
    """The object holding the attribute ``target`` names, and the attribute's name."""
    path, name = target.rsplit(".", 1)
    parts = path.split(".")
    owner: Any = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=2):
        # a submodule its package deletes from its namespace (torch.optim.optimizer)
        owner = sys.modules.get(".".join(parts[:i])) or getattr(owner, part)
    if not hasattr(owner, name):
        raise SimulationError(f"patch target {target} does not exist in torch {torch.__version__} "
                              f"(checked against {TORCH_VERSION_CHECKED})")
    return owner, name


def _rebind_copies(replacements: dict[int, tuple[Any, Any]]) -> None:
    """Point every module attribute still bound to a patched original at its replacement."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if namespace is None:
            continue
        for name, value in list(namespace.items()):
            hit = replacements.get(id(value))
            if hit is not None and hit[0] is value:
                namespace[name] = hit[1]

