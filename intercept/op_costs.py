"""FLOPs and bytes moved by one aten op, from the shapes of its inputs and outputs.

The compute model (``phantora.compute``) turns these into a kernel duration; it never sees a
tensor. FLOPs come from PyTorch's own formulas (``torch.utils.flop_counter.flop_registry``:
mm, addmm, bmm, baddbmm, convolutions, the SDPA / flash / efficient attention kernels); every
other op counts 0 FLOPs and is costed by its bytes, which are never 0 for an op that touches a
tensor.

Bytes = bytes read + bytes written, counted as the memory the tensors span: a broadcast
(stride-0) dimension is read once, not once per element of the view.
NB: an in-place op counts its mutated input as read and written; the ops in
``WRITE_ONLY_DESTINATION`` do not read their destination, so it is counted once.
"""

from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

aten = torch.ops.aten

WRITE_ONLY_DESTINATION: frozenset[Any] = frozenset({
    aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default,
    aten._foreach_copy_.default, aten._foreach_zero_.default,
})
"""In-place ops that overwrite their first argument without reading it."""

_CAUSAL_ARGUMENT = "is_causal"
_flops_cache: dict[tuple[Any, ...], int] = {}
_causal_index: dict[Any, int | None] = {}


def op_cost(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> tuple[int, int]:
    """``(flops, nbytes)`` of ``func(*args, **kwargs)`` that returned ``out``."""
    read_args = args[1:] if func in WRITE_ONLY_DESTINATION else args
    read = sum(tensor_bytes(t) for t in flat_tensors(read_args))
    if kwargs:
        read += sum(tensor_bytes(t) for t in flat_tensors(kwargs))
    written = sum(tensor_bytes(t) for t in flat_tensors(out))
    return flops(func, args, kwargs, out), read + written


def flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """FLOPs by PyTorch's formula for ``func`` (0 if it has none), cached per shape signature."""
    formula = flop_registry.get(func.overloadpacket)
    if formula is None:
        return 0
    causal = _is_causal(func, args, kwargs)
    key = (func, causal, *(tuple(t.shape) for t in flat_tensors((args, kwargs, out))))
    count = _flops_cache.get(key)
    if count is None:
        count = int(formula(*args, **kwargs, out_val=out))
        if causal:
            # NB: a causal attention kernel skips the masked upper triangle of the score
            # matrix: about half the work (PyTorch's formulas count the full matrix).
            count //= 2
        _flops_cache[key] = count
    return count


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of memory the tensor spans (broadcast dimensions count once)."""
    elements = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride != 0:
            elements *= size
    return elements * t.element_size()


def flat_tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in a nest of tuples, lists and dict values, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    found: list[torch.Tensor] = []
    _collect(value, found)
    return found


def _collect(value: Any, found: list[torch.Tensor]) -> None:
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (tuple, list)):
        return
    for item in value:
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (tuple, list, dict)):
            _collect(item, found)


def _is_causal(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if func not in _causal_index:
        names = [a.name for a in func._schema.arguments]
        _causal_index[func] = names.index(_CAUSAL_ARGUMENT) if _CAUSAL_ARGUMENT in names else None
    index = _causal_index[func]
    if index is None:
        return False
    if _CAUSAL_ARGUMENT in kwargs:
        return bool(kwargs[_CAUSAL_ARGUMENT])
    return index < len(args) and bool(args[index])
