"""What the host reads of a fake tensor whose values the simulator does not know.

A fake float reads :data:`FLOAT_VALUE` (1.0: a loss or grad norm that never divides by zero);
an integer :data:`INT_VALUE` (1), with a warning naming the script line; a bool
:data:`BOOL_VALUE`. Valued tensors (``intercept.values.store``) read their real values instead.
"""

import os
import traceback
import warnings
from typing import Any

import torch

import launch

FLOAT_VALUE = 1.0
INT_VALUE = 1
BOOL_VALUE = False


def plausible_value(dtype: torch.dtype) -> float | int | bool:
    """The value a fake scalar of ``dtype`` reads as on the host."""
    if dtype == torch.bool:
        return BOOL_VALUE
    if dtype.is_floating_point or dtype.is_complex:
        return FLOAT_VALUE
    return INT_VALUE


def script_line() -> str:
    """`` at FILE:LINE`` of the innermost frame of the user's script (not torch's or ours)."""
    frame = _script_frame()
    return "" if frame is None else f" at {frame.filename}:{frame.lineno}"


_OURS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)),
         os.path.dirname(launch.__file__))
"""Where torch's frames and the simulator's (``intercept``, ``launch``) come from."""


def _script_frame() -> Any:
    ours = _OURS
    for frame in reversed(traceback.extract_stack()):
        if not frame.filename.startswith(ours) and not frame.filename.startswith("<"):
            return frame
    return None


def warn_unknown(t: torch.Tensor) -> None:
    """An integer or bool read the simulator cannot know: say so once per script line."""
    frame = _script_frame()
    value = plausible_value(t.dtype)
    message = (f"phantora: reading a {t.dtype} tensor whose values the simulator does not know "
               f"(computed from fake floating-point data); it reads {value}")
    if frame is None:
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    else:
        warnings.warn_explicit(message, RuntimeWarning, frame.filename, frame.lineno or 0)


def stand_in(t: torch.Tensor) -> torch.Tensor:
    """A real CPU tensor shaped like ``t`` holding its plausible value (no memory per element)."""
    with torch.utils._python_dispatch._disable_current_modes():
        return torch.full((), plausible_value(t.dtype), dtype=t.dtype).expand(t.shape)

