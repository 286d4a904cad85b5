"""What a collective call costs the host on a group of two or more ranks, by how much host work
the rank did since its previous collective call ended.

Measured in real training steps (``scripts/measure/time_host_calls.py``: each
``torch.distributed`` collective call timed unprofiled, with its group size and start): on a
one-rank group a call is a local copy (the host-cost table's ``collectives_ns`` rows, async calls
timed in a loop on one rank: 30-40 us; a blocking one 5.5 us less); on two ranks it runs NCCL's
enqueue, and what it costs grows with the
time since the rank's previous collective, about logarithmically over three decades (on one
2xH200 host: ~32 us back to back, ~100 us after 100-200 us of other work, ~170 us after 1-2 ms,
~230 us after more than 5 ms): the code path and its data go cold while the script runs other
code. Other code, not time: a host that sat waiting on the GPU in between (a timing loop's
``synchronize()``) evicts nothing, so the gap is the rank's host work since that call (table
costs and counted Python; its waits left out), which in the training steps the model was fitted
on is about their wall time between calls. The model:

    cost(op, gap) = hot_ns[op] + slope_ns * ln(1 + min(gap, max_gap_ns) / tau_ns)

fitted by ``time_host_calls.py fit`` (robust least squares over every call on a group of two or
more ranks but barriers, which wait for the other ranks). A rank's first collective counts as
``max_gap_ns`` after the previous one. No torch import.
"""

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from hwmodel.measured.tables import COLLECTIVE_HOST

ROWS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "default")
"""The keys of ``hot_ns``: the collectives measured, and ``default`` for the others (send, recv,
reduce), the median of the measured rows."""
ROW_OF_OP = {"all_to_allv": "all_to_all"}
"""Issued ops (``wire.ops.IssuedOp`` values) that take another op's row."""


@dataclass(frozen=True)
class CollectiveCallCost:
    """The fitted model of the module doc, in the ``reference`` host's ns."""

    reference: str
    hot_ns: dict[str, int]
    slope_ns: int
    tau_ns: int
    max_gap_ns: int
    provenance: dict[str, Any] = field(default_factory=dict)

    def call_ns(self, op: str, gap_ns: int | None) -> int:
        """One call of ``op`` (an issued op's name) after ``gap_ns`` of host work since the
        rank's previous collective call ended (``None``: it is the rank's first)."""
        gap = self.max_gap_ns if gap_ns is None else min(max(gap_ns, 0), self.max_gap_ns)
        row = ROW_OF_OP.get(op, op)
        hot = self.hot_ns.get(row, self.hot_ns["default"])
        return round(hot + self.slope_ns * math.log1p(gap / self.tau_ns))

    def scaled(self, reference: str, factor: float) -> "CollectiveCallCost":
        """The model on a host ``factor`` times as slow: every duration in it, the gaps too
        (the same work between two calls takes ``factor`` times as long there)."""
        return CollectiveCallCost(reference, {k: round(v * factor) for k, v in self.hot_ns.items()},
                                  round(self.slope_ns * factor), round(self.tau_ns * factor),
                                  round(self.max_gap_ns * factor),
                                  {**self.provenance, "scaled_from": self.reference,
                                   "scale_factor": round(factor, 4)})


def cost_from_json(data: dict[str, Any]) -> CollectiveCallCost:
    """The model from its JSON form; names the bad key."""
    for key in ("reference", "hot_ns", "slope_ns", "tau_ns", "max_gap_ns"):
        if key not in data:
            raise ValueError(f"collective host cost: {key!r} is missing (re-fit with "
                             "scripts/measure/time_host_calls.py fit)")
    hot = {str(k): int(v) for k, v in data["hot_ns"].items()}
    if set(hot) != set(ROWS):
        raise ValueError(f"collective host cost: hot_ns needs exactly {', '.join(ROWS)}, "
                         f"found {', '.join(sorted(hot))}")
    slope, tau, max_gap = int(data["slope_ns"]), int(data["tau_ns"]), int(data["max_gap_ns"])
    if min(hot.values()) < 0 or slope < 0 or tau <= 0 or max_gap <= 0:
        raise ValueError(f"collective host cost: hot_ns and slope_ns ({slope}) must be >= 0, "
                         f"tau_ns ({tau}) and max_gap_ns ({max_gap}) > 0")
    return CollectiveCallCost(str(data["reference"]), hot, slope, tau, max_gap,
                              dict(data.get("provenance", {})))


@cache
def load_collective_cost(path: Path = COLLECTIVE_HOST.path) -> CollectiveCallCost:
    """The shipped model (cached)."""
    return cost_from_json(json.loads(path.read_text()))
