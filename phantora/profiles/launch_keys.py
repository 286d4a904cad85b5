"""A traced aten op call as the compute model keys it: the :class:`KernelSpec` the simulator's
rank side (``intercept.dispatch.op_costs.kernel_spec``) builds for the same call, by the same
rules (:mod:`hwmodel.compute.launch_rules`).

A trace records only a call's inputs (shapes, strides, dtypes, scalars as text). This module
describes them as the rules' operands, infers the outputs per op (a product's result, the
broadcast shape of an element-wise op, the kept dimensions of a reduction, per-op rules for
norms, losses, pooling, factories, ...) and hands both to the rules, which count FLOPs from the
shapes where the rank side asks PyTorch. ``tests/unit/test_launch_keys.py`` checks that both
sides agree, op by op. :func:`launch_spec` answers ``None`` where the bytes cannot be known: an
argument is a tensor list (recorded without shapes: the optimizers' ``_foreach_`` and
``_fused_`` ops, ``cat``, ``index``) or the op has no output rule here. No PyTorch runs here.
"""

import ast
from collections.abc import Callable, Sequence
from math import ceil, prod
from typing import Any

from hwmodel.compute import launch_rules
from hwmodel.compute.launch_rules import MATMUL_OPERANDS, Operand, grouped_matmul_dims, leaves
from hwmodel.compute.ops import base_name, is_memory_bound
from hwmodel.compute.spec import CONV_OPS, GROUPED_MATMUL_OPS, MATMUL_OPS, KernelSpec
from phantora.profiles.kineto import OpCall

TRACE_DTYPES: dict[str, tuple[str, int]] = {
    "c10::BFloat16": ("bf16", 2), "c10::Half": ("fp16", 2), "float": ("fp32", 4),
    "double": ("float64", 8), "long int": ("int64", 8), "int": ("int32", 4),
    "short int": ("int16", 2), "signed char": ("int8", 1), "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
}
"""The profiler's ``Input type`` of a tensor -> the tables' dtype name and element size."""

SCALAR_TYPES: dict[int, tuple[str, int]] = {
    0: ("uint8", 1), 1: ("int8", 1), 2: ("int16", 2), 3: ("int32", 4), 4: ("int64", 8),
    5: ("fp16", 2), 6: ("fp32", 4), 7: ("float64", 8), 11: ("bool", 1), 15: ("bf16", 2),
}
"""A ``ScalarType`` argument (``dtype=``) as the profiler writes it (c10's enum value)."""

WRAPPED_NUMBERS = frozenset({"double", "long int"})
"""The types of the 0-dim tensors PyTorch wraps a Python number in (``x * 0.5``): such an
operand (never the first) is a number to the rank side, and no GPU memory is read for it."""

NOT_TENSORS = frozenset({"Scalar", "ScalarList", ""})
"""``Input type`` of arguments that are no tensors (``""``: an absent optional); any other
type is a tensor's dtype or a list of tensors."""

ATTENTION_CAUSAL: dict[str, int] = {
    "scaled_dot_product_attention": 5, "_scaled_dot_product_cudnn_attention": 6,
    "_scaled_dot_product_cudnn_attention_backward": 14, "_scaled_dot_product_flash_attention": 4,
    "_scaled_dot_product_flash_attention_backward": 11,
    "_scaled_dot_product_efficient_attention": 6,
    "_scaled_dot_product_efficient_attention_backward": 11,
    "_scaled_dot_product_flash_attention_for_cpu": 4,
    "_scaled_dot_product_flash_attention_for_cpu_backward": 7}
"""SDPA ops (query and key as ``[batch, heads, seq, head_dim]``): where their ``is_causal`` is."""

COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "logical_and",
                         "logical_or", "logical_not"})
"""Element-wise ops whose output is ``bool``."""

FLOATING = frozenset({"bf16", "fp16", "fp32", "float64"})


def dense(shape: Sequence[int], dtype: tuple[str, int]) -> Operand:
    """A contiguous tensor."""
    shape = tuple(shape)
    return Operand(shape, tuple(prod(shape[i + 1:]) for i in range(len(shape))), *dtype)


def _like(t: Operand, shape: Sequence[int] | None = None,
          dtype: tuple[str, int] | None = None) -> Operand:
    """A new output of ``shape`` and ``dtype`` (default: ``t``'s) laid out as ``t`` is where
    that is channels_last, else contiguous (PyTorch's preserve_format)."""
    shape = tuple(t.shape if shape is None else shape)
    dtype = (t.dtype, t.itemsize) if dtype is None else dtype
    if len(shape) == 4 and t.channels_last() and not t.contiguous():
        _, c, h, w = shape
        return Operand(shape, (h * w * c, 1, w * c, c), *dtype)
    return dense(shape, dtype)


Argument = Any
"""A recorded input: an :class:`Operand`, a scalar or list as its Python value (text where it
parses as none), or None (an absent optional)."""


class _Unknowable(Exception):
    """The call's bytes cannot be told from the trace."""


def dispatched_call(calls: Sequence[OpCall]) -> OpCall | None:
    """Of the op calls enclosing a launch (innermost first), the one the simulator's rank side
    sees and names the kernel by: the outermost whose op the compute model knows (a matrix
    product, attention, a convolution, a grouped GEMM, a memory-bound op). PyTorch's wrappers
    around it (``aten::linear``, ``aten::to``, ``aten::cross_entropy_loss``) decompose before
    the rank side dispatches; the ops inside it (the ``aten::copy_`` of an ``aten::_to_copy``)
    it never dispatches. The innermost call where none is known; None without calls."""
    known = [call for call in calls if _known(call.name)]
    return known[-1] if known else (calls[0] if calls else None)


def _known(name: str) -> bool:
    op = base_name(name)
    return (op in MATMUL_OPS or op in CONV_OPS or op in GROUPED_MATMUL_OPS
            or op in ATTENTION_CAUSAL or is_memory_bound(name))


def launch_spec(call: OpCall) -> KernelSpec | None:
    """The launch as the compute model keys it; None where the trace cannot tell its bytes."""
    try:
        args = _arguments(call)
        op = call.name.rsplit("::", 1)[-1].split(".", 1)[0]
        outputs = _outputs(op, base_name(call.name), args)
        if outputs is None:
            return None
        causal_at = ATTENTION_CAUSAL.get(op)
        return launch_rules.launch_spec(
            call.name, args, outputs, result=outputs[0] if len(outputs) == 1 else None,
            causal=causal_at is not None and _flag(args, causal_at))
    except _Unknowable:
        return None


def _arguments(call: OpCall) -> list[Argument]:
    """Each recorded input as an :class:`Operand`, its value or None; :class:`_Unknowable` for
    a tensor list (recorded without shapes)."""
    found: list[Argument] = []
    for index, kind in enumerate(call.input_types):
        if kind in NOT_TENSORS:
            text = call.concrete_inputs[index] if index < len(call.concrete_inputs) else ""
            found.append(_value(str(text)) if kind else None)
            continue
        if kind not in TRACE_DTYPES:
            raise _Unknowable(kind)  # a tensor list, or a tensor of a dtype not known here
        dims = call.input_dims[index] if index < len(call.input_dims) else ()
        if index > 0 and not dims and kind in WRAPPED_NUMBERS:
            found.append(None)  # a Python number the dispatcher wrapped: no GPU memory
            continue
        strides = call.input_strides[index] if index < len(call.input_strides) else ()
        if len(strides) != len(dims):
            strides = dense(dims, TRACE_DTYPES[kind]).strides  # recorded without strides
        found.append(Operand(tuple(dims), tuple(strides), *TRACE_DTYPES[kind]))
    return found


def _value(text: str) -> Any:
    """A recorded scalar or list as Python writes it (``"[2, 2]"``, ``"True"``, ``"1e-05"``);
    None where nothing was recorded; the text where it is no literal (``"inf"``)."""
    try:
        return ast.literal_eval(text) if text else None
    except (ValueError, SyntaxError):
        return text


# -- compute-bound families: what they write ------------------------------------------------

OutputRule = Callable[[list[Argument]], list[Operand]]


def _product(first: int) -> OutputRule:
    """A matrix product's ``[batch,] m x n`` result, of its first factor's dtype."""
    def rule(args: list[Argument]) -> list[Operand]:
        a, b = _tensor(args, first), _tensor(args, first + 1)
        return [dense((*a.shape[:-1], b.shape[-1]), (a.dtype, a.itemsize))]
    return rule


def _attention(backward: bool) -> OutputRule:
    """The gradients of query, key and value (laid out as they are); or the output and its
    log-sum-exp per row (the kernels' small extra outputs, RNG state, are left out)."""
    def rule(args: list[Argument]) -> list[Operand]:
        query = _tensor(args, 1 if backward else 0, rank=4)
        _tensor(args, 2 if backward else 1)  # the key, which the rules read
        return leaves(args, Operand)[1:4] if backward else [
            _like(query), dense(query.shape[:3], ("fp32", 4))]
    return rule


def _convolution(args: list[Argument]) -> list[Operand]:
    """``convolution(input, weight, bias, stride, padding, dilation, transposed,
    output_padding, groups)`` of 2-D images."""
    x, weight = _tensor(args, 0, rank=4), _tensor(args, 1)
    stride, padding, dilation = _ints(args, 3), _ints(args, 4), _ints(args, 5)
    _int(args, 8)  # the groups, which the rules read
    return [_like(x, (x.shape[0], weight.shape[0], *_windows(
        x.shape[2:], weight.shape[2:], stride, padding, dilation, False)))]


def _convolution_backward(args: list[Argument]) -> list[Operand]:
    """``convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    dilation, transposed, output_padding, groups, output_mask)`` of 2-D images: the gradients
    asked for of the input and the weight."""
    x, weight = _tensor(args, 1, rank=4), _tensor(args, 2)
    _tensor(args, 0)  # the output's gradient, stride and groups, which the rules read
    _ints(args, 4)
    _int(args, 9)
    return [t for t, wanted in zip((_like(x), _like(weight)), _flags(args, 10), strict=False)
            if wanted]


def _grouped(args: list[Argument]) -> list[Operand]:
    """``_grouped_mm(a, b, offs)``: ``[rows, n]``, or ``[groups, k, n]`` for a weight
    gradient."""
    a = _tensor(args, 0)
    _tensor(args, 1)
    (groups, rows, n, k), variant = grouped_matmul_dims(args)
    return [dense((groups, k, n) if variant == "wgrad" else (rows, n), (a.dtype, a.itemsize))]


# -- memory-bound ops: what they write --------------------------------------------------------

POINTWISE = frozenset({
    "abs", "add", "addcdiv", "addcmul", "bitwise_and", "bitwise_not", "bitwise_or", "clamp",
    "clamp_max", "clamp_min", "cos", "div", "erf", "exp", "floor_divide", "gelu",
    "gelu_backward", "lerp", "log", "masked_fill", "maximum", "minimum", "mul", "neg", "pow",
    "reciprocal", "relu", "remainder", "rsqrt", "rsub", "sigmoid", "sigmoid_backward", "sign",
    "sgn", "silu", "silu_backward", "sin", "sqrt", "sub", "tanh", "tanh_backward",
    "threshold_backward", "where", "__and__", "__or__", *COMPARISONS,
})
"""Element-wise ops: one output of the operands' broadcast shape."""


def _outputs(op: str, base: str, args: list[Argument]) -> list[Operand] | None:
    """What the call writes, or None where no rule here says."""
    if op.endswith("_") and not op.endswith("__"):
        return [_tensor(args, 0)]  # in place: the first argument, as it is laid out
    rule = OUTPUT_RULES.get(base)
    if rule is not None:
        return rule(args)
    if base in POINTWISE:
        return [_pointwise(base, args)]
    return None


def _pointwise(base: str, args: list[Argument]) -> Operand:
    tensors = leaves(args, Operand)
    if not tensors:
        raise _Unknowable(base)
    shape = _broadcast([t.shape for t in tensors])
    if base in COMPARISONS:
        return dense(shape, ("bool", 1))
    ranked = [t for t in tensors if t.shape] or tensors
    floating = [t for t in ranked if t.dtype in FLOATING]
    if floating:
        widest = max(floating, key=lambda t: t.itemsize)
        return dense(shape, (widest.dtype, widest.itemsize))
    if base == "div":
        return dense(shape, ("fp32", 4))
    widest = max(ranked, key=lambda t: t.itemsize)
    return dense(shape, (widest.dtype, widest.itemsize))


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max(len(shape) for shape in shapes)
    padded = [(1,) * (rank - len(shape)) + shape for shape in shapes]
    return tuple(max(sizes) if min(sizes) != 0 else 0 for sizes in zip(*padded, strict=True))


def _reduction(args: list[Argument], dim_at: int | None = None, keepdim_at: int | None = None,
               dtype_at: int | None = None) -> Operand:
    """The result of reducing the first argument over the dims at ``dim_at`` (all where
    absent or empty), in the dtype at ``dtype_at`` if given, else the argument's."""
    x = _tensor(args, 0)
    dims = _ints(args, dim_at) if dim_at is not None and _given(args, dim_at) else []
    keep = keepdim_at is not None and _flag(args, keepdim_at)
    reduced = {d % len(x.shape) for d in dims} if dims else set(range(len(x.shape)))
    shape = [1 if i in reduced else s for i, s in enumerate(x.shape) if keep or i not in reduced]
    return dense(shape, _scalar_type(args, dtype_at) or (x.dtype, x.itemsize))


def _sum(args: list[Argument]) -> list[Operand]:
    """``sum(self, dtype)``, ``sum(self, dim, keepdim, dtype)`` (also ``mean``); integers
    sum to int64."""
    out = _reduction(args, 1, 2, 3) if len(args) > 2 else _reduction(args, dtype_at=1)
    if out.dtype not in FLOATING:
        out = dense(out.shape, ("int64", 8))
    return [out]


def _max(args: list[Argument]) -> list[Operand]:
    """``max(self)``; ``max(self, dim, keepdim)``, which also gives the positions."""
    if len(args) == 1:
        return [_reduction(args)]
    values = _reduction(args, 1, 2)
    return [values, dense(values.shape, ("int64", 8))]


def _norm(statistics: int) -> OutputRule:
    """``native_layer_norm`` (mean and rstd), ``_fused_rms_norm`` (rstd): the normalised input
    and fp32 statistics per normalised row."""
    def rule(args: list[Argument]) -> list[Operand]:
        x, normalized = _tensor(args, 0), _ints(args, 1)
        stats = dense(x.shape[:len(x.shape) - len(normalized)] + (1,) * len(normalized),
                      ("fp32", 4))
        return [_like(x), *[stats] * statistics]
    return rule


def _norm_backward(weights_at: tuple[int, ...], mask_at: int) -> OutputRule:
    """The gradients asked for of the input and of the weights given."""
    def rule(args: list[Argument]) -> list[Operand]:
        grads = [_like(_tensor(args, 1)), *(_like(args[at]) if isinstance(args[at], Operand)
                                            else None for at in weights_at)]
        return [g for g, wanted in zip(grads, _flags(args, mask_at), strict=False)
                if wanted and g is not None]
    return rule


def _softmax(args: list[Argument]) -> list[Operand]:
    x = _tensor(args, 0)
    return [_like(x, dtype=("fp32", 4) if _flag(args, 2) else None)]


def _softmax_backward(args: list[Argument]) -> list[Operand]:
    return [_like(_tensor(args, 0), dtype=_scalar_type(args, 3))]


def _nll_loss(args: list[Argument]) -> list[Operand]:
    logits, target = _tensor(args, 0), _tensor(args, 1)
    kind = (logits.dtype, logits.itemsize)
    per_sample = _int(args, 3) == 0
    return [dense(target.shape if per_sample else (), kind), dense((), kind)]


def _embedding(args: list[Argument]) -> list[Operand]:
    weight, indices = _tensor(args, 0), _tensor(args, 1)
    return [dense(indices.shape + weight.shape[-1:], (weight.dtype, weight.itemsize))]


def _embedding_backward(args: list[Argument]) -> list[Operand]:
    grad = _tensor(args, 0)
    return [dense((_int(args, 2), grad.shape[-1]), (grad.dtype, grad.itemsize))]


def _factory(size_at: int, dtype_at: int) -> OutputRule:
    """``zeros(size, dtype)``, ``new_zeros(self, size, dtype)``: the size given, the dtype given
    (else ``self``'s, else the default fp32)."""
    def rule(args: list[Argument]) -> list[Operand]:
        model = args[0] if args and isinstance(args[0], Operand) else None
        dtype = _scalar_type(args, dtype_at) or (
            (model.dtype, model.itemsize) if model is not None else ("fp32", 4))
        return [dense(_ints(args, size_at), dtype)]
    return rule


def _copy_like(dtype_at: int | None) -> OutputRule:
    """``clone``, ``_to_copy``, ``zeros_like``: a new tensor laid out like the first argument
    (in the dtype given)."""
    def rule(args: list[Argument]) -> list[Operand]:
        return [_like(_tensor(args, 0), dtype=_scalar_type(args, dtype_at))]
    return rule


def _sized_by_argument(args: list[Argument]) -> list[Operand]:
    """``slice_backward(grad, input_sizes, ...)``, ``select_backward``: zeros of the input's
    size, the gradient written into them."""
    grad = _tensor(args, 0)
    return [dense(_ints(args, 1), (grad.dtype, grad.itemsize))]


def _like_argument(position: int) -> OutputRule:
    def rule(args: list[Argument]) -> list[Operand]:
        return [_like(_tensor(args, position))]
    return rule


def _batch_norm(args: list[Argument]) -> list[Operand]:
    x = _tensor(args, 0)
    stats = dense((x.shape[1],) if _flag(args, 5) else (0,), ("fp32", 4))
    return [_like(x), stats, stats]


def _batch_norm_backward(args: list[Argument]) -> list[Operand]:
    x, weight = _tensor(args, 1), args[2]
    channel = (weight.dtype, weight.itemsize) if isinstance(weight, Operand) else (x.dtype,
                                                                                  x.itemsize)
    grads = [_like(x), dense((x.shape[1],), channel), dense((x.shape[1],), channel)]
    return [g for g, wanted in zip(grads, _flags(args, 9), strict=False) if wanted]


def _max_pool(args: list[Argument]) -> list[Operand]:
    x = _tensor(args, 0)
    kernel = _ints(args, 1)
    stride = _ints(args, 2) if _given(args, 2) and _ints(args, 2) else kernel
    padding = _ints(args, 3) if _given(args, 3) else [0]
    dilation = _ints(args, 4) if _given(args, 4) else [1]
    shape = (*x.shape[:-2], *_windows(x.shape[-2:], kernel, stride, padding, dilation,
                                      _flag(args, 5)))
    return [_like(x, shape), _like(x, shape, ("int64", 8))]


def _adaptive_avg_pool(args: list[Argument]) -> list[Operand]:
    x = _tensor(args, 0)
    return [_like(x, (*x.shape[:-2], *_ints(args, 1)))]


def _index_select(args: list[Argument]) -> list[Operand]:
    x, dim, index = _tensor(args, 0), _int(args, 1), _tensor(args, 2)
    shape = list(x.shape)
    shape[dim % len(shape)] = index.numel
    return [dense(shape, (x.dtype, x.itemsize))]


def _gather(args: list[Argument]) -> list[Operand]:
    x = _tensor(args, 0)
    return [dense(_tensor(args, 2).shape, (x.dtype, x.itemsize))]


def _topk(args: list[Argument]) -> list[Operand]:
    x, k, dim = _tensor(args, 0), _int(args, 1), _int(args, 2)
    shape = list(x.shape)
    shape[dim % len(shape)] = k
    return [dense(shape, (x.dtype, x.itemsize)), dense(shape, ("int64", 8))]


def _sort(args: list[Argument]) -> list[Operand]:
    x = _tensor(args, 0)
    return [_like(x), _like(x, dtype=("int64", 8))]


def _dropout(args: list[Argument]) -> list[Operand]:
    x = _tensor(args, 0)
    return [_like(x), _like(x, dtype=("bool", 1))]


OUTPUT_RULES: dict[str, OutputRule] = {
    **{op: _product(first) for op, first in MATMUL_OPERANDS.items()},
    **{op: _attention(op.endswith("_backward")) for op in ATTENTION_CAUSAL},
    "convolution": _convolution, "convolution_backward": _convolution_backward,
    "_grouped_mm": _grouped,
    "sum": _sum, "mean": _sum, "max": _max,
    "amax": lambda args: [_reduction(args, 1, 2)], "amin": lambda args: [_reduction(args, 1, 2)],
    "linalg_vector_norm": lambda args: [_reduction(args, 2, 3, 4)],
    "cumsum": _copy_like(2),
    "native_layer_norm": _norm(2), "native_layer_norm_backward": _norm_backward((5, 6), 7),
    "_fused_rms_norm": _norm(1), "_fused_rms_norm_backward": _norm_backward((4,), 5),
    "_softmax": _softmax, "_log_softmax": _softmax,
    "_softmax_backward_data": _softmax_backward, "_log_softmax_backward_data": _softmax_backward,
    "nll_loss_forward": _nll_loss, "nll_loss_backward": _like_argument(1),
    "embedding": _embedding, "embedding_dense_backward": _embedding_backward,
    "zeros": _factory(0, 1), "ones": _factory(0, 1), "full": _factory(0, 2),
    "new_zeros": _factory(1, 2), "new_ones": _factory(1, 2), "new_full": _factory(1, 3),
    "zeros_like": _copy_like(1), "ones_like": _copy_like(1), "full_like": _copy_like(2),
    "clone": _copy_like(None), "_to_copy": _copy_like(1),
    "slice_backward": _sized_by_argument, "select_backward": _sized_by_argument,
    "native_batch_norm": _batch_norm, "native_batch_norm_backward": _batch_norm_backward,
    "max_pool2d_with_indices": _max_pool,
    "max_pool2d_with_indices_backward": _like_argument(1),
    "_adaptive_avg_pool2d": _adaptive_avg_pool,
    "_adaptive_avg_pool2d_backward": _like_argument(1),
    "index_select": _index_select, "gather": _gather, "topk": _topk, "sort": _sort,
    "native_dropout": _dropout, "native_dropout_backward": _like_argument(0),
}
"""What each op writes, by base name, where it is not a plain element-wise op's one output."""


def _windows(sizes: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
             padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool) -> list[int]:
    """Output lengths of a convolution or pooling window along two dimensions (a parameter of
    one value holds for both)."""
    return [_window(size, *(p[i % len(p)] for p in (kernel, stride, padding, dilation)),
                    ceil_mode=ceil_mode) for i, size in enumerate(sizes)]


def _window(size: int, kernel: int, stride: int, padding: int, dilation: int,
            ceil_mode: bool) -> int:
    """Output length along one dimension."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    length = (ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (length - 1) * stride >= size + padding:
        length -= 1
    return length


# -- reading recorded arguments -----------------------------------------------------------------

def _tensor(args: list[Argument], position: int, rank: int | None = None) -> Operand:
    """The tensor recorded at ``position`` (of ``rank`` dimensions, if given)."""
    value = args[position] if position < len(args) else None
    if not isinstance(value, Operand) or rank not in (None, len(value.shape)):
        raise _Unknowable(f"argument {position} is not a recorded tensor of rank {rank}")
    return value


def _given(args: list[Argument], position: int) -> bool:
    """Whether a scalar or list was recorded at ``position``."""
    return position < len(args) and not isinstance(args[position], (Operand, type(None)))


def _recorded(args: list[Argument], position: int, kind: type | tuple[type, ...]) -> Any:
    """The value recorded at ``position``; :class:`_Unknowable` where none of ``kind`` was."""
    value = args[position] if position < len(args) else None
    if not isinstance(value, kind):
        raise _Unknowable(f"argument {position}: {value!r} is not recorded as {kind}")
    return value


def _int(args: list[Argument], position: int) -> int:
    return _recorded(args, position, int)


def _ints(args: list[Argument], position: int) -> list[int]:
    """``[2, 2]`` or ``2`` -> ``[2, 2]`` / ``[2]``."""
    value = _recorded(args, position, (int, list))
    values = value if isinstance(value, list) else [value]
    return [_recorded(values, index, int) for index in range(len(values))]


def _flag(args: list[Argument], position: int) -> bool:
    return position < len(args) and args[position] is True


def _flags(args: list[Argument], position: int) -> list[bool]:
    """``[True, False, True]``."""
    return [value is True for value in _recorded(args, position, list)]


def _scalar_type(args: list[Argument], position: int | None) -> tuple[str, int] | None:
    """A ``dtype=`` argument, None where not given."""
    if position is None or not _given(args, position):
        return None
    kind = SCALAR_TYPES.get(_int(args, position))
    if kind is None:
        raise _Unknowable(f"dtype code {args[position]}")
    return kind
