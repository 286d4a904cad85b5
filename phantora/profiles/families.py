"""Kernel families: one classifier for real kernels (kernel name and launching aten op) and
simulated ones (aten op only), so both sides of a comparison are sorted by the same rules.

The op decides where it is known: a real ``Memcpy DtoD`` launched by ``aten::copy_`` is an
element-wise copy, as the simulator (which names that kernel ``aten::copy_``) counts it. Only
host transfers are ``memcpy`` by their name on both sides; kernels without an op (NCCL,
Triton, CUDA graph replays, copies and fills launched outside aten) fall back on their name.
The simulator's generated kernels (``inductor::<kind>``) are ``triton``, as Inductor's real
``triton_*`` kernels are.
"""

import re

from hwmodel.compute.inductor import is_generated
from hwmodel.compute.ops import base_name, is_memory_bound
from hwmodel.compute.spec import CONV_OPS, GROUPED_MATMUL_OPS, MATMUL_OPS

FAMILIES: tuple[str, ...] = ("gemm", "attention", "conv", "norm", "elementwise", "optimizer",
                             "triton", "memcpy", "communication", "other")
"""Every family, in the order tables list them. ``elementwise`` holds every memory-bound op:
pointwise, copies, casts, reductions, softmax, losses, embeddings, random fills."""

COMPUTE_FAMILIES: tuple[str, ...] = tuple(f for f in FAMILIES if f != "communication")

GEMM_OPS: frozenset[str] = MATMUL_OPS | GROUPED_MATMUL_OPS | frozenset({
    "linear", "matmul", "_scaled_mm", "_int_mm", "addmv", "mv", "dot", "addbmm",
    "_addmm_activation", "_scaled_grouped_mm"})

HOST_TRANSFERS: tuple[str, ...] = ("Memcpy HtoD", "Memcpy DtoH", "Memcpy HtoH")
"""Copies between host and GPU memory: a ``memcpy`` on both sides whatever op launched them."""

_OPTIMIZER_PREFIXES = ("_foreach_", "_fused_adam", "_fused_sgd", "_fused_adagrad")
_BY_KERNEL_NAME: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (family, re.compile(pattern, re.IGNORECASE)) for family, pattern in (
        ("memcpy", r"^(Memcpy|Memset)"),
        ("attention", r"flash|fmha|attention"),
        ("conv", r"conv|fprop|dgrad|wgrad"),
        ("gemm", r"gemm|cutlass|cublas|xmma|matmul|splitk"),
        ("norm", r"norm"),
        ("optimizer", r"multi_tensor_apply|adam|sgd"),
        ("elementwise", r"elementwise|reduce|copy|fill|softmax|index|cat|gather|scatter|"
                        r"embedding|dropout|distribution"),
    ))
"""Kernel-name patterns (cuBLAS, cuDNN, FlashAttention, PyTorch's own kernels), in order: a
cuDNN convolution runs an ``implicit_gemm`` kernel, so conv comes before gemm."""


def kernel_family(op: str | None, kernel: str = "", collective: bool = False) -> str:
    """The family of a kernel launched by aten op ``op`` (None where unknown) and named
    ``kernel`` (the simulator names kernels by their op: pass it as both)."""
    if collective or kernel.startswith("nccl"):
        return "communication"
    if kernel.startswith(HOST_TRANSFERS) or (op or "").startswith(HOST_TRANSFERS):
        return "memcpy"
    if kernel.startswith("triton_") or (op or "").startswith("triton_") or is_generated(op or ""):
        return "triton"
    family = op_family(op) if op else "other"
    if family != "other":
        return family
    return next((name for name, pattern in _BY_KERNEL_NAME if pattern.search(kernel)), "other")


def op_family(op: str) -> str:
    """The family of an aten op (``aten::addmm``, ``fsdp::chunk_cat``): ``other`` where its
    name does not say."""
    name = base_name(op)
    if name in GEMM_OPS:
        return "gemm"
    if "attention" in name or "flash" in name:
        return "attention"
    if name in CONV_OPS or "convolution" in name or name.startswith("conv"):
        return "conv"
    if "_norm" in name and "vector_norm" not in name and not name.startswith("_foreach_"):
        return "norm"
    if name.startswith(_OPTIMIZER_PREFIXES) and name != "_foreach_copy":
        return "optimizer"
    if is_memory_bound(op):
        return "elementwise"
    return "other"
