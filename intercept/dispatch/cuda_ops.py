"""Aten ops that a CUDA build runs as one kernel but a CPU build decomposes for 'cuda' tensors.

An op with both a CUDA kernel and a ``CompositeImplicitAutograd`` kernel
(``native_functions.yaml``) dispatches differently by build. The dispatcher fills the
``AutogradCUDA`` slot with the composite kernel only when the op has no kernel of its own for
``CUDA``. On a CUDA build the slot gets the op's autograd kernel: the op itself reaches the
dispatch modes, and its backward is one op too. On a CPU build the composite kernel splits it into
elementwise ops before any dispatch mode sees it: ``F.rms_norm`` recorded ``pow, mean, add_,
rsqrt, mul, mul`` and 17 backward kernels where an H100 runs ``_fused_rms_norm`` and
``_fused_rms_norm_backward``; ``silu``'s backward recorded 7 kernels instead of
``silu_backward``. (Which of ``_fused_rms_norm`` and the composite ``rms_norm`` calls is decided
in C++ alike on both builds: input and weight of different dtypes stay composite.)

Registering any kernel for the ``CUDA`` key of such an op gives its ``AutogradCUDA`` slot the
autograd kernel, as on a CUDA build. The registered kernel itself never runs: every CUDA tensor
here is a FakeTensor, whose dispatch stops at the Python key above ``CUDA``, and
``FakeTensorMode`` computes the outputs its own way (a meta kernel, or a decomposition whose
inner ops record no kernels). The recorded kernel carries the aten name, which the compute
model's tables use.
"""

from collections.abc import Callable
from typing import NoReturn

TORCH_VERSION_CHECKED = "2.13.0"
"""The CPU build whose ``native_functions.yaml`` gave :data:`FUSED_ON_CUDA`."""
CUDA_BUILD_CHECKED = "2.11.0+cu130"
"""The CUDA build (on an H100) whose dispatch the tests compare with, op by op
(``tests/intercept/data/cuda_reference.json``)."""

FUSED_ON_CUDA: tuple[str, ...] = ("_fused_rms_norm", "silu_backward", "mish_backward")
"""Every aten op with a CUDA kernel and a ``CompositeImplicitAutograd`` kernel in torch
:data:`TORCH_VERSION_CHECKED` (``silu_backward`` gets its CUDA kernel through its structured
out= variant). ``tests/intercept/test_device_cuda_ops.py`` derives the list again from the
installed torch's ``native_functions.yaml``."""


def placeholder_kernel(op: str) -> Callable[..., NoReturn]:
    """The ``CUDA`` kernel registered for ``op``: it only has to exist (module docstring)."""

    def unreachable(*args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError(f"phantora: aten::{op} reached its CUDA kernel with a real CUDA "
                           "tensor; only fake CUDA tensors exist in a simulated rank")

    unreachable.__name__ = f"{op}_cuda_placeholder"
    return unreachable
