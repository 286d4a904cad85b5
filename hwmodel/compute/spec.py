"""What the compute model knows about one kernel launch: plain numbers, no tensors.

The rank side (``intercept.dispatch.op_costs``) and a trace's reader (``phantora.profiles``) fill
a :class:`KernelSpec` from an op's arguments by the rules of :mod:`hwmodel.compute.launch_rules`;
the compute model (:class:`hwmodel.compute.model.ComputeModel`) turns it into a duration. Keeping
it to hashable numbers lets the model cache durations per distinct launch, and keeps
``hwmodel.compute`` free of PyTorch.
"""

from dataclasses import dataclass
from enum import Enum

from hwmodel.compute.ops import base_name

MATMUL_OPS: frozenset[str] = frozenset({"mm", "addmm", "bmm", "baddbmm"})
"""Matrix products whose shape is ``(batch, m, n, k)`` (batch 1 for 2-D products)."""

CONV_OPS: frozenset[str] = frozenset({"convolution", "convolution_backward"})
"""Convolutions: shape ``(batch, in_channels, out_channels, input size, kernel, stride)``."""
GROUPED_MATMUL_OPS: frozenset[str] = frozenset({"_grouped_mm"})
"""Grouped GEMMs (MoE experts): shape ``(groups, rows, n, k)``, rows summed over the groups."""

RNN_OPS: frozenset[str] = frozenset({"_cudnn_rnn", "_cudnn_rnn_backward"})
"""cuDNN's recurrent layers (LSTM, GRU, RNN), all time steps and layers in one call: shape
``(seq, batch, input size, hidden size, layers, directions)``, variant the cell (``lstm``, ...)."""

MEMCPY_HTOD = "Memcpy HtoD"
MEMCPY_DTOH = "Memcpy DtoH"
"""Copies between host and GPU memory, named as the CUDA profiler names them."""


STRIDED = "strided"
"""Variant of an element-wise launch with a non-contiguous or broadcast operand: PyTorch runs
its non-vectorised kernel, about half as fast per byte (``scripts/measure/data/kernels/``)."""

GROUPED_CONV = "grouped"
"""Variant of a convolution with ``groups > 1`` (depthwise: ConvNeXt, EfficientNet): memory-bound,
no dims, costed by bytes from its own measured rows, never by a dense convolution's rate."""


class Family(str, Enum):
    """How a kernel's time is modelled: what its shape means and which table rows describe it."""

    MATMUL = "matmul"
    ATTENTION_FWD = "attention-fwd"
    ATTENTION_BWD = "attention-bwd"
    CONV = "conv"
    GROUPED_MATMUL = "grouped-matmul"
    RNN = "rnn"
    HOST_TRANSFER = "host-transfer"
    OTHER = "other"
    """Everything else: element-wise, normalisation, reductions, optimizer loops, copies."""


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """One kernel launch as the compute model sees it.

    ``dims`` depend on the family: matmul ``(batch, m, n, k)`` for ``[m, k] @ [k, n]``;
    attention ``(batch, heads, kv_heads, seq_q, seq_kv, head_dim)``; convolution
    ``(batch, in_channels, out_channels, input size, kernel, stride)``; grouped GEMM ``(groups,
    rows, n, k)``; recurrent layer ``(seq, batch, input, hidden, layers, directions)``; empty
    otherwise (such ops are costed by ``bytes``). ``variant``: a matmul's
    layout (``"nt"``: the second operand is stored transposed, as ``linear``'s weight),
    ``"causal"`` or ``"full"`` for attention, a convolution's memory layout (``nhwc``,
    ``nchw``; :data:`GROUPED_CONV` for a grouped one, which has no dims), a grouped GEMM's pass
    (``fwd``, ``dgrad``, ``wgrad``), a recurrent layer's cell (``lstm``, ``gru``, ``rnn_tanh``,
    ``rnn_relu``), :data:`STRIDED` or ``""`` for the rest.
    ``dtype``: ``bf16``, ``fp16``, ``fp32``, ``tf32`` (fp32 matmul with TF32 allowed), or
    ``""`` when unknown.
    """

    name: str
    """aten op (``aten::mm``) or a copy name (:data:`MEMCPY_HTOD`); kernel names in the trace."""
    flops: int = 0
    bytes: int = 0
    dtype: str = ""
    dims: tuple[int, ...] = ()
    variant: str = ""

    @property
    def family(self) -> Family:
        if self.name in (MEMCPY_HTOD, MEMCPY_DTOH):
            return Family.HOST_TRANSFER
        op = base_name(self.name)
        if op in MATMUL_OPS and len(self.dims) == 4:
            return Family.MATMUL
        if "dot_product" in op and "attention" in op and len(self.dims) == 6:
            return Family.ATTENTION_BWD if op.endswith("_backward") else Family.ATTENTION_FWD
        if op in CONV_OPS and len(self.dims) == 6:
            return Family.CONV
        if op in GROUPED_MATMUL_OPS and len(self.dims) == 4:
            return Family.GROUPED_MATMUL
        if op in RNN_OPS and len(self.dims) == 6:
            return Family.RNN
        return Family.OTHER


RNN_GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}
"""Weight matrices per layer and direction of each cell: its GEMMs' width in hidden sizes."""
CUDNN_MODES = {"rnn_relu": 0, "rnn_tanh": 1, "lstm": 2, "gru": 3}
"""cuDNN's ``cudnnRNNMode_t`` of each cell, as ``_cudnn_rnn`` takes it."""
RNN_CELLS = {mode: cell for cell, mode in CUDNN_MODES.items()}
"""The cell of each cuDNN mode, as a recurrent launch's variant names it."""


def rnn_flops(cell: str, dims: tuple[int, ...], tokens: int, backward: bool) -> int:
    """FLOPs of a recurrent layer's gate GEMMs over ``tokens`` (sequence x batch, or a packed
    sequence's total): per layer and direction ``2 x tokens x gates x hidden x (input +
    hidden)``, the input of layers above the first being the hidden state of every direction.
    Backward computes the input and the weight gradients: twice the forward."""
    _, _, input_size, hidden, layers, directions = dims
    width = RNN_GATES[cell] * hidden
    forward = sum(2 * tokens * width * ((input_size if layer == 0 else hidden * directions)
                                         + hidden) * directions
                  for layer in range(layers))
    return 2 * forward if backward else forward
