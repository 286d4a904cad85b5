"""Tensor methods and kernels a CPU build gets wrong on fake CUDA tensors: ``.cuda()``, pinning,
scalar reads, convolution layouts, foreach type lists and truncated-normal initialisation
(listed in ``intercept.dispatch.patches.PATCHES``).
"""

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch._prims_common import suggest_memory_format
from torch._subclasses.fake_tensor import FakeTensor, is_fake

from hwmodel.errors import SimulationError
from intercept.dispatch import fake_mode
from intercept.dispatch.cuda_devices import index_of
from intercept.values.store import valuable


def tensor_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
                memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
    """``Tensor.cuda()``: the C++ binding asks for a real CUDA device; ``.to`` does not."""
    return self.to(torch.device("cuda", index_of(device)), non_blocking=non_blocking,
                   memory_format=memory_format)


def tensor_pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """Pinned host memory only speeds real copies up; a fake tensor has no pin_memory kernel."""
    return self


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
