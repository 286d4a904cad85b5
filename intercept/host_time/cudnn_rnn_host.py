"""What the host spends in one cuDNN recurrent call (``hwmodel/measured/data/cudnn_rnn_host.json``).

``_cudnn_rnn`` and ``_cudnn_rnn_backward`` return only once cuDNN has enqueued the whole
sequence: kernels, event records and stream waits for each time step of each layer and
direction (about 780 launches and 980 event calls a training step for a 2-layer LSTM of
sequence 128). That host time grows with the call's *layer-steps* (:func:`layer_steps`): a call
cost plus a cost per layer-step, per pass, fitted by ``scripts/measure/fit_rnn_host.py`` on
``scripts/measure/measure_rnn_host.py``'s records, each row put on the reference host by the
host-speed probe taken beside it. A one-layer, one-direction LSTM in half precision ran
without per-step host work on the measured H100 (its host time stayed flat from sequence 32 to
128): it counts no layer-steps.

The GPU runs the steps as they are enqueued, so the simulator enqueues such a call's kernel
before charging this host time (``intercept.runtime``): the GPU and the host overlap as they do
for real. No torch import.
"""

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from hwmodel.measured.tables import CUDNN_RNN_HOST

PASSES = ("fwd", "bwd")
HALF_DTYPES = frozenset({"fp16", "bf16"})


def enqueues_per_step(cell: str, dtype: str, layers: int, directions: int) -> bool:
    """Whether cuDNN enqueues this call's work time step by time step from the host."""
    return not (cell == "lstm" and dtype in HALF_DTYPES and layers == 1 and directions == 1)


def layer_steps(cell: str, dtype: str, seq: int, layers: int, directions: int) -> int:
    """The time steps the host enqueues one by one: ``seq x layers x directions``, or none."""
    return seq * layers * directions if enqueues_per_step(cell, dtype, layers, directions) else 0


@dataclass(frozen=True)
class CudnnRnnHostCost:
    """The fitted cost on the reference host (see the module doc)."""

    reference: str
    call_ns: dict[str, int]
    """Per pass (``fwd``, ``bwd``): the call's cost beside its layer-steps."""
    layer_step_ns: dict[str, int]
    """Per pass: the cost of each layer-step."""
    provenance: dict[str, Any]


def cost_from_json(data: dict[str, Any]) -> CudnnRnnHostCost:
    """The cost from its JSON form; names the bad key."""
    for key in ("reference", "call_ns", "layer_step_ns", "provenance"):
        if key not in data:
            raise ValueError(f"cuDNN recurrent host cost: {key!r} is missing (re-fit with "
                             "scripts/measure/fit_rnn_host.py)")
    costs = {}
    for key in ("call_ns", "layer_step_ns"):
        values = {direction: int(data[key].get(direction, -1)) for direction in PASSES}
        bad = [direction for direction, value in values.items() if value < 0]
        if bad:
            raise ValueError(f"cuDNN recurrent host cost: {key} needs a cost >= 0 ns for "
                             f"{', '.join(bad)}")
        costs[key] = values
    return CudnnRnnHostCost(str(data["reference"]), costs["call_ns"], costs["layer_step_ns"],
                            dict(data["provenance"]))


@cache
def load_cudnn_rnn_host(path: Path = CUDNN_RNN_HOST.path) -> CudnnRnnHostCost:
    """The shipped cost (cached)."""
    return cost_from_json(json.loads(path.read_text()))
