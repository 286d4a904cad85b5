"""Host-side views of fake values, installed on FakeTensor by ``intercept.dispatch.patches``:
printing, formatting, ``tolist``, ``numpy`` and pickling read through the active mode, after a host
sync, as on a GPU; threads the script starts run under that mode."""

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from intercept.dispatch import fake_mode
from intercept.values.plausible import stand_in


def _host_read(t: torch.Tensor) -> torch.Tensor:
    """Sync the host with the GPU before reading ``t``; what it reads (``host_values``)."""
    mode = fake_mode.active()
    if mode is None:
        return stand_in(t)
    mode.host_sync(t)
    return mode.host_values(t)


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
        mode = fake_mode.active()
        with mode if mode is not None else contextlib.nullcontext():
            original(thread)

    return bootstrap_inner

