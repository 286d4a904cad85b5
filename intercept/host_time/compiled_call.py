"""What ``torch.compile``d graphs cost the host beyond the eager tables and the Python the
counter sees (``hwmodel/measured/data/compiled_call.json``).

A generated (Triton) kernel's launch from Inductor's wrapper (``generated_launch_ns``, in place
of an eager op's, for a kernel that reads one buffer and writes one) costs the same in a forward
graph and a backward one (the rows of ``scripts/measure/compiled_chains.py`` have one slope per
kernel); each further buffer it reads costs ``generated_read_ns`` (an argument to pack), each
further one it writes ``generated_write_ns`` (an argument, and the wrapper's allocation of it).
A compiled training graph runs its backward as one AOTAutograd node, and a backward costs the
real host more than the simulator charges for its counted Python and its launches, whatever the
graphs' length: per backward node
(``backward_call_ns``, in place of a forward call's assumed cost) and once per backward run that
reaches one (``backward_run_ns``: K compiled nodes in one run cost one run cost and K node
costs). ``scripts/measure/fit_compiled_host.py`` fits the five on the probe (the real rows of
``scripts/measure/measure_host_costs.py --sections compiled`` against the same rows simulated),
on the reference host; other reference hosts scale them as the host-cost table does
(``intercept.host_time.host_cost``, whose ``layers_ns`` carries them as
``compiled_generated_launch``, ``compiled_generated_read``, ``compiled_generated_write``,
``compiled_backward_call`` and ``compiled_backward_run``). A
forward graph's call keeps ``intercept.dispatch.compiled``'s assumed cost (the counted Python of
its call path already exceeds the real one). No torch import.
"""

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from hwmodel.measured.tables import COMPILED_CALL


@dataclass(frozen=True)
class CompiledCallCost:
    """The fitted cost (see the module doc)."""

    reference: str
    generated_launch_ns: int
    generated_read_ns: int
    generated_write_ns: int
    backward_call_ns: int
    backward_run_ns: int
    provenance: dict[str, Any]


def cost_from_json(data: dict[str, Any]) -> CompiledCallCost:
    """The cost from its JSON form; names the bad key."""
    keys = ("generated_launch_ns", "generated_read_ns", "generated_write_ns",
            "backward_call_ns", "backward_run_ns")
    for key in ("reference", *keys, "provenance"):
        if key not in data:
            raise ValueError(f"compiled call cost: {key!r} is missing (re-fit with "
                             "scripts/measure/fit_compiled_host.py)")
    costs = [int(data[key]) for key in keys]
    for key, cost in zip(keys, costs, strict=True):
        if cost < 0:
            raise ValueError(f"compiled call cost: {key} is {cost}; a cost is >= 0 ns")
    return CompiledCallCost(str(data["reference"]), *costs, dict(data["provenance"]))


@cache
def load_compiled_call(path: Path = COMPILED_CALL.path) -> CompiledCallCost:
    """The shipped cost (cached)."""
    return cost_from_json(json.loads(path.read_text()))
