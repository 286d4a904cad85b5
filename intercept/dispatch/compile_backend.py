"""``torch.compile`` on fake GPUs: Inductor is swapped for the simulator's stand-in backend
(``intercept.dispatch.compiled``), other backends that need real buffers for ``aot_eager``
(listed in ``intercept.dispatch.patches.PATCHES``).
"""

import functools
import warnings
from collections.abc import Callable
from typing import Any

RUNNABLE_COMPILE_BACKENDS = frozenset({"eager", "aot_eager"})
"""``torch.compile`` backends that run on fake tensors; inductor needs real buffers and Triton."""

_compile_warned = False


def compile_with_runnable_backend(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile`` with Inductor (the default backend) runs ``intercept.dispatch.compiled``'s
    stand-in, which launches what Inductor would (fused kernels, extern kernels) without
    generating code; other backends that need real buffers run as ``aot_eager``."""

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:
        global _compile_warned
        backend = kwargs.get("backend") or "inductor"
        if backend == "inductor":
            from intercept.dispatch import compiled  # imports Inductor: only for a compile

            kwargs.update(backend=compiled.backend(kwargs.get("mode")), mode=None,
                          options=None)
        elif backend not in RUNNABLE_COMPILE_BACKENDS and isinstance(backend, str):
            if not _compile_warned:
                _compile_warned = True
                warnings.warn(f"phantora: torch.compile backend {backend!r} replaced by "
                              "'aot_eager' (fake GPUs cannot run generated kernels)",
                              RuntimeWarning, stacklevel=2)
            kwargs.update(backend="aot_eager", mode=None, options=None)
        return original(*args, **kwargs)

    return compile
