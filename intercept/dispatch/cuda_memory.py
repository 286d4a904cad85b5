"""The memory queries of ``torch.cuda`` and ``torch.accelerator``, answered by the simulated
caching allocator (``intercept.memory.device_memory.DeviceMemory``, one per GPU; listed in
``intercept.dispatch.patches.PATCHES``).
"""

from typing import Any

import torch

from intercept.dispatch.cuda_devices import index_of, installed


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    return installed().memory.nested_stats(index_of(device))


def reset_peak_memory_stats(device: Any = None) -> None:
    installed().memory.reset_peak(index_of(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    installed().memory.reset_accumulated(index_of(device))


def empty_cache() -> None:
    """Every GPU's allocator releases its unused cached segments (as PyTorch's does)."""
    installed().memory.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes: free is what neither the CUDA context nor the allocator holds."""
    return installed().memory.mem_get_info(index_of(device))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """The allocator reserves at most ``fraction`` of the GPU (checks as torch does)."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    installed().memory.set_fraction(index_of(device), fraction)


def get_per_process_memory_fraction(device: Any = None) -> float:
    return installed().memory.fraction(index_of(device))


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
