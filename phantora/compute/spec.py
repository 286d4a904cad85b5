"""What the compute model knows about one kernel launch: plain numbers, no tensors.

The rank side (``intercept.op_costs``) fills a :class:`KernelSpec` from the op's arguments; the
compute model (:class:`phantora.compute.model.ComputeModel`) turns it into a duration. Keeping
it to hashable numbers lets the model cache durations per distinct launch, and keeps
``phantora.compute`` free of PyTorch.
"""

from dataclasses import dataclass
from enum import Enum

from phantora.compute.ops import base_name

MATMUL_OPS: frozenset[str] = frozenset({"mm", "addmm", "bmm", "baddbmm"})
"""Matrix products whose shape is ``(batch, m, n, k)`` (batch 1 for 2-D products)."""

MEMCPY_HTOD = "Memcpy HtoD"
MEMCPY_DTOH = "Memcpy DtoH"
"""Copies between host and GPU memory, named as the CUDA profiler names them."""


STRIDED = "strided"
"""Variant of an element-wise launch with a non-contiguous or broadcast operand: PyTorch runs
its non-vectorised kernel, about half as fast per byte (``scripts/data/kernels/``)."""


class Family(str, Enum):
    """How a kernel's time is modelled: what its shape means and which table rows describe it."""

    MATMUL = "matmul"
    ATTENTION_FWD = "attention-fwd"
    ATTENTION_BWD = "attention-bwd"
    HOST_TRANSFER = "host-transfer"
    OTHER = "other"
    """Everything else: element-wise, normalisation, reductions, optimizer loops, copies."""


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """One kernel launch as the compute model sees it.

    ``dims`` depend on the family: matmul ``(batch, m, n, k)`` for ``[m, k] @ [k, n]``;
    attention ``(batch, heads, kv_heads, seq_q, seq_kv, head_dim)``; empty otherwise (such ops
    are costed by ``bytes``). ``variant``: a matmul's layout (``"nt"``: the second operand is
    stored transposed, as ``linear``'s weight), ``"causal"`` or ``"full"`` for attention,
    :data:`STRIDED` or ``""`` for the rest.
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
        return Family.OTHER
