"""What the autograd engine's backward costs the host per node, by the kind of node: chains of
``DEPTH`` views (``t()``), casts (to bf16 and back), scalings, or products with one weight
(``F.linear``, which adds a transpose and the weight's gradient accumulation), on 256 x 256
tensors, so the GPU keeps up with the host. One script that runs on a GPU machine and under the
simulator alike (every clock read there is virtual time).

  python3 scripts/measure/node_chains.py --json OUT.json    # on a GPU machine
  phantora-ns3 SCENARIO   # a one-GPU scenario whose script is this one, args: --json OUT.json

Rows (us, the median of ``ROUNDS`` rounds): ``forward <kind>`` per op with grad recording,
``no-grad <kind>`` per op without, ``backward <kind>`` per node the chain's backward runs
(``nodes``: how many; a view's node costs the engine's own work and the view, a cast's or a
scaling's that and one kernel). The real rows against the simulated ones say whether the simulator's charge
per backward node (``autograd_node`` in ``docs/models/host.md``) holds for each kind.
"""

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts.measure.compiled_chains import probe_main  # noqa: E402

DEPTH = 64
ROUNDS = 7
WARMUPS = 2
WIDTH = 256


def steps(weight: torch.Tensor) -> dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], int]]:
    """Each kind's one link of the chain, and the backward nodes it adds."""
    return {
        "view": (lambda y: y.t(), 1),
        "cast": (lambda y: y.to(torch.bfloat16).to(torch.float32), 2),
        "mul": (lambda y: y * 1.5, 1),
        "linear": (lambda y: F.linear(y, weight), 1),
    }


def chain(link: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    y = x
    for _ in range(DEPTH):
        y = link(y)
    return y


def median_us(timings: list[float], per: int) -> float:
    return round(statistics.median(timings[WARMUPS:]) * 1e6 / per, 3)


def kind_rows(kind: str, link: Callable[[torch.Tensor], torch.Tensor], nodes_per_link: int,
              x: torch.Tensor, weight: torch.Tensor) -> list[dict[str, object]]:
    """The three rows of one kind."""
    forward, backward, no_grad = [], [], []
    for _ in range(WARMUPS + ROUNDS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        y = chain(link, x)
        forward.append(time.perf_counter() - start)
        total = y.sum()
        start = time.perf_counter()
        total.backward()
        backward.append(time.perf_counter() - start)
        torch.cuda.synchronize()
        x.grad = weight.grad = None
    with torch.no_grad():
        for _ in range(WARMUPS + ROUNDS):
            torch.cuda.synchronize()
            start = time.perf_counter()
            chain(link, x)
            no_grad.append(time.perf_counter() - start)
    ops = DEPTH * nodes_per_link
    return [{"case": f"forward {kind}", "us": median_us(forward, ops)},
            {"case": f"no-grad {kind}", "us": median_us(no_grad, ops)},
            {"case": f"backward {kind}", "us": median_us(backward, ops), "nodes": ops}]


def rows() -> list[dict[str, object]]:
    dev = torch.device("cuda", 0)
    x = torch.randn(WIDTH, WIDTH, device=dev, requires_grad=True)
    weight = torch.randn(WIDTH, WIDTH, device=dev, requires_grad=True)
    found: list[dict[str, object]] = []
    for kind, (link, nodes) in steps(weight).items():
        found += kind_rows(kind, link, nodes, x, weight)
    return found


if __name__ == "__main__":
    probe_main(__doc__, rows, depth=DEPTH, rounds=ROUNDS, width=WIDTH)
