"""What one aten op launches, as the compute model needs it: FLOPs, bytes, dtype and shape.

:func:`kernel_spec` describes a launch as a :class:`~hwmodel.compute.spec.KernelSpec`; the
compute model (``hwmodel.compute``) turns that into a kernel duration and never sees a
tensor. Matrix products carry ``(batch, m, n, k)`` and their operands' layout, attention
kernels ``(batch, heads, kv_heads, seq_q, seq_kv, head_dim)`` and causality: that is what the
measured tables are keyed by. FLOPs come from PyTorch's own formulas
(``torch.utils.flop_counter.flop_registry``: mm, addmm, bmm, baddbmm, convolutions, the SDPA /
flash / efficient attention kernels); every other op counts 0 FLOPs and is costed by its
bytes, which are never 0 for an op that touches a tensor.

Bytes = bytes read + bytes written, counted as the memory the tensors span: a broadcast
(stride-0) dimension is read once, not once per element of the view.
NB: an in-place op counts its mutated input as read and written (multi-tensor ops such as
``_foreach_mul_`` and the fused optimizers return nothing: their mutated lists are counted as
written from the schema, see :func:`_written_in_place`); the ops in ``WRITE_ONLY_DESTINATION``
do not read their destination, so it is counted once, and the ``GATHERS`` read only the rows
they pick from their first argument. This is how ``scripts/measure/measure_kernels.py`` counts the
bytes of the rows it times, so a launch and its table row agree.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

from hwmodel.compute.spec import (CONV_OPS, GROUPED_CONV, GROUPED_MATMUL_OPS, MATMUL_OPS,
                                    RNN_OPS, STRIDED, KernelSpec, rnn_flops)
from intercept.dispatch.cudnn_rnn import CELLS

aten = torch.ops.aten

DTYPE_NAMES: dict[torch.dtype, str] = {torch.bfloat16: "bf16", torch.float16: "fp16",
                                       torch.float32: "fp32"}
"""The tables' dtype names (others are reported by their torch name)."""

_MATMUL_OPERANDS = {"mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2)}
"""Argument positions of the two factors of each matrix product."""

WRITE_ONLY_DESTINATION: frozenset[Any] = frozenset({
    aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default,
    aten._foreach_copy_.default, aten._foreach_zero_.default,
})
"""In-place ops that overwrite their first argument without reading it."""

GATHERS: dict[Any, Callable[[tuple[Any, ...], Any], int]] = {
    aten.embedding.default: lambda args, out: out.numel(),
    aten.nll_loss_forward.default: lambda args, out: args[1].numel(),
}
"""Ops that read a few rows of their first argument, not all of it: elements they gather
(an embedding reads one row per token, the loss one logit per target)."""

READ_ONLY_DESPITE_SCHEMA = frozenset({"grads"})
"""Arguments the fused optimizers' schemas mark mutable (``grads(b!)``, for unscaling) that
their kernels only read: the measured rows count them as read once (AdamW: 28 bytes per
parameter, reading p, g, m, v and writing p, m, v)."""

_CAUSAL_ARGUMENT = "is_causal"
_written_positions: dict[Any, tuple[int, ...]] = {}
_flops_cache: dict[tuple[Any, ...], int] = {}
_causal_index: dict[Any, int | None] = {}


def op_cost(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> tuple[int, int]:
    """``(flops, nbytes)`` of ``func(*args, **kwargs)`` that returned ``out``."""
    read_args = args[1:] if func in WRITE_ONLY_DESTINATION or func in GATHERS else args
    read = sum(tensor_bytes(t) for t in flat_tensors(read_args))
    gathered = GATHERS.get(func)
    if gathered is not None:
        read += gathered(args, out) * args[0].element_size()
    if kwargs:
        read += sum(tensor_bytes(t) for t in flat_tensors(kwargs))
    written = sum(tensor_bytes(t) for t in flat_tensors(out))
    written += sum(tensor_bytes(t) for t in flat_tensors(_written_in_place(func, args)))
    return flops(func, args, kwargs, out), read + written


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


def kernel_spec(name: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                out: Any) -> KernelSpec:
    """The launch of ``func(*args, **kwargs)`` that returned ``out``; ``name`` its aten name."""
    op_flops, nbytes = op_cost(func, args, kwargs, out)
    op = name.rsplit("::", 1)[-1]
    if op in MATMUL_OPS:
        first, second = _MATMUL_OPERANDS[op]
        return _matmul_spec(name, op_flops, nbytes, args[first], args[second])
    if "dot_product" in op and "attention" in op:
        backward = op.endswith("_backward")
        query, key = (args[1], args[2]) if backward else (args[0], args[1])
        if query.dim() == 4:
            batch, heads, seq_q, head_dim = query.shape
            dims = (batch, heads, key.shape[1], seq_q, key.shape[2], head_dim)
            return KernelSpec(name, op_flops, nbytes, dtype_name(query.dtype), dims,
                              "causal" if _is_causal(func, args, kwargs) else "full")
    if op in CONV_OPS:
        return _conv_spec(name, op_flops, nbytes, args, backward=op.endswith("_backward"))
    if op in GROUPED_MATMUL_OPS:
        return _grouped_spec(name, nbytes, args)
    if op in RNN_OPS:
        return rnn_spec(name, nbytes, args, backward=op.endswith("_backward"))
    return KernelSpec(name, op_flops, nbytes, _elementwise_dtype(func, args, out),
                      variant=STRIDED if _strided(args, out) else "")


def _conv_spec(name: str, op_flops: int, nbytes: int, args: tuple[Any, ...],
               backward: bool) -> KernelSpec:
    """``convolution(input, weight, ...)`` / ``convolution_backward(grad, input, weight, ...)``:
    dims from the input and weight (square images and kernels are assumed: the height is
    taken), layout ``nhwc`` where the input or the weight is channels_last (cuDNN's rule; the
    CPU build's shape functions may hand back NCHW outputs where a GPU would not)."""
    x, weight = (args[1], args[2]) if backward else (args[0], args[1])
    stride = args[4] if backward else args[3]
    groups = args[9] if backward else args[8]
    if groups > 1:
        # grouped and depthwise convolutions (ConvNeXt, EfficientNet) move more bytes than
        # they compute: costed by bytes from their own rows, not by a dense convolution's rate
        return KernelSpec(name, op_flops, nbytes, dtype_name(x.dtype), (), GROUPED_CONV)
    if x.dim() != 4:
        return KernelSpec(name, op_flops, nbytes, dtype_name(x.dtype))
    layout = "nhwc" if any(t.is_contiguous(memory_format=torch.channels_last)
                           and not t.is_contiguous() for t in (x, weight)) else "nchw"
    dims = (x.shape[0], x.shape[1], weight.shape[0], x.shape[2], weight.shape[2], stride[0])
    return KernelSpec(name, op_flops, nbytes, dtype_name(x.dtype), dims, layout)


def _grouped_spec(name: str, nbytes: int, args: tuple[Any, ...]) -> KernelSpec:
    """``_grouped_mm(a, b, offs)``: ``[rows, k] x [groups, k, n]`` (``fwd`` where b is a
    transposed view of ``[groups, n, k]`` weights, ``dgrad`` where b is stored so), or
    ``[k, rows] x [rows, n] -> [groups, k, n]`` (``wgrad``). FLOPs: 2 x rows x n x k."""
    a, b = args[0], args[1]
    offs = args[2] if len(args) > 2 else None
    groups = offs.numel() if isinstance(offs, torch.Tensor) else (b.shape[0] if b.dim() == 3 else 1)
    if a.dim() == 2 and b.dim() == 2:
        k, rows, n, variant = a.shape[0], a.shape[1], b.shape[1], "wgrad"
    else:
        rows, k, n = a.shape[-2] * (a.shape[0] if a.dim() == 3 else 1), a.shape[-1], b.shape[-1]
        variant = "fwd" if b.stride(-1) != 1 else "dgrad"
    return KernelSpec(name, 2 * rows * n * k, nbytes, dtype_name(a.dtype), (groups, rows, n, k),
                      variant)


def rnn_spec(name: str, nbytes: int, args: tuple[Any, ...], backward: bool) -> KernelSpec:
    """``_cudnn_rnn(input, weight, stride0, buf, hx, cx, mode, hidden, proj, layers,
    batch_first, dropout, train, bidirectional, batch_sizes, ...)`` and its backward (six more
    arguments after ``cx``): dims ``(seq, batch, input, hidden, layers, directions)``; a packed
    sequence (``batch_sizes``) has its longest sequence and largest batch there, and its FLOPs
    count only its tokens."""
    rest = args[10:] if backward else args[6:]
    mode, hidden, _proj, layers, batch_first, _dropout, _train, bidirectional, batch_sizes = \
        rest[:9]
    x = args[0]
    if batch_sizes:
        seq, batch, tokens = len(batch_sizes), batch_sizes[0], x.shape[0]
    else:
        seq, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
        tokens = seq * batch
    dims = (seq, batch, x.shape[-1], hidden, layers, 2 if bidirectional else 1)
    cell = CELLS[mode]
    return KernelSpec(name, rnn_flops(cell, dims, tokens, backward), nbytes, dtype_name(x.dtype),
                      dims, cell)


def _strided(args: tuple[Any, ...], out: Any) -> bool:
    """Whether an operand is a non-contiguous view or broadcast to the output's shape: PyTorch's
    element-wise ops then run their non-vectorised kernel (rotary embeddings' half-row views
    times a broadcast ``cos``). Operands laid out like the output (channels_last activations)
    are dense: the vectorised kernel runs. Only a single-tensor output is judged; one-element
    operands are scalars to the kernel."""
    if not isinstance(out, torch.Tensor):
        return False
    if not (out.is_contiguous() or out.is_contiguous(memory_format=torch.channels_last)):
        return any(t.numel() > 1 for t in flat_tensors(args))
    return any(t.numel() > 1 and (t.shape != out.shape or not _laid_out_alike(t, out))
               for t in flat_tensors(args))


def _laid_out_alike(t: torch.Tensor, out: torch.Tensor) -> bool:
    """Same strides as ``out`` wherever a dimension has more than one element (the stride of
    a size-1 dimension means nothing)."""
    return all(a == b for a, b, size in zip(t.stride(), out.stride(), out.shape, strict=True)
               if size > 1)


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


def _matmul_spec(name: str, op_flops: int, nbytes: int, a: torch.Tensor,
                 b: torch.Tensor) -> KernelSpec:
    """``[batch,] m x k @ k x n``; layout letter ``t`` for an operand stored transposed."""
    batch = a.shape[0] if a.dim() == 3 else 1
    dims = (batch, a.shape[-2], b.shape[-1], a.shape[-1])
    layout = ("n" if a.stride(-1) == 1 else "t") + ("n" if b.stride(-1) == 1 else "t")
    dtype = dtype_name(a.dtype)
    if dtype == "fp32" and torch.backends.cuda.matmul.allow_tf32:
        dtype = "tf32"
    return KernelSpec(name, op_flops, nbytes, dtype, dims, layout)


def _elementwise_dtype(func: Any, args: tuple[Any, ...], out: Any) -> str:
    """The dtype of the op's first tensor; ``src->dst`` for a cast (``_to_copy``)."""
    source = next(iter(flat_tensors(args)), None)
    if source is None:
        source = next(iter(flat_tensors(out)), None)
    if source is None:
        return ""
    if func.overloadpacket is aten._to_copy:
        result = next(iter(flat_tensors(out)), source)
        return f"{dtype_name(source.dtype)}->{dtype_name(result.dtype)}"
    return dtype_name(source.dtype)


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
