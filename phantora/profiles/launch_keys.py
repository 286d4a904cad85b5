"""A traced aten op call as the compute model keys it: the :class:`KernelSpec` the simulator's
rank side (``intercept.dispatch.op_costs.kernel_spec``) builds for the same call.

The rank side sees the call's tensors; a trace records only its inputs (shapes, strides,
dtypes, scalar arguments as text). So this module infers the outputs per op (the broadcast
shape of an element-wise op, the kept dimensions of a reduction, per-op rules for norms,
losses, pooling, factories, ...) and then follows the rank side's rules: FLOPs by PyTorch's
formulas for products, convolutions and attention; bytes as the memory every tensor spans
(broadcast dimensions once), inputs read and outputs written, a write-only destination
(``copy_``, ``fill_``, ``zero_``) not read and a gather (``embedding``, ``nll_loss_forward``)
reading only the rows it picks; matrix layouts from strides; ``strided`` for an element-wise
launch with a broadcast or non-contiguous operand. ``tests/unit/test_launch_keys.py`` checks
both sides agree, op by op.

:func:`launch_spec` answers ``None`` where the bytes cannot be known: an argument is a tensor
list (the profiler records no shapes for those: the optimizers' ``_foreach_`` and ``_fused_``
ops, ``cat``, ``index``) or the op has no output rule here. Nothing here runs PyTorch.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import ceil, prod

from hwmodel.compute.ops import base_name, is_memory_bound
from hwmodel.compute.spec import (CONV_OPS, GROUPED_MATMUL_OPS, MATMUL_OPS, STRIDED,
                                   KernelSpec)
from hwmodel.compute.table import attention_flops
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

ATTENTION_ARGUMENTS: dict[str, tuple[int, int, int]] = {
    "scaled_dot_product_attention": (0, 1, 5),
    "_scaled_dot_product_cudnn_attention": (0, 1, 6),
    "_scaled_dot_product_cudnn_attention_backward": (1, 2, 14),
    "_scaled_dot_product_flash_attention": (0, 1, 4),
    "_scaled_dot_product_flash_attention_backward": (1, 2, 11),
    "_scaled_dot_product_efficient_attention": (0, 1, 6),
    "_scaled_dot_product_efficient_attention_backward": (1, 2, 11),
    "_scaled_dot_product_flash_attention_for_cpu": (0, 1, 4),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (1, 2, 7),
}
"""SDPA ops (query and key as ``[batch, heads, seq, head_dim]``): positions of the query, the
key and ``is_causal`` in their schemas."""

WRITE_ONLY_DESTINATION = frozenset({"copy", "fill", "zero"})
"""In-place ops that overwrite their first argument without reading it."""

COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "logical_and",
                         "logical_or", "logical_not"})
"""Element-wise ops whose output is ``bool``."""


@dataclass(frozen=True)
class Tensor:
    """A tensor argument as recorded: shape, strides, dtype name and element size."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    itemsize: int

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of memory it spans: a broadcast (stride-0) dimension counts once."""
        return prod(size for size, stride in zip(self.shape, self.strides, strict=True)
                    if stride != 0) * self.itemsize

    def contiguous(self) -> bool:
        return _dense_in_order(self, range(len(self.shape) - 1, -1, -1))

    def channels_last(self) -> bool:
        return len(self.shape) == 4 and _dense_in_order(self, (1, 3, 2, 0))

    def like(self, shape: Sequence[int] | None = None, dtype: tuple[str, int] | None = None
             ) -> "Tensor":
        """A new output of ``shape`` and ``dtype`` (default: this one's) laid out as this one
        is where that is channels_last, else contiguous (PyTorch's preserve_format)."""
        shape = tuple(self.shape if shape is None else shape)
        name, size = (self.dtype, self.itemsize) if dtype is None else dtype
        if len(shape) == 4 and self.channels_last() and not self.contiguous():
            _, c, h, w = shape
            return Tensor(shape, (h * w * c, 1, w * c, c), name, size)
        return dense(shape, (name, size))


def dense(shape: Sequence[int], dtype: tuple[str, int]) -> Tensor:
    """A contiguous tensor."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return Tensor(tuple(shape), tuple(reversed(strides)), *dtype)


def _dense_in_order(t: Tensor, order: Sequence[int]) -> bool:
    """PyTorch's contiguity test in a dimension order (innermost first): size-1 dimensions
    do not count."""
    expected = 1
    for dim in order:
        if t.shape[dim] != 1:
            if t.strides[dim] != expected:
                return False
            expected *= t.shape[dim]
    return True


Argument = Tensor | str | None
"""A recorded input: a tensor, a scalar or list as its text, or None (an absent optional)."""


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
            or op in ATTENTION_ARGUMENTS or is_memory_bound(name))


def launch_spec(call: OpCall) -> KernelSpec | None:
    """The launch as the compute model keys it; None where the trace cannot tell its bytes."""
    try:
        args = _arguments(call)
        op = call.name.rsplit("::", 1)[-1].split(".", 1)[0]
        base = base_name(call.name)
        if base in MATMUL_OPS:
            return _matmul(call.name, base, args)
        if op in ATTENTION_ARGUMENTS:
            return _attention(call.name, op, args)
        if base in CONV_OPS:
            return _convolution(call.name, op, args)
        if base in GROUPED_MATMUL_OPS:
            return _grouped(call.name, args)
        outputs = _outputs(op, base, args)
    except _Unknowable:
        return None
    if outputs is None:
        return None
    tensors = _tensors(args)
    read = tensors[1:] if base in WRITE_ONLY_DESTINATION or base in GATHERS else tensors
    nbytes = sum(t.nbytes for t in read) + sum(t.nbytes for t in outputs)
    gathered = GATHERS.get(base)
    if gathered is not None:
        nbytes += gathered(args, outputs)
    return KernelSpec(call.name, 0, nbytes, _elementwise_dtype(base, tensors, outputs),
                      variant=STRIDED if _strided(tensors, outputs) else "")


def _arguments(call: OpCall) -> list[Argument]:
    """Each recorded input as a :class:`Tensor`, its text or None; :class:`_Unknowable` for a
    tensor list (recorded without shapes)."""
    found: list[Argument] = []
    for index, kind in enumerate(call.input_types):
        if kind in NOT_TENSORS:
            text = call.concrete_inputs[index] if index < len(call.concrete_inputs) else ""
            found.append(str(text) if kind else None)
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
        found.append(Tensor(tuple(dims), tuple(strides), *TRACE_DTYPES[kind]))
    return found


# -- compute-bound families: dims and FLOPs as the tables key them --------------------------

def _matmul(name: str, base: str, args: list[Argument]) -> KernelSpec:
    first = 1 if base in ("addmm", "baddbmm") else 0
    a, b = _tensor(args, first), _tensor(args, first + 1)
    batch, m, n, k = dims = (a.shape[0] if len(a.shape) == 3 else 1, a.shape[-2], b.shape[-1],
                             a.shape[-1])
    layout = ("n" if a.strides[-1] == 1 else "t") + ("n" if b.strides[-1] == 1 else "t")
    out = dense((batch, m, n) if len(a.shape) == 3 else (m, n), (a.dtype, a.itemsize))
    nbytes = _read(args) + out.nbytes
    return KernelSpec(name, 2 * batch * m * n * k, nbytes, a.dtype, dims, layout)


def _attention(name: str, op: str, args: list[Argument]) -> KernelSpec:
    query_at, key_at, causal_at = ATTENTION_ARGUMENTS[op]
    query, key = _tensor(args, query_at), _tensor(args, key_at)
    if len(query.shape) != 4:
        raise _Unknowable(name)
    batch, heads, seq_q, head_dim = query.shape
    dims = (batch, heads, key.shape[1], seq_q, key.shape[2], head_dim)
    causal = _flag(args, causal_at)
    backward = op.endswith("_backward")
    tensors = _tensors(args)
    # the gradients of query, key and value; or the output and its log-sum-exp per row
    written = tensors[1:4] if backward else [query.like(),
                                            dense((batch, heads, seq_q), ("fp32", 4))]
    return KernelSpec(name, attention_flops(dims, causal, backward),
                      sum(t.nbytes for t in tensors + written), query.dtype, dims,
                      "causal" if causal else "full")


def _convolution(name: str, op: str, args: list[Argument]) -> KernelSpec:
    """``convolution(input, weight, bias, stride, padding, dilation, ...)`` and
    ``convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask)``: FLOPs as ``torch.utils.flop_counter``
    counts them (per gradient asked for, the forward's)."""
    backward = op == "convolution_backward"
    x, weight = (_tensor(args, 1), _tensor(args, 2)) if backward else (_tensor(args, 0),
                                                                       _tensor(args, 1))
    if len(x.shape) != 4:
        raise _Unknowable(name)
    stride, padding, dilation = (_ints(args, i) for i in ((4, 5, 6) if backward else (3, 4, 5)))
    if backward:
        out_shape = _tensor(args, 0).shape
        mask = _flags(args, 10)
        written = [t for t, wanted in zip((x.like(), weight.like()), mask, strict=False)
                   if wanted]
        passes = sum(mask[:2])
    else:
        out_shape = (x.shape[0], weight.shape[0],
                     *(_window(x.shape[2 + i], weight.shape[2 + i], stride[i % len(stride)],
                               padding[i % len(padding)], dilation[i % len(dilation)], False)
                       for i in range(2)))
        written, passes = [x.like(out_shape)], 1
    flops = 2 * out_shape[0] * prod(weight.shape) * prod(out_shape[2:]) * passes
    layout = "nhwc" if any(t.channels_last() and not t.contiguous() for t in (x, weight)) \
        else "nchw"
    dims = (x.shape[0], x.shape[1], weight.shape[0], x.shape[2], weight.shape[2], stride[0])
    nbytes = _read(args) + sum(
        t.nbytes for t in written)
    return KernelSpec(name, flops, nbytes, x.dtype, dims, layout)


def _grouped(name: str, args: list[Argument]) -> KernelSpec:
    """``_grouped_mm(a, b, offs)``, as ``intercept.dispatch.op_costs._grouped_spec`` reads it."""
    a, b = _tensor(args, 0), _tensor(args, 1)
    offs = args[2] if len(args) > 2 else None
    groups = offs.numel if isinstance(offs, Tensor) else (b.shape[0] if len(b.shape) == 3 else 1)
    if len(a.shape) == 2 and len(b.shape) == 2:
        k, rows, n, variant = a.shape[0], a.shape[1], b.shape[1], "wgrad"
        out = dense((groups, k, n), (a.dtype, a.itemsize))
    else:
        rows = a.shape[-2] * (a.shape[0] if len(a.shape) == 3 else 1)
        k, n = a.shape[-1], b.shape[-1]
        variant = "fwd" if b.strides[-1] != 1 else "dgrad"
        out = dense((rows, n), (a.dtype, a.itemsize))
    nbytes = _read(args) + out.nbytes
    return KernelSpec(name, 2 * rows * n * k, nbytes, a.dtype, (groups, rows, n, k), variant)


# -- memory-bound ops: their outputs ----------------------------------------------------------

OutputRule = Callable[[list[Argument]], list[Tensor]]

POINTWISE = frozenset({
    "abs", "add", "addcdiv", "addcmul", "bitwise_and", "bitwise_not", "bitwise_or", "clamp",
    "clamp_max", "clamp_min", "cos", "div", "erf", "exp", "floor_divide", "gelu",
    "gelu_backward", "lerp", "log", "masked_fill", "maximum", "minimum", "mul", "neg", "pow",
    "reciprocal", "relu", "remainder", "rsqrt", "rsub", "sigmoid", "sigmoid_backward", "sign",
    "sgn", "silu", "silu_backward", "sin", "sqrt", "sub", "tanh", "tanh_backward",
    "threshold_backward", "where", "__and__", "__or__", *COMPARISONS,
})
"""Element-wise ops: one output of the operands' broadcast shape."""


def _outputs(op: str, base: str, args: list[Argument]) -> list[Tensor] | None:
    """What the call writes, or None where no rule here says."""
    if op.endswith("_") and not op.endswith("__"):
        return [_tensor(args, 0)]  # in place: the first argument, as it is laid out
    rule = OUTPUT_RULES.get(base)
    if rule is not None:
        return rule(args)
    if base in POINTWISE:
        return [_pointwise(base, args)]
    return None


def _pointwise(base: str, args: list[Argument]) -> Tensor:
    tensors = _tensors(args)
    if not tensors:
        raise _Unknowable(base)
    shape = _broadcast([t.shape for t in tensors])
    if base in COMPARISONS:
        return dense(shape, ("bool", 1))
    ranked = [t for t in tensors if t.shape] or tensors
    floating = [t for t in ranked if t.dtype in ("bf16", "fp16", "fp32", "float64")]
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


FLOATING = frozenset({"bf16", "fp16", "fp32", "float64"})


def _reduction(args: list[Argument], dim_at: int | None = None, keepdim_at: int | None = None,
               dtype_at: int | None = None) -> Tensor:
    """The result of reducing the first argument over the dims at ``dim_at`` (all where
    absent or empty), in the dtype at ``dtype_at`` if given, else the argument's."""
    x = _tensor(args, 0)
    dims = _ints(args, dim_at) if dim_at is not None and _given(args, dim_at) else []
    keep = keepdim_at is not None and _flag(args, keepdim_at)
    reduced = {d % len(x.shape) for d in dims} if dims else set(range(len(x.shape)))
    shape = [1 if i in reduced else s for i, s in enumerate(x.shape) if keep or i not in reduced]
    return dense(shape, _scalar_type(args, dtype_at) or (x.dtype, x.itemsize))


def _sum(args: list[Argument]) -> list[Tensor]:
    """``sum(self, dtype)``, ``sum(self, dim, keepdim, dtype)`` (also ``mean``); integers
    sum to int64."""
    out = _reduction(args, 1, 2, 3) if len(args) > 2 else _reduction(args, dtype_at=1)
    if out.dtype not in FLOATING:
        out = dense(out.shape, ("int64", 8))
    return [out]


def _max(args: list[Argument]) -> list[Tensor]:
    """``max(self)``; ``max(self, dim, keepdim)``, which also gives the positions."""
    if len(args) == 1:
        return [_reduction(args)]
    values = _reduction(args, 1, 2)
    return [values, dense(values.shape, ("int64", 8))]


def _layer_norm(args: list[Argument]) -> list[Tensor]:
    x, normalized = _tensor(args, 0), _ints(args, 1)
    stats = dense(x.shape[:len(x.shape) - len(normalized)] + (1,) * len(normalized),
                  ("fp32", 4))
    return [x.like(), stats, stats]


def _layer_norm_backward(args: list[Argument]) -> list[Tensor]:
    mask = _flags(args, 7)
    grads = [_tensor(args, 1).like(), *(t.like() if isinstance(t, Tensor) else None
                                        for t in (args[5], args[6]))]
    return [g for g, wanted in zip(grads, mask, strict=False) if wanted and g is not None]


def _rms_norm(args: list[Argument]) -> list[Tensor]:
    x, normalized = _tensor(args, 0), _ints(args, 1)
    return [x.like(), dense(x.shape[:len(x.shape) - len(normalized)] + (1,) * len(normalized),
                            ("fp32", 4))]


def _rms_norm_backward(args: list[Argument]) -> list[Tensor]:
    mask = _flags(args, 5)
    weight = args[4]
    grads = [_tensor(args, 1).like(), weight.like() if isinstance(weight, Tensor) else None]
    return [g for g, wanted in zip(grads, mask, strict=False) if wanted and g is not None]


def _softmax(args: list[Argument]) -> list[Tensor]:
    x = _tensor(args, 0)
    return [x.like(dtype=("fp32", 4) if _flag(args, 2) else None)]


def _softmax_backward(args: list[Argument]) -> list[Tensor]:
    return [_tensor(args, 0).like(dtype=_scalar_type(args, 3))]


def _nll_loss(args: list[Argument]) -> list[Tensor]:
    logits, target = _tensor(args, 0), _tensor(args, 1)
    kind = (logits.dtype, logits.itemsize)
    per_sample = _int(args, 3) == 0
    return [dense(target.shape if per_sample else (), kind), dense((), kind)]


def _embedding(args: list[Argument]) -> list[Tensor]:
    weight, indices = _tensor(args, 0), _tensor(args, 1)
    return [dense(indices.shape + weight.shape[-1:], (weight.dtype, weight.itemsize))]


def _embedding_backward(args: list[Argument]) -> list[Tensor]:
    grad = _tensor(args, 0)
    return [dense((_int(args, 2), grad.shape[-1]), (grad.dtype, grad.itemsize))]


def _factory(size_at: int, dtype_at: int) -> OutputRule:
    """``zeros(size, dtype)``, ``new_zeros(self, size, dtype)``: the size given, the dtype given
    (else ``self``'s, else the default fp32)."""
    def rule(args: list[Argument]) -> list[Tensor]:
        model = args[0] if args and isinstance(args[0], Tensor) else None
        dtype = _scalar_type(args, dtype_at) or (
            (model.dtype, model.itemsize) if model is not None else ("fp32", 4))
        return [dense(_ints(args, size_at), dtype)]
    return rule


def _copy_like(dtype_at: int | None) -> OutputRule:
    """``clone``, ``_to_copy``, ``zeros_like``: a new tensor laid out like the first argument
    (in the dtype given)."""
    def rule(args: list[Argument]) -> list[Tensor]:
        return [_tensor(args, 0).like(dtype=_scalar_type(args, dtype_at))]
    return rule


def _sized_by_argument(args: list[Argument]) -> list[Tensor]:
    """``slice_backward(grad, input_sizes, ...)``, ``select_backward``: zeros of the input's
    size, the gradient written into them."""
    grad = _tensor(args, 0)
    return [dense(_ints(args, 1), (grad.dtype, grad.itemsize))]


def _like_argument(position: int) -> OutputRule:
    def rule(args: list[Argument]) -> list[Tensor]:
        return [_tensor(args, position).like()]
    return rule


def _batch_norm(args: list[Argument]) -> list[Tensor]:
    x = _tensor(args, 0)
    stats = dense((x.shape[1],) if _flag(args, 5) else (0,), ("fp32", 4))
    return [x.like(), stats, stats]


def _batch_norm_backward(args: list[Argument]) -> list[Tensor]:
    x, weight = _tensor(args, 1), args[2]
    channel = (weight.dtype, weight.itemsize) if isinstance(weight, Tensor) else (x.dtype,
                                                                                  x.itemsize)
    grads = [x.like(), dense((x.shape[1],), channel), dense((x.shape[1],), channel)]
    return [g for g, wanted in zip(grads, _flags(args, 9), strict=False) if wanted]


def _max_pool(args: list[Argument]) -> list[Tensor]:
    x = _tensor(args, 0)
    kernel = _ints(args, 1)
    stride = _ints(args, 2) if _given(args, 2) and _ints(args, 2) else kernel
    padding = _ints(args, 3) if _given(args, 3) else [0]
    dilation = _ints(args, 4) if _given(args, 4) else [1]
    ceil_mode = _flag(args, 5)
    spatial = [_window(x.shape[-2 + i], kernel[i % len(kernel)], stride[i % len(stride)],
                       padding[i % len(padding)], dilation[i % len(dilation)], ceil_mode)
               for i in range(2)]
    shape = (*x.shape[:-2], *spatial)
    return [x.like(shape), x.like(shape, ("int64", 8))]


def _adaptive_avg_pool(args: list[Argument]) -> list[Tensor]:
    x = _tensor(args, 0)
    return [x.like((*x.shape[:-2], *_ints(args, 1)))]


def _index_select(args: list[Argument]) -> list[Tensor]:
    x, dim, index = _tensor(args, 0), _int(args, 1), _tensor(args, 2)
    shape = list(x.shape)
    shape[dim % len(shape)] = index.numel
    return [dense(shape, (x.dtype, x.itemsize))]


def _gather(args: list[Argument]) -> list[Tensor]:
    x = _tensor(args, 0)
    return [dense(_tensor(args, 2).shape, (x.dtype, x.itemsize))]


def _topk(args: list[Argument]) -> list[Tensor]:
    x, k, dim = _tensor(args, 0), _int(args, 1), _int(args, 2)
    shape = list(x.shape)
    shape[dim % len(shape)] = k
    return [dense(shape, (x.dtype, x.itemsize)), dense(shape, ("int64", 8))]


def _sort(args: list[Argument]) -> list[Tensor]:
    x = _tensor(args, 0)
    return [x.like(), x.like(dtype=("int64", 8))]


def _dropout(args: list[Argument]) -> list[Tensor]:
    x = _tensor(args, 0)
    return [x.like(), x.like(dtype=("bool", 1))]


OUTPUT_RULES: dict[str, OutputRule] = {
    "sum": _sum, "mean": _sum, "max": _max,
    "amax": lambda args: [_reduction(args, 1, 2)], "amin": lambda args: [_reduction(args, 1, 2)],
    "linalg_vector_norm": lambda args: [_reduction(args, 2, 3, 4)],
    "cumsum": _copy_like(2),
    "native_layer_norm": _layer_norm, "native_layer_norm_backward": _layer_norm_backward,
    "_fused_rms_norm": _rms_norm, "_fused_rms_norm_backward": _rms_norm_backward,
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
"""Outputs of the memory-bound ops that are not plain element-wise (by base name)."""


def _gathered_rows(args: list[Argument], outputs: list[Tensor]) -> int:
    """``embedding``: one row of the table per token: the output's elements."""
    return outputs[0].numel * _tensor(args, 0).itemsize


def _gathered_logits(args: list[Argument], outputs: list[Tensor]) -> int:
    """``nll_loss_forward``: one logit per target."""
    return _tensor(args, 1).numel * _tensor(args, 0).itemsize


GATHERS: dict[str, Callable[[list[Argument], list[Tensor]], int]] = {
    "embedding": _gathered_rows, "nll_loss_forward": _gathered_logits}
"""Ops that read only a few rows of their first argument: the bytes they read of it."""


def _elementwise_dtype(base: str, tensors: list[Tensor], outputs: list[Tensor]) -> str:
    """As the rank side names it: the first tensor argument's dtype (else the output's);
    ``src->dst`` for a cast."""
    source = tensors[0] if tensors else (outputs[0] if outputs else None)
    if source is None:
        return ""
    if base == "_to_copy" and outputs:
        return f"{source.dtype}->{outputs[0].dtype}"
    return source.dtype


def _strided(tensors: list[Tensor], outputs: list[Tensor]) -> bool:
    """As ``intercept.dispatch.op_costs._strided``: a single output judged; an operand that
    is not laid out as the output (broadcast, transposed) makes the launch strided."""
    if len(outputs) != 1:
        return False
    out = outputs[0]
    if not (out.contiguous() or out.channels_last()):
        return any(t.numel > 1 for t in tensors)
    return any(t.numel > 1 and (t.shape != out.shape or not _laid_out_alike(t, out))
               for t in tensors)


def _laid_out_alike(t: Tensor, out: Tensor) -> bool:
    return all(a == b for a, b, size in zip(t.strides, out.strides, out.shape, strict=True)
               if size > 1)


def _window(size: int, kernel: int, stride: int, padding: int, dilation: int,
            ceil_mode: bool) -> int:
    """Output length of a convolution or pooling window along one dimension."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    length = (ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (length - 1) * stride >= size + padding:
        length -= 1
    return length


# -- reading recorded arguments -----------------------------------------------------------------

def _tensors(args: list[Argument]) -> list[Tensor]:
    return [a for a in args if isinstance(a, Tensor)]


def _read(args: list[Argument]) -> int:
    """Bytes of every tensor argument: what a product, attention or convolution reads."""
    return sum(t.nbytes for t in _tensors(args))


def _tensor(args: list[Argument], position: int) -> Tensor:
    value = args[position] if position < len(args) else None
    if not isinstance(value, Tensor):
        raise _Unknowable(f"argument {position} is not a recorded tensor")
    return value


def _given(args: list[Argument], position: int) -> bool:
    return position < len(args) and isinstance(args[position], str) and args[position] != ""


def _text(args: list[Argument], position: int) -> str:
    if not _given(args, position):
        raise _Unknowable(f"argument {position} is not recorded")
    return str(args[position])


def _int(args: list[Argument], position: int) -> int:
    return int(_text(args, position))


def _ints(args: list[Argument], position: int) -> list[int]:
    """``"[2, 2]"`` or ``"2"`` -> ``[2, 2]`` / ``[2]``."""
    return [int(word) for word in re.findall(r"-?\d+", _text(args, position))]


def _flag(args: list[Argument], position: int) -> bool:
    return _given(args, position) and str(args[position]) == "True"


def _flags(args: list[Argument], position: int) -> list[bool]:
    """``"[True, False, True]"`` -> ``[True, False, True]``."""
    return [word == "True" for word in re.findall(r"True|False", _text(args, position))]


def _scalar_type(args: list[Argument], position: int | None) -> tuple[str, int] | None:
    """A ``dtype=`` argument, None where not given."""
    if position is None or not _given(args, position):
        return None
    kind = SCALAR_TYPES.get(int(_text(args, position)))
    if kind is None:
        raise _Unknowable(f"dtype code {args[position]}")
    return kind
