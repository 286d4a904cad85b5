"""CUDA extensions a script JIT-builds: known ones get a stand-in, any other stops the run.

Frameworks build some of their CUDA kernels at first use through
``torch.utils.cpp_extension.load`` (DeepSpeed's default Adam optimizer, ``FusedAdam``, calls
``FusedAdamBuilder().load()``, whose ``OpBuilder.jit_load`` first asks
``installed_cuda_version()`` for ``$CUDA_HOME/bin/nvcc -V``, then calls ``load``). A simulated
rank has no CUDA toolkit and its tensors hold no data, so ``intercept.dispatch.patches`` changes
three things of ``torch.utils.cpp_extension``:

* ``CUDA_HOME`` (``None`` in a CPU build of torch) names a stand-in toolkit, a folder whose
  ``bin/nvcc`` reports CUDA :data:`NVCC_RELEASE` to ``-V``/``--version`` and refuses to compile
  anything else, naming the simulator;
* ``load`` and ``load_inline`` return, for an extension named in :data:`STAND_INS`, a module of
  Python functions that run the equivalent torch ops on the fake tensors, so the compute model
  costs them as the kernels the GPU runs (never zero time). Nothing is compiled: the load costs
  its Python only, as a build already cached in ``~/.cache/torch_extensions`` does. Any other
  extension stops the run with a :class:`~hwmodel.errors.SimulationError` naming it and the
  framework's PyTorch path to use instead.

Stand-ins (matched by the extension's ``name``):

* ``fused_adam``: DeepSpeed's ``csrc/adam`` (apex's multi-tensor Adam), used by
  ``deepspeed.ops.adam.FusedAdam``. ``multi_tensor_adam`` runs one ``torch._fused_adamw_``
  (``mode`` 1, decoupled weight decay) or ``torch._fused_adam_`` (``mode`` 0, L2) over the
  lists: PyTorch's fused Adam is the same single-pass multi-tensor kernel (reads gradient,
  parameter and both moments, writes the last three), measured in the kernel tables.
"""

import math
import os
import types
from collections.abc import Callable
from typing import Any

import torch

from hwmodel.errors import SimulationError
from intercept.process import shim
from intercept.values import plausible

NVCC_RELEASE = "12.8"
"""The CUDA release the stand-in nvcc reports, a CUDA 12 as on H100/H200 hosts; DeepSpeed only
picks its C++ standard flag by it (C++20 from 12.5 on), for a build that never runs."""
_NVCC = f"""#!/bin/sh
# phantora-ns3's stand-in for nvcc on a simulated GPU host: it reports a version only.
case "$1" in
  -V|--version)
    echo "nvcc: NVIDIA (R) Cuda compiler driver"
    echo "Cuda compilation tools, release {NVCC_RELEASE}, V{NVCC_RELEASE}.0"
    exit 0;;
esac
echo "phantora-ns3: a simulated rank compiles no CUDA code (nvcc $*); CUDA extensions are" \\
     "served by stand-ins (intercept/dispatch/cpp_extensions.py)" >&2
exit 1
"""


def stand_in_toolkit(original: str | None) -> str:
    """Write the stand-in toolkit (once per content, atomically: ranks of several runs may race)
    and return its folder, the new ``CUDA_HOME``; a CPU build's ``original`` is None."""
    home = shim.cache_root() / "cuda-toolkit-stand-in"
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file() or nvcc.read_text() != _NVCC:
        nvcc.parent.mkdir(parents=True, exist_ok=True)
        partial = nvcc.with_name(f"nvcc.{os.getpid()}")
        partial.write_text(_NVCC)
        partial.chmod(0o755)
        partial.replace(nvcc)
    return str(home)


def multi_tensor_adam(chunk_size: int, noop_flag: torch.Tensor,
                      tensor_lists: list[list[torch.Tensor]], lr: float, beta1: float,
                      beta2: float, epsilon: float, step: int, mode: int, bias_correction: int,
                      weight_decay: float) -> None:
    """DeepSpeed's ``fused_adam.multi_tensor_adam`` (lists: gradients, parameters, first and
    second moments; ``mode`` 1: AdamW, 0: Adam with L2). ``chunk_size`` and ``noop_flag`` only
    steer the CUDA launch; PyTorch's fused kernel takes each step count as a device tensor
    (one fill kernel for all, as torch's own fused path adds one kernel for its counters);
    ``bias_correction`` 0 is an infinite step (``1 - beta**step`` = 1)."""
    grads, params, exp_avgs, exp_avg_sqs = tensor_lists
    steps = torch.full((len(params),), float(step) if bias_correction else math.inf,
                       dtype=torch.float32, device=params[0].device).unbind()
    fused = torch._fused_adamw_ if mode == 1 else torch._fused_adam_
    fused(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=lr, beta1=beta1, beta2=beta2,
          weight_decay=weight_decay, eps=epsilon, amsgrad=False, maximize=False)


def _module(name: str, **functions: Callable[..., Any]) -> types.ModuleType:
    module = types.ModuleType(name, f"phantora-ns3's stand-in for the CUDA extension {name!r}")
    for function_name, function in functions.items():
        setattr(module, function_name, function)
    return module


STAND_INS: dict[str, Callable[[], types.ModuleType]] = {
    "fused_adam": lambda: _module("fused_adam", multi_tensor_adam=multi_tensor_adam),
}
"""Extension name -> its stand-in module (see the module docstring)."""


def load(name: str, *args: Any, **kwargs: Any) -> types.ModuleType:
    """``torch.utils.cpp_extension.load``: the stand-in of extension ``name``, else stop."""
    return _stand_in(name, "load")


def load_inline(name: str, *args: Any, **kwargs: Any) -> types.ModuleType:
    """``torch.utils.cpp_extension.load_inline``: as :func:`load`."""
    return _stand_in(name, "load_inline")


def _stand_in(name: str, function: str) -> types.ModuleType:
    make = STAND_INS.get(name)
    if make is None:
        raise SimulationError(
            f"torch.utils.cpp_extension.{function}(name={name!r}){plausible.script_line()}: "
            f"phantora-ns3 cannot build CUDA extension {name!r} (a simulated rank runs no "
            f"CUDA code) and has no stand-in for it (it has: {', '.join(sorted(STAND_INS))}). "
            f"Use the framework's PyTorch implementation instead (DeepSpeed: "
            f"\"torch_adam\": true in the optimizer's params, or pass a torch.optim "
            f"optimizer to deepspeed.initialize), or add a stand-in to "
            f"intercept/dispatch/cpp_extensions.py")
    return make()
