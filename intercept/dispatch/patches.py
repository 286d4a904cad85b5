"""Every patch that makes a CPU-only torch look like a host with CUDA GPUs of the scenario's kind.

All patch points are in :data:`PATCHES`, one table, checked against torch
:data:`TORCH_VERSION_CHECKED`. The C++ shim (``intercept.process.shim``, loaded before torch)
provides the CUDA device guard and hooks underneath: devices, streams and events then work natively
through ``torch.Stream``/``torch.Event``/``torch.accelerator``, and every stream or event
operation reaches the simulator through the shim's callback. The patches cover what the CPU
build's Python layer still refuses (``torch._C._cuda_*`` functions it lacks), what must report
the simulated GPU (names, properties, memory), and what has no meaning without data.

The replacements live by job: :mod:`.cuda_devices` (the simulated GPUs and device queries),
:mod:`.cuda_streams`, :mod:`.cuda_memory`, :mod:`.cuda_rng`, :mod:`.storages`,
:mod:`.tensors`, :mod:`.parameter_moves`, :mod:`.dispatch_modes`, :mod:`.sdpa_choice`,
:mod:`.compile_backend`, and the modules the table names for the rest.

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

import importlib
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.cuda.nvtx
import torch.distributed.tensor._sharding_prop
import torch.optim.optimizer
import torch.utils._foreach_utils
import torch.utils.cpp_extension

from hwmodel.catalogue import GpuSpec
from hwmodel.errors import SimulationError
from intercept.dispatch import cpp_extensions, cuda_ops, cuda_wheels, cudnn_rnn
from intercept.dispatch.compile_backend import compile_with_runnable_backend
from intercept.dispatch.cuda_devices import (
    FakeDevices,
    already_installed,
    current_device,
    device_count,
    exchange_device,
    get_arch_list,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    is_tf32_supported,
    lazy_init,
    maybe_exchange_device,
    set_device,
    set_up,
)
from intercept.dispatch.cuda_memory import (
    accelerator_empty_cache,
    accelerator_get_memory_info,
    accelerator_memory_stats,
    accelerator_reset_accumulated_memory_stats,
    accelerator_reset_peak_memory_stats,
    empty_cache,
    get_per_process_memory_fraction,
    mem_get_info,
    memory_stats_as_nested_dict,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from intercept.dispatch.cuda_rng import (
    DefaultGenerators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from intercept.dispatch.cuda_streams import (
    Event,
    Stream,
    current_stream,
    default_stream,
    is_current_stream_capturing,
    set_stream,
    synchronize,
)
from intercept.dispatch.dispatch_modes import (
    push_mode_counting_its_dispatch,
    sharding_propagation_shapes_only,
)
from intercept.dispatch.parameter_moves import (
    module_apply_keeping_parameters,
    swap_tensors_forgetting_memo,
)
from intercept.dispatch.sdpa_choice import sdpa_cuda
from intercept.dispatch.storages import (
    fake_data_ptr,
    storage_data_ptr_simulated,
    storage_from_buffer_real,
    storage_resize_reallocating,
)
from intercept.dispatch.tensors import (
    conv_memory_format_as_cudnn,
    local_scalar_dense_cuda,
    tensor_cuda,
    tensor_pin_memory,
    trunc_normal_without_rejection,
    with_fake_tensor,
)
from intercept.process import shim
from intercept.values import host_reads

TORCH_VERSION_CHECKED = "2.13.0"


class _NvtxStub:
    """Stands in for ``torch._C._nvtx``: every NVTX call is a no-op returning 0."""

    def __getattr__(self, name: str) -> Callable[..., int]:
        return lambda *args, **kwargs: 0


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
    Patch("torch.backends.cudnn.is_acceptable", cudnn_rnn.is_acceptable,
          "a CPU build has no cuDNN: nn.LSTM warns at every flatten_parameters()"),
    Patch("torch._use_cudnn_rnn_flatten_weight", cudnn_rnn.use_flatten_weight,
          "a CPU build has no cuDNN: nn.LSTM would keep its weights apart"),
    Patch("torch.backends.cudnn.rnn.get_cudnn_mode", cudnn_rnn.cudnn_mode,
          "reads the enum of a cuDNN binding a CPU build lacks"),
    *(Register(op, key, kernel, "a CPU build has no cuDNN: one fused cell per layer and time "
               "step (intercept.dispatch.cudnn_rnn)")
      for op, key, kernel in cudnn_rnn.registrations()),
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
    global _library
    devices = already_installed(gpu, device_count)
    if devices is not None:
        return devices
    if torch.__version__.split("+")[0] != TORCH_VERSION_CHECKED:
        warnings.warn(f"phantora: torch {torch.__version__} is installed; the CUDA patches were "
                      f"checked against {TORCH_VERSION_CHECKED}", RuntimeWarning, stacklevel=2)
    devices = set_up(gpu, device_count)
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
    return devices


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

