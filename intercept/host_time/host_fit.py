"""Host-time constants fitted on real training steps rather than measured on microbenchmarks.

Two costs a microbenchmark gets wrong, so ``scripts/measure/fit_host_time.py`` fits them on
real steps of the example scripts at a configuration that is not in the accuracy harness
(``scripts/measure/data/host_fit/``), and the harness validates them:

* ``python_cold_factor``: what a line of Python costs inside a training step against the same
  line run hot in a loop (``scripts/measure/measure_python_work.py``). Fitted on whole steps, it
  carries whatever the real host spends there beyond the counted lines and the table's ops; a
  kernel launch alone does not make the Python after it cost more than hot
  (``docs/models/host.md``, Known limits). Multiplies the weights of
  ``intercept.host_time.python_work``.
* ``tensor_subclass_ns``: DTensor's dispatch of one op beyond the op on its local tensors
  (unwrapping, sharding propagation, wrapping), which the ``dtensor`` rows of the host-cost
  table (one-device mesh, one op repeated) put at ~19 us.
* ``autograd_node_ns``: the autograd engine's work per backward node beyond its ops, which the
  ``backward`` rows (a chain of ``mul``, 28 us per node with its op, less a Python-issued
  elementwise op) put at ~18 us.

Both for the ``reference`` host; other reference hosts scale them as their tables do.
No torch import.
"""

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from hwmodel.measured.tables import HOST_FIT


@dataclass(frozen=True)
class HostFit:
    """The fitted constants (see the module doc)."""

    reference: str
    python_cold_factor: float
    tensor_subclass_ns: int
    autograd_node_ns: int
    provenance: dict[str, Any]


def fit_from_json(data: dict[str, Any]) -> HostFit:
    """The constants from their JSON form; names the bad key."""
    for key in ("reference", "python_cold_factor", "tensor_subclass_ns", "autograd_node_ns",
                "provenance"):
        if key not in data:
            raise ValueError(f"host fit: {key!r} is missing (re-fit with "
                             "scripts/measure/fit_host_time.py)")
    factor, subclass = float(data["python_cold_factor"]), int(data["tensor_subclass_ns"])
    node = int(data["autograd_node_ns"])
    if factor <= 0 or subclass < 0 or node < 0:
        raise ValueError(f"host fit: python_cold_factor {factor} must be > 0, "
                         f"tensor_subclass_ns {subclass} and autograd_node_ns {node} >= 0")
    return HostFit(str(data["reference"]), factor, subclass, node, dict(data["provenance"]))


@cache
def load_fit(path: Path = HOST_FIT.path) -> HostFit:
    """The shipped constants (cached)."""
    return fit_from_json(json.loads(path.read_text()))
