"""The cost rules of one kernel launch, written once for live tensors and for traced shapes.

An aten op call is described by its positional arguments, each tensor an :class:`Operand`
(other values as Python values), and the tensors it writes: the rank side
(``intercept.dispatch.op_costs``) reads them off live tensors, a profile's reader
(``phantora.profiles.launch_keys``) off a trace's recorded inputs and the outputs it infers.
:func:`launch_spec` turns either into the :class:`~hwmodel.compute.spec.KernelSpec` the compute
model keys, so a table calibrated from traces and a simulated launch agree by construction.

Bytes = bytes read + bytes written, each tensor the memory it spans (a broadcast dimension
once). An in-place op's mutated input is read and written, the :data:`WRITE_ONLY_DESTINATION`
ops do not read it, and the :data:`GATHERS` read only the rows they pick: as
``scripts/measure/measure_kernels.py`` counts the bytes of the rows it times.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, TypeVar

from hwmodel.compute.spec import (CONV_OPS, GROUPED_CONV, GROUPED_MATMUL_OPS, MATMUL_OPS,
                                  RNN_CELLS, RNN_OPS, STRIDED, KernelSpec, rnn_flops)
from hwmodel.compute.table import attention_flops, matmul_flops

T = TypeVar("T")


@dataclass(slots=True)
class Operand:
    """A tensor as the cost rules see it (made for every tensor of every launch: not frozen,
    which is slower to make)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    """In elements."""
    dtype: str
    """The tables' name: ``bf16``, ``fp16``, ``fp32``, else PyTorch's (``int64``)."""
    itemsize: int

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of memory it spans: a broadcast (stride-0) dimension counts once."""
        elements = 1
        for size, stride in zip(self.shape, self.strides, strict=True):
            if stride != 0:
                elements *= size
        return elements * self.itemsize

    def contiguous(self) -> bool:
        """PyTorch's ``is_contiguous()``: an empty tensor is."""
        return self.numel == 0 or _dense_in_order(self, range(len(self.shape) - 1, -1, -1))

    def channels_last(self) -> bool:
        """PyTorch's ``is_contiguous(memory_format=torch.channels_last)``: four dimensions,
        dense in NHWC order."""
        return len(self.shape) == 4 and _dense_in_order(self, (1, 3, 2, 0))


def _dense_in_order(t: Operand, order: Sequence[int]) -> bool:
    """PyTorch's test, dimensions innermost first; those of size 1 do not count."""
    expected = 1
    for dim in order:
        if t.shape[dim] != 1:
            if t.strides[dim] != expected:
                return False
            expected *= t.shape[dim]
    return True


WRITE_ONLY_DESTINATION: frozenset[str] = frozenset({
    "copy_", "fill_", "zero_", "_foreach_copy_", "_foreach_zero_"})
"""In-place ops that overwrite their first argument without reading it."""

GATHERS: dict[str, Callable[[Sequence[Any], Sequence[Operand]], int]] = {
    "embedding": lambda args, written: written[0].numel,
    "nll_loss_forward": lambda args, written: args[1].numel,
}
"""Ops that read a few rows of their first argument, not all of it: elements they gather
(an embedding reads one row per token, the loss one logit per target)."""

MATMUL_OPERANDS: dict[str, int] = {"mm": 0, "bmm": 0, "addmm": 1, "baddbmm": 1}
"""Argument position of the first of each matrix product's two factors."""


def launch_spec(name: str, args: Sequence[Any], written: Sequence[Operand], *,
                result: Operand | None, read_also: Sequence[Operand] = (),
                flops: int | None = None, causal: bool = False, tf32: bool = False
                ) -> KernelSpec:
    """The launch of op ``name`` (``aten::mm``) called with ``args`` that wrote ``written``
    (its outputs, and the lists a ``_foreach_`` op mutates). ``result``: its one tensor result,
    if it returns one alone (an element-wise launch is judged :data:`STRIDED` against it);
    ``read_also``: tensors passed by keyword; ``flops``: PyTorch's count where the caller can
    ask it, None to count products, attention and convolutions here from the shapes as PyTorch
    does; ``causal``: attention's ``is_causal``; ``tf32``: fp32 products may use TF32."""
    op = name.rsplit("::", 1)[-1]
    nbytes = _bytes(op, args, written, read_also)
    if op in MATMUL_OPS:
        first = MATMUL_OPERANDS[op]
        return _matmul(name, flops, nbytes, args[first], args[first + 1], tf32)
    if "dot_product" in op and "attention" in op:
        backward = op.endswith("_backward")
        query, key = (args[1], args[2]) if backward else (args[0], args[1])
        if len(query.shape) == 4:
            batch, heads, seq_q, head_dim = query.shape
            dims = (batch, heads, key.shape[1], seq_q, key.shape[2], head_dim)
            count = attention_flops(dims, causal, backward) if flops is None else flops
            return KernelSpec(name, count, nbytes, query.dtype, dims,
                              "causal" if causal else "full")
    if op in CONV_OPS:
        return _convolution(name, flops, nbytes, args, written, op.endswith("_backward"))
    if op in GROUPED_MATMUL_OPS:
        dims, variant = grouped_matmul_dims(args)  # FLOPs: 2 x rows x n x k
        return KernelSpec(name, 2 * prod(dims[1:]), nbytes, args[0].dtype, dims, variant)
    if op in RNN_OPS:
        return _recurrent(name, nbytes, args, op.endswith("_backward"))
    tensors = leaves(args, Operand)
    return KernelSpec(name, flops or 0, nbytes, _elementwise_dtype(op, tensors, written),
                      variant=STRIDED if _strided(tensors, result) else "")


def leaves(value: Any, kind: type[T]) -> list[T]:
    """Every ``kind`` in a nest of tuples, lists and dict values, in order: an op's tensors."""
    if isinstance(value, kind):
        return [value]
    found: list[T] = []
    _collect(value, kind, found)
    return found


def _collect(value: Any, kind: type[T], found: list[T]) -> None:
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (tuple, list)):
        return
    for item in value:
        if isinstance(item, kind):
            found.append(item)
        elif isinstance(item, (tuple, list, dict)):
            _collect(item, kind, found)


def _bytes(op: str, args: Sequence[Any], written: Sequence[Operand],
           read_also: Sequence[Operand]) -> int:
    gathered = GATHERS.get(op)
    skips_first = gathered is not None or op in WRITE_ONLY_DESTINATION
    read = sum(t.nbytes for t in leaves(args[1:] if skips_first else args, Operand))
    if gathered is not None:
        read += gathered(args, written) * args[0].itemsize
    read += sum(t.nbytes for t in read_also)
    return read + sum(t.nbytes for t in written)


def _matmul(name: str, flops: int | None, nbytes: int, a: Operand, b: Operand,
            tf32: bool) -> KernelSpec:
    """``[batch,] m x k @ k x n``; layout letter ``t`` for an operand stored transposed."""
    dims = (a.shape[0] if len(a.shape) == 3 else 1, a.shape[-2], b.shape[-1], a.shape[-1])
    layout = ("n" if a.strides[-1] == 1 else "t") + ("n" if b.strides[-1] == 1 else "t")
    dtype = "tf32" if a.dtype == "fp32" and tf32 else a.dtype
    return KernelSpec(name, matmul_flops(dims) if flops is None else flops, nbytes, dtype, dims,
                      layout)


def _convolution(name: str, flops: int | None, nbytes: int, args: Sequence[Any],
                 written: Sequence[Operand], backward: bool) -> KernelSpec:
    """``convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
    groups)`` and its backward (``grad_output`` first, ``output_mask`` last): dims from the
    input and weight (square images and kernels assumed: the height is taken), layout ``nhwc``
    where the input or the weight is channels_last (cuDNN's rule)."""
    x, weight = (args[1], args[2]) if backward else (args[0], args[1])
    stride = args[4] if backward else args[3]
    groups = args[9] if backward else args[8]
    if flops is None:
        flops = _convolution_flops(args, written, backward)
    if groups > 1:
        # grouped and depthwise convolutions (ConvNeXt, EfficientNet) move more bytes than
        # they compute: costed by bytes from their own rows, not by a dense convolution's rate
        return KernelSpec(name, flops, nbytes, x.dtype, (), GROUPED_CONV)
    if len(x.shape) != 4:
        return KernelSpec(name, flops, nbytes, x.dtype)
    layout = "nhwc" if any(t.channels_last() and not t.contiguous() for t in (x, weight)) \
        else "nchw"
    dims = (x.shape[0], x.shape[1], weight.shape[0], x.shape[2], weight.shape[2], stride[0])
    return KernelSpec(name, flops, nbytes, x.dtype, dims, layout)


def _convolution_flops(args: Sequence[Any], written: Sequence[Operand], backward: bool) -> int:
    """As ``torch.utils.flop_counter`` counts a convolution (not transposed): 2 x batch x
    output positions x weight elements; backward, that for the input's gradient and for the
    weight's (``C_in x C_out`` weights a position there, whatever the groups), as asked."""
    if not backward:
        x, weight, out = args[0], args[1], written[0]
        return 2 * x.shape[0] * prod(weight.shape) * prod(out.shape[2:])
    grad, x, weight, mask = args[0], args[1], args[2], args[10]
    per_weight = 2 * grad.shape[0] * prod(grad.shape[2:]) * prod(weight.shape[2:])
    return (per_weight * weight.shape[0] * weight.shape[1] if mask[0] else 0) + (
        per_weight * x.shape[1] * grad.shape[1] if mask[1] else 0)


def grouped_matmul_dims(args: Sequence[Any]) -> tuple[tuple[int, int, int, int], str]:
    """``(groups, rows, n, k)`` and pass of ``_grouped_mm(a, b, offs)``: ``[rows, k] x
    [groups, k, n]`` (``fwd`` where b is a transposed view of ``[groups, n, k]`` weights,
    ``dgrad`` where b is stored so), or ``[k, rows] x [rows, n] -> [groups, k, n]``
    (``wgrad``)."""
    a, b = args[0], args[1]
    offs = args[2] if len(args) > 2 else None
    groups = offs.numel if isinstance(offs, Operand) else (b.shape[0] if len(b.shape) == 3
                                                           else 1)
    if len(a.shape) == 2 and len(b.shape) == 2:
        return (groups, a.shape[1], b.shape[1], a.shape[0]), "wgrad"
    rows = a.shape[-2] * (a.shape[0] if len(a.shape) == 3 else 1)
    return (groups, rows, b.shape[-1], a.shape[-1]), "fwd" if b.strides[-1] != 1 else "dgrad"


def _recurrent(name: str, nbytes: int, args: Sequence[Any], backward: bool) -> KernelSpec:
    """``_cudnn_rnn(input, weight, stride0, buf, hx, cx, mode, hidden, proj, layers,
    batch_first, dropout, train, bidirectional, batch_sizes, ...)`` and its backward (four more
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
    cell = RNN_CELLS[mode]
    return KernelSpec(name, rnn_flops(cell, dims, tokens, backward), nbytes, x.dtype, dims, cell)


def _elementwise_dtype(op: str, tensors: list[Operand], written: Sequence[Operand]) -> str:
    """The dtype of the op's first tensor argument (else of what it wrote); ``src->dst`` for
    a cast (``_to_copy``)."""
    source = tensors[0] if tensors else (written[0] if written else None)
    if source is None:
        return ""
    if op == "_to_copy":
        return f"{source.dtype}->{(written[0] if written else source).dtype}"
    return source.dtype


def _strided(tensors: list[Operand], result: Operand | None) -> bool:
    """Whether an operand is a non-contiguous view or broadcast to the result's shape: PyTorch's
    element-wise ops then run their non-vectorised kernel (rotary embeddings' half-row views
    times a broadcast ``cos``). Operands laid out like the result (channels_last activations)
    are dense: the vectorised kernel runs. One-element operands are scalars to the kernel."""
    if result is None:
        return False
    if not (result.contiguous() or result.channels_last()):
        return any(t.numel > 1 for t in tensors)
    return any(t.numel > 1 and (t.shape != result.shape or not _laid_out_alike(t, result))
               for t in tensors)


def _laid_out_alike(t: Operand, out: Operand) -> bool:
    """Same strides as ``out`` wherever a dimension has more than one element (the stride of
    a size-1 dimension means nothing)."""
    return all(a == b for a, b, size in zip(t.strides, out.strides, out.shape, strict=True)
               if size > 1)
