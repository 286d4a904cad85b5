"""Record an MoE router's tokens per expert while the script runs at full speed: the trace
``simulation.routing: trace:<file>`` replays.

``record_traffic.py --routing-trace`` records the same counts under a dispatch mode that sees
every op, which slows the host several-fold: fine for traffic, wrong for a run that is also
timed. This recorder only wraps ``torch.topk`` (to learn k) and ``torch.bincount`` (the
router's counts, kept on the device until the script ends, so it adds no synchronisation),
so the run's step times stay the real ones. Scripts that count with ``Tensor.bincount`` or
another op are not seen (use ``record_traffic.py``).

  # one process
  python3 scripts/measure/record_routing.py --out /tmp/trace.json -- scenarios/examples/moe_ep.py
  # several: each rank writes <stem>.rank<r>.json, rank 0 also <out>
  torchrun --nproc_per_node 2 scripts/measure/record_routing.py --out /tmp/trace.json -- \\
      scenarios/examples/moe_ep.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import run_as_main  # noqa: E402
from scripts.measure.record_traffic import rank_trace_path, routing_trace  # noqa: E402


class RouterCalls:
    """The counts of every ``torch.bincount`` the script makes, with the last ``torch.topk``'s
    k before each."""

    def __init__(self, top_k: int | None) -> None:
        self._fixed_top_k = top_k
        self._last_top_k: int | None = None
        self._calls: list[tuple[int | None, torch.Tensor]] = []

    def install(self) -> None:
        topk, bincount = torch.topk, torch.bincount

        def recording_topk(input: torch.Tensor, k: int, *args: Any, **kwargs: Any) -> Any:
            self._last_top_k = int(k)
            return topk(input, k, *args, **kwargs)

        def recording_bincount(*args: Any, **kwargs: Any) -> torch.Tensor:
            counts = bincount(*args, **kwargs)
            self._calls.append((self._fixed_top_k or self._last_top_k, counts.detach().clone()))
            return counts

        torch.topk, torch.bincount = recording_topk, recording_bincount

    def trace(self, rank: int) -> dict[str, Any]:
        """``record_traffic.routing_trace``'s format (it checks the calls are a router's)."""
        calls = [{"top_k": k, "counts": counts.tolist()} for k, counts in self._calls]
        return routing_trace({"rank": rank, "router_calls": calls})


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--out", type=Path, required=True, help="the routing trace (JSON)")
    parser.add_argument("--top-k", type=int,
                        help="experts per token, where the router calls no torch.topk")
    parser.add_argument("script", type=Path)
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    calls = RouterCalls(args.top_k)
    calls.install()
    run_as_main(args.script, args.args)
    trace = json.dumps(calls.trace(rank)) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        rank_trace_path(args.out, rank).write_text(trace)
    if rank == 0:
        args.out.write_text(trace)


if __name__ == "__main__":
    main()
