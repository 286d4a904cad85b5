"""What a comparison sees of one GPU activity, real or simulated: its family, the bucket it is
compared in, when it ran and when the host launched it.

Buckets are the finest unit both sides can name alike: a matrix product by its aten op and
FLOPs (the simulator records FLOPs, a trace the shapes they come from), attention by direction,
any other kernel by its aten op, a collective by its op and size. A real kernel is named by
the outermost of its enclosing aten ops that the simulated run also names: the simulator sees
an op where PyTorch dispatches it (``aten::_to_copy``), a trace also the ops inside it (the
``aten::copy_`` that launched the kernel); ops that decompose before dispatch
(``aten::linear``) it never names.
"""

from collections.abc import Collection
from dataclasses import dataclass

from hwmodel.compute.inductor import generated_name
from hwmodel.compute.ops import base_name
from hwmodel.units import format_bytes
from phantora.profiles.families import kernel_family
from phantora.profiles.kineto import KernelEvent, OpCall, RankTrace

GemmKey = tuple[str, int]
"""``(aten op, FLOPs)`` of a matrix product: what identifies its shape on both sides."""
CollectiveKey = tuple[str, int | None]
"""``(op, bytes)`` of a collective, bytes in the nccl-tests convention."""


@dataclass(frozen=True)
class Activity:
    family: str
    bucket: str
    start_ns: int
    end_ns: int
    launch_ns: int | None
    """When the host launched it: which step it belongs to. None for a real kernel whose launch
    the trace lacks: the previous (unprofiled) step's work still running when recording began."""
    collective: CollectiveKey | None = None
    gemm: GemmKey | None = None
    transfer_ns: int | None = None
    """A collective's time moving data, without waiting for the other ranks; None if unknown."""

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def matmul_operands(call: OpCall) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The two multiplied operands' dims of ``mm``, ``addmm``, ``bmm``, ``baddbmm`` as
    recorded (the bias and scalars left out); None for other ops or dims not recorded."""
    name = base_name(call.name)
    operands = {"mm": call.input_dims[:2], "bmm": call.input_dims[:2],
                "addmm": call.input_dims[1:3], "baddbmm": call.input_dims[1:3]}.get(name)
    return (operands[0], operands[1]) if operands is not None and len(operands) == 2 else None


def matmul_flops(call: OpCall) -> int | None:
    """FLOPs of a matrix product from its recorded operands (:func:`matmul_operands`), as
    ``torch.utils.flop_counter`` counts them, the simulator's source: 2 per multiply-add, the
    bias not counted; None where they are not a product's."""
    operands = matmul_operands(call)
    if operands is None:
        return None
    left, right = operands
    if len(left) == 2 and len(right) == 2 and left[1] == right[0]:
        return 2 * left[0] * left[1] * right[1]
    if len(left) == 3 and len(right) == 3 and left[2] == right[1]:
        return 2 * left[0] * left[1] * left[2] * right[2]
    return None


def op_bucket(op: str) -> str:
    """The bucket of a kernel that is not a matrix product, by its op: in-place and overload
    variants together (``aten::add_.Tensor`` -> ``aten::add``), and attention by direction
    only, since which SDPA backend runs (flash, cuDNN, memory-efficient) is the GPU library's
    choice, not the script's."""
    if kernel_family(op, op) == "attention":
        return "attention backward" if "backward" in op else "attention forward"
    namespace, sep, _ = op.rpartition("::")
    return f"{namespace}{sep}{base_name(op)}"


def gemm_bucket(key: GemmKey) -> str:
    return f"{key[0]} {key[1] / 1e9:.4g} GFLOP"


def collective_bucket(key: CollectiveKey) -> str:
    return f"{key[0]} {'?' if key[1] is None else format_bytes(key[1])}"


def real_activities(trace: RankTrace, known_ops: Collection[str]) -> list[Activity]:
    """Every GPU activity of a real trace, named as the simulated run's ops ``known_ops``
    name it where it can be."""
    return [_real(kernel, known_ops) for kernel in trace.kernels]


def _real(kernel: KernelEvent, known_ops: Collection[str]) -> Activity:
    end = kernel.start_ns + kernel.duration_ns
    if kernel.collective is not None:
        key = (kernel.collective.op, kernel.collective.bytes)
        return Activity("communication", collective_bucket(key), kernel.start_ns, end,
                        kernel.launch_ns, collective=key)
    innermost = kernel.op.name if kernel.op else None
    op = next((name for name in reversed(kernel.enclosing_ops) if name in known_ops), innermost)
    family = kernel_family(op, kernel.name)
    flops = matmul_flops(kernel.op) if kernel.op and op == innermost else None
    gemm = (op, flops) if op and flops else None
    generated = generated_name(kernel.name)  # Inductor's kernels: bucketed as the simulator's
    if generated:
        bucket = generated
    elif gemm:
        bucket = gemm_bucket(gemm)
    elif op:
        bucket = op_bucket(op)
    else:
        bucket = kernel.name.split("(", 1)[0].split("<", 1)[0][:60]
    return Activity(family, bucket, kernel.start_ns, end, kernel.launch_ns, gemm=gemm)
