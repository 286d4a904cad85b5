"""Extension packages installed as CUDA builds, whose compiled library the simulator's CPU build
of torch cannot load: what their import needs, so that ``import`` works as on a GPU host.

torchvision's CUDA wheel links ``_C.so`` against ``libc10_cuda.so``, which a CPU build of torch
does not ship: the library fails to load, torchvision notes that it has no compiled ops and goes
on, except for two fake (meta) registrations that name their ops unconditionally
(``torchvision::nms`` and ``torchvision::qnms``), which then stop ``import torchvision`` and so
``import timm``. :func:`prepare_torchvision` declares those two ops' schemas when, and only
when, the library does not load. Nothing a training step runs needs them (they are detection
post-processing); a script that calls one gets PyTorch's error that the op has no kernel.
"""

import importlib.util
import sys
from pathlib import Path

import torch

TORCHVISION_OPS_IMPORT_NEEDS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
"""The schemas of the ops torchvision's ``_meta_registrations`` names whether or not its
compiled library loaded (as torchvision's C++ sources declare them)."""

_declared: list[torch.library.Library] = []
"""The fragment holding the declared schemas (a library's ops live as long as it does)."""


def prepare_torchvision() -> bool:
    """Declare the ops ``import torchvision`` needs if its compiled library cannot load in this
    torch; True if it declared them. Before the script runs: torchvision must not be imported
    yet."""
    if _declared or "torchvision" in sys.modules:
        return False
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    libraries = sorted(Path(next(iter(spec.submodule_search_locations))).glob("_C*.so"))
    if not libraries:
        return False
    try:
        torch.ops.load_library(str(libraries[0]))
        return False
    except OSError:
        pass
    fragment = torch.library.Library("torchvision", "FRAGMENT")
    for schema in TORCHVISION_OPS_IMPORT_NEEDS:
        fragment.define(schema)
    _declared.append(fragment)
    return True
