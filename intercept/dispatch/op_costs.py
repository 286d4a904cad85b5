"""What one aten op launches, as the compute model needs it: a live call described for the cost
rules of :mod:`hwmodel.compute.launch_rules`, which a profile's reader applies to traces alike.

:func:`kernel_spec` describes the call's tensors as operands, names what the op writes (its
outputs, and what its schema says a multi-tensor op mutates without returning it) and adds what
only live tensors give: FLOPs by PyTorch's own formulas (``torch.utils.flop_counter``: products,
convolutions, attention; other ops count 0 and are costed by their bytes), whether attention is
causal (its schema's ``is_causal``) and whether fp32 products may use TF32.
"""

from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

from hwmodel.compute.launch_rules import Operand, launch_spec, leaves
from hwmodel.compute.spec import KernelSpec

DTYPE_NAMES: dict[torch.dtype, str] = {torch.bfloat16: "bf16", torch.float16: "fp16",
                                       torch.float32: "fp32"}
"""The tables' dtype names (others are reported by their torch name)."""

READ_ONLY_DESPITE_SCHEMA = frozenset({"grads"})
"""Arguments the fused optimizers' schemas mark mutable (``grads(b!)``, for unscaling) that
their kernels only read: the measured rows count them as read once (AdamW: 28 bytes per
parameter, reading p, g, m, v and writing p, m, v)."""

_CAUSAL_ARGUMENT = "is_causal"
_written_positions: dict[Any, tuple[int, ...]] = {}
_flops_cache: dict[tuple[Any, ...], int] = {}
_causal_index: dict[Any, int | None] = {}


def kernel_spec(name: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                out: Any) -> KernelSpec:
    """The launch of ``func(*args, **kwargs)`` that returned ``out``; ``name`` its aten name."""
    written = [operand(t) for t in flat_tensors(out)]
    written += [operand(t) for t in flat_tensors(_written_in_place(func, args))]
    return launch_spec(
        name, [_described(a) for a in args], written,
        result=written[0] if isinstance(out, torch.Tensor) else None,
        read_also=[operand(t) for t in flat_tensors(kwargs)] if kwargs else (),
        flops=flops(func, args, kwargs, out), causal=_is_causal(func, args, kwargs),
        tf32=torch.backends.cuda.matmul.allow_tf32)


def operand(t: torch.Tensor) -> Operand:
    """The tensor as the cost rules describe it."""
    return Operand(t.shape, t.stride(), dtype_name(t.dtype), t.element_size())


def _described(value: Any) -> Any:
    """An argument with its tensors (also inside lists) as :class:`Operand`."""
    if isinstance(value, torch.Tensor):
        return operand(value)
    if isinstance(value, (tuple, list)):
        return [_described(item) for item in value]
    return value


def _written_in_place(func: Any, args: tuple[Any, ...]) -> list[Any]:
    """The positional arguments an op writes without returning them: what a schema with no
    returns marks mutable (``_foreach_add_(Tensor(a!)[] self, ...) -> ()``). An op that
    returns its mutated input (``add_``) has it counted with its output already."""
    positions = _written_positions.get(func)
    if positions is None:
        schema = func._schema
        positions = () if schema.returns else tuple(
            index for index, argument in enumerate(schema.arguments)
            if argument.alias_info is not None and argument.alias_info.is_write
            and not argument.kwarg_only and argument.name not in READ_ONLY_DESPITE_SCHEMA)
        _written_positions[func] = positions
    return [args[index] for index in positions if index < len(args)]


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


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


def flat_tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in a nest of tuples, lists and dict values, in order."""
    return leaves(value, torch.Tensor)


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
