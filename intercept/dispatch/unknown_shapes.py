"""Data-dependent output shapes of values the simulator does not know.

FakeTensorMode raises DynamicOutputShapeException for these ops; with
``simulation.unknown_shapes: half`` they keep :data:`SELECT_FRACTION` of the elements instead
(``bincount`` and ``repeat_interleave`` read every unknown count as ``INT_VALUE``).
"""

from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from intercept.values.plausible import INT_VALUE

aten = torch.ops.aten
SELECT_FRACTION = 0.5


def fake_empty(mode: FakeTensorMode, shape: tuple[int, ...], dtype: torch.dtype,
               device: torch.device) -> Any:
    """A fake tensor of ``shape`` made in ``mode`` (no kernel, no device memory counted)."""
    return mode.dispatch(aten.empty.memory_format, (), (list(shape),),
                         {"dtype": dtype, "device": device})


def _selected(numel: int) -> int:
    return int(numel * SELECT_FRACTION)


def _nonzero(mode: FakeTensorMode, x: torch.Tensor) -> Any:
    return fake_empty(mode, (_selected(x.numel()), x.dim()), torch.long, x.device)


def _masked_select(mode: FakeTensorMode, x: torch.Tensor, mask: torch.Tensor) -> Any:
    numel = torch.broadcast_shapes(x.shape, mask.shape).numel()
    return fake_empty(mode, (_selected(numel),), x.dtype, x.device)


def _bincount(mode: FakeTensorMode, x: torch.Tensor, weights: Any = None,
              minlength: int = 0) -> Any:
    dtype = torch.long if weights is None else weights.dtype
    return fake_empty(mode, (max(int(minlength), INT_VALUE + 1),), dtype, x.device)


def _repeat_interleave(mode: FakeTensorMode, repeats: torch.Tensor,
                       output_size: Any = None) -> Any:
    numel = output_size if output_size is not None else repeats.numel() * INT_VALUE
    return fake_empty(mode, (int(numel),), repeats.dtype, repeats.device)


def _unique(mode: FakeTensorMode, x: torch.Tensor, sorted: bool = True,
            return_inverse: bool = False, return_counts: bool = False) -> Any:
    kept = max(_selected(x.numel()), 1)
    return (fake_empty(mode, (kept,), x.dtype, x.device),
            fake_empty(mode, tuple(x.shape) if return_inverse else (0,), torch.long, x.device),
            fake_empty(mode, (kept,) if return_counts else (0,), torch.long, x.device))


DATA_DEPENDENT: dict[Any, Callable[..., Any]] = {
    aten.nonzero.default: _nonzero,
    aten.masked_select.default: _masked_select,
    aten.bincount.default: _bincount,
    aten.repeat_interleave.Tensor: _repeat_interleave,
    aten._unique2.default: _unique,
}


SHAPE_FROM_VALUES = frozenset({*DATA_DEPENDENT, aten.index.Tensor, aten.index_put_.default,
                               aten.index_put.default})
"""Ops whose output shape can depend on input values (boolean indexing among them)."""

