"""Ops run in turn, as a training step runs them, against each op repeated in a loop (how the
host-cost table measured them): one script that runs on a GPU machine and under the simulator
alike (every clock read there is virtual time).

  python3 scripts/measure/op_mix.py --json OUT.json    # on a GPU machine
  phantora-ns3 SCENARIO   # a one-GPU scenario whose script is this one, args: --json OUT.json

Rows (us, the median of ``ROUNDS`` rounds):

* ``loop <case>``, ``loops mean``: each of the ``aten`` section's no-grad cases of
  ``measure_host_costs.py`` in a loop, and their mean;
* ``in turn``: those ops one after another, per op; ``module path``: an ``nn.Sequential`` of
  ``MIX_PYTHON_DEPTH`` ``nn.Identity`` (module calls, no op); ``in turn with the module path``:
  the ops in turn with that call before each, per op;
* ``training forward`` / ``training backward``: a chain of ``TRAINING_DEPTH`` blocks of
  varied ops on small tensors that require grad (the GPU keeps up with the host), per op
  recorded for backward; its backward per autograd node (``nodes``: how many the graph has).

``measure_host_costs.py --sections aten mix`` times the no-grad rows with the GPU held busy;
the records of both are in ``scripts/measure/data/host_costs/`` (README there).
"""

import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts.measure.compiled_chains import probe_main, time_call  # noqa: E402
from scripts.measure.measure_host_costs import mix_calls  # noqa: E402

ROUNDS = 5
CALLS = 50
TRAINING_DEPTH = 8
WIDTH = 256


def training_block(y: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Seven ops of a transformer block's kinds, each recorded for backward."""
    y = F.linear(y, w, b)
    y = F.gelu(y)
    y = F.layer_norm(y, (WIDTH,))
    y = y * 0.5
    y = torch.softmax(y, -1)
    y = y.float()
    return y.bfloat16() + 1.0


def graph_nodes(root: torch.Tensor) -> int:
    """The autograd nodes behind ``root`` (each once)."""
    seen, todo = set(), [root.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(next_fn for next_fn, _ in node.next_functions)
    return len(seen)


def training_rows(dev: torch.device) -> list[dict[str, object]]:
    """The chain's forward per op and its backward per node (see the module doc)."""
    x = torch.randn(WIDTH, WIDTH, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(WIDTH, WIDTH, device=dev, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(WIDTH, device=dev, dtype=torch.bfloat16, requires_grad=True)
    ops = 7 * TRAINING_DEPTH

    def forward() -> torch.Tensor:
        y = x
        for _ in range(TRAINING_DEPTH):
            y = training_block(y, w, b)
        return y.sum()

    nodes = graph_nodes(forward())
    forward_us = time_call(forward, CALLS // 10, rounds=ROUNDS)
    both_us = time_call(lambda: forward().backward(), CALLS // 10, rounds=ROUNDS)
    return [{"case": "training forward", "us": round(forward_us / ops, 3), "ops": ops},
            {"case": "training backward", "us": round((both_us - forward_us) / nodes, 3),
             "nodes": nodes}]


def rows() -> list[dict[str, object]]:
    dev = torch.device("cuda", 0)
    mix = mix_calls(dev)
    out: list[dict[str, object]] = []
    with torch.no_grad():
        loops = {name: time_call(op, CALLS, rounds=ROUNDS) for name, op in mix.ops.items()}
        out += [{"case": f"loop {name}", "us": round(us, 3)} for name, us in loops.items()]
        out.append({"case": "loops mean", "us": round(statistics.mean(loops.values()), 3)})
        out.append({"case": "in turn",
                    "us": round(time_call(mix.in_turn, CALLS // 10, rounds=ROUNDS)
                                / len(mix.ops), 3)})
        out.append({"case": "module path",
                    "us": round(time_call(mix.module_path, CALLS, rounds=ROUNDS), 3)})
        out.append({"case": "in turn with the module path",
                    "us": round(time_call(mix.in_turn_with_module_path, CALLS // 10,
                                          rounds=ROUNDS) / len(mix.ops), 3)})
    return out + training_rows(dev)


def main() -> None:
    probe_main(__doc__, rows, rounds=ROUNDS)


if __name__ == "__main__":
    main()
