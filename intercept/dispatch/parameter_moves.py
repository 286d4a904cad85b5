"""``Module.to('cuda')`` of fake parameters as on a GPU: the parameter objects, their attributes
and weight ties survive the move (listed in ``intercept.dispatch.patches.PATCHES``).
"""

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor


def swap_tensors_forgetting_memo(original: Callable[..., None]) -> Callable[..., None]:
    """``Module.to('cuda')`` swaps fake parameters (on a GPU, real ones take the ``.data =``
    path instead); swap_tensors refuses a tensor that has weakrefs. FakeTensorConverter's memo
    holds one to every converted tensor (forgotten here), and a framework may hold
    ``weakref.finalize`` hooks on parameters (DeepSpeed names them for debugging): those are
    detached for the swap and attached again to the same objects (a swap keeps identities)."""

    @functools.wraps(original)
    def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
        for t in (t1, t2):
            if isinstance(t, FakeTensor):
                memo = t.fake_mode.fake_tensor_converter.tensor_memo
                for key in [k for k, v in list(memo.items()) if v is t]:
                    del memo[key]
        detached = []
        if weakref.getweakrefcount(t1) or weakref.getweakrefcount(t2):  # else nothing to find
            registry = weakref.finalize._registry  # type: ignore[attr-defined]
            detached = [f.detach() for f in list(registry) if _finalizes(f, t1, t2)]
        try:
            original(t1, t2)
        finally:
            for found in detached:
                if found is not None:
                    obj, func, args, kwargs = found
                    weakref.finalize(obj, func, *args, **kwargs)

    return swap_tensors


def module_apply_keeping_parameters(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Module.to('cuda')``, ``.bfloat16()``: on a GPU, ``_apply`` converts each parameter in
    place (``param.data = ...``), so the object, its attributes and weight ties survive. A fake
    parameter, or a real one turning fake, cannot take that path: ``_apply`` swaps the fake one
    with a new ``Parameter`` (``__dict__`` included) or puts a new object in the real one's place.
    Frameworks would lose what they set on their parameters (Megatron's
    ``tensor_model_parallel``, ``sequence_parallel``, ``shared``: its grad norm and gradient
    all-reduces depend on them). The outermost call puts each parameter's attributes back on
    the object that holds it afterwards (the converted tensor's own keep theirs), and a
    parameter two modules share stays one object."""
    state = threading.local()

    @functools.wraps(original)
    def _apply(self: torch.nn.Module, fn: Callable[..., Any], recurse: bool = True) -> Any:
        if getattr(state, "active", False):
            return original(self, fn, recurse)
        members = [(module, key, param, dict(vars(param)))
                   for module in (self.modules() if recurse else (self,))
                   for key, param in module._parameters.items() if param is not None]
        state.active = True
        try:
            result = original(self, fn, recurse)
        finally:
            state.active = False
        moved: dict[int, torch.Tensor] = {}
        for module, key, old, attributes in members:
            now = module._parameters.get(key)
            if now is None:
                continue
            first = moved.setdefault(id(old), now)
            if first is not now:
                module._parameters[key] = first
            for name, value in attributes.items():
                vars(first).setdefault(name, value)
        return result

    return _apply


def _finalizes(finalizer: weakref.finalize, *objects: object) -> bool:
    """Whether ``finalizer`` is alive and watches one of ``objects`` (by identity)."""
    watched = finalizer.peek()
    return watched is not None and any(watched[0] is obj for obj in objects)
