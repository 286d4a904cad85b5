"""The kernels Inductor generates for ``torch.compile``, as the compute model costs them.

Inductor fuses element-wise ops and reductions into generated Triton kernels. Which ops join one
kernel, and the bytes it reads from outside itself and writes for outside users, is planned on
the rank side from the compiled ATen graph (``intercept.dispatch.inductor_plan``: it needs
torch's FX graph and Inductor's lowering table). What such a kernel costs is decided here, without torch:
its kind follows from its iteration space (:func:`generated_kernel`), and each kind is costed by
bytes from the measured Triton rows of the kernel tables (``section`` triton of
``hwmodel/measured/data/``, read by :mod:`.table`).
"""

from hwmodel.compute.spec import KernelSpec

POINTWISE = "triton_pointwise"
"""An element-wise kernel (no reduction)."""
PERSISTENT_REDUCTION = "triton_persistent_reduction"
"""A reduction over rows no longer than the outer space: one block holds a whole row (layer
norm, softmax, a row sum)."""
REDUCTION = "triton_reduction"
"""A reduction over more elements per output than there are outputs (a column sum): looped."""
NAMESPACE = "inductor"
"""Generated kernels are named ``inductor::<kind>`` in the trace and the coverage."""
MEASURED_DTYPES = ("bf16", "fp32")
"""The dtypes the Triton rows were measured in; a kernel of another is costed as bf16."""


GENERATED_PREFIXES: dict[str, str] = {"triton_poi": POINTWISE, "triton_per": PERSISTENT_REDUCTION,
                                      "triton_red": REDUCTION}
"""How Inductor names its real kernels (``triton_poi_fused_add_0``), by the kind they are."""


def generated_name(kernel: str) -> str | None:
    """The simulated name (``inductor::<kind>``) of a real Inductor kernel named ``kernel``; None
    for any other kernel."""
    kind = GENERATED_PREFIXES.get(kernel[:10])
    return f"{NAMESPACE}::{kind}" if kind else None


def is_generated(name: str) -> bool:
    """Whether a launch named ``name`` is a generated kernel (any kind)."""
    return name.startswith(f"{NAMESPACE}::")


def is_pointwise(name: str) -> bool:
    """Whether a launch named ``name`` is a generated element-wise kernel."""
    return name == f"{NAMESPACE}::{POINTWISE}"


def generated_kernel(nbytes: int, numel: int, rnumel: int, dtype: str) -> KernelSpec:
    """One generated kernel that moves ``nbytes`` over ``numel`` outer elements, reducing
    ``rnumel`` elements into each (1: element-wise), mostly in ``dtype``."""
    if rnumel == 1:
        kind = POINTWISE
    elif rnumel <= numel:
        kind = PERSISTENT_REDUCTION
    else:
        kind = REDUCTION
    return KernelSpec(f"{NAMESPACE}::{kind}", 0, nbytes,
                      dtype if dtype in MEASURED_DTYPES else MEASURED_DTYPES[0])
