"""Dispatch modes beside the simulator's fake mode: DTensor's shape propagation runs shapes only,
and a script's own dispatch mode counts as the script's time (listed in
``intercept.dispatch.patches.PATCHES``).
"""

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from torch._subclasses.fake_tensor import FakeTensorMode

from intercept.dispatch import fake_mode
from intercept.process import shim


def sharding_propagation_shapes_only(original: Callable[..., Any]) -> Callable[..., Any]:
    """DTensor derives an op's global output shape by running it on global-shape fake tensors
    in the active fake mode (a private one on a GPU host): here that is SimFakeMode, which
    must not give those tensors device memory or launch their kernels."""

    @functools.wraps(original)
    def propagate(self: Any, op_schema: Any) -> Any:
        mode = fake_mode.active()
        with mode.shapes_only() if mode is not None else contextlib.nullcontext():
            return original(self, op_schema)

    return propagate


def push_mode_counting_its_dispatch(original: Callable[..., Any]) -> Callable[..., Any]:
    """A script's own dispatch mode runs on a real host too (selective activation
    checkpointing caches or replays every op through one). torch calls its
    ``__torch_dispatch__`` from inside the call into Python that the shim excludes for the
    fake mode, so the mode's class gets a dispatch that first hands the rest of that call to
    the script's time; the op it forwards comes back to the fake mode excluded again.
    Fake tensor modes (the simulator's own, DTensor's shape propagation) keep their own
    accounting. Patched on the class, not the instance: a bound method kept on the mode would
    be a reference cycle, keeping a checkpoint's cached activations alive until a collection."""

    @functools.wraps(original)
    def push_mode(mode: Any, *args: Any, **kwargs: Any) -> Any:
        mode_class = type(mode)
        dispatch = mode_class.__torch_dispatch__
        if not isinstance(mode, FakeTensorMode) and not getattr(dispatch, _COUNTED, False):
            mode_class.__torch_dispatch__ = _counting_dispatch(dispatch)
        return original(mode, *args, **kwargs)

    return push_mode


_COUNTED = "_phantora_counts_as_script"


def _counting_dispatch(dispatch: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(dispatch)
    def counted_dispatch(*args: Any, **kwargs: Any) -> Any:
        shim.count_rest_of_dispatch()
        return dispatch(*args, **kwargs)

    setattr(counted_dispatch, _COUNTED, True)
    return counted_dispatch
