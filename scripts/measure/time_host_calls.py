"""Time each collective call's host side in an unmodified training script, unprofiled.

The host model charges every ``torch.distributed`` collective a table cost
(``host_costs.json`` ``collectives_ns``, measured on a one-rank group in a loop). This runner
measures what the call costs the calling thread inside a real training step: it wraps the
public collective functions of ``torch.distributed`` (the list the simulator treats as one
table cost, ``COLLECTIVE_FUNCTIONS`` of ``intercept.host_time.c10d_host``, which loads
no simulator state) with ``perf_counter``
and records each call's duration and the training step it fell in (a global optimizer post-hook
counts steps, as ``profile_run.py`` does). No synchronisation is added: an asynchronous
collective's time is its enqueue; a synchronous one's is what the caller waits. Collectives a
framework issues from C++ (DDP's reducer) or through functional collectives (DTensor) do not
pass through these functions and are not timed.

Each rank writes ``<out>/rank<r>.json``: per operation and group size (``all_reduce/2``), the
call durations (us) of training steps ``--from`` onwards, and the number of calls per step;
``timeline_us``: each call's start (us after the first timed call), duration and key, in order
(how long since the previous collective a call came, for how cold its code path ran).

  torchrun --nproc_per_node 4 scripts/measure/time_host_calls.py --out DIR -- \\
      scenarios/examples/megatron_gpt.py --tp 4 ...
  python3 scripts/measure/time_host_calls.py summarize ROOT   # a table of ROOT/<run>/rank*.json
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
from torch.optim.optimizer import register_optimizer_step_post_hook

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from intercept.host_time.c10d_host import COLLECTIVE_FUNCTIONS  # noqa: E402
from scripts.common import run_as_main  # noqa: E402

FIRST_STEP = 3
"""Steps 1-2 are warm-up (NCCL communicators, allocator)."""


def group_size(signature: inspect.Signature, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> int:
    """The size of the group a collective call runs on (its ``group`` argument, else the
    default group): a one-rank group's collective is a local copy, far cheaper on the host."""
    try:
        group = signature.bind_partial(*args, **kwargs).arguments.get("group")
    except TypeError:
        group = None
    return dist.get_world_size(group)


class CallTimer:
    """Per operation, the duration of each call made from training step ``first`` on."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.step = 1
        self._owner: int | None = None
        self.durations_us: dict[str, list[float]] = defaultdict(list)
        """Per ``<operation>/<group size>``."""
        self.timeline: list[tuple[float, float, str]] = []
        """Every timed call in order: its ``perf_counter`` start and end and its key."""

    def on_optimizer_step(self, optimizer: torch.optim.Optimizer, args: object,
                          kwargs: object) -> None:
        """A training step ends at the first optimizer's step (a framework stepping several
        inner optimizers counts once)."""
        if self._owner is None:
            self._owner = id(optimizer)
        if id(optimizer) == self._owner:
            self.step += 1

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                end = time.perf_counter()
                if self.step >= self.first:
                    key = f"{name}/{group_size(signature, args, kwargs)}"
                    self.durations_us[key].append((end - start) * 1e6)
                    self.timeline.append((start, end, key))

        return timed

    def install(self) -> None:
        """Replace the collective functions on ``torch.distributed`` and ``distributed_c10d``
        (modules that bound them by name before this ran keep the originals)."""
        for name in COLLECTIVE_FUNCTIONS:
            original = getattr(c10d, name, None)
            if original is None:
                continue
            timed = self.wrap(name, original)
            for owner in (c10d, dist):
                if getattr(owner, name, None) is original:
                    setattr(owner, name, timed)

    def record(self) -> dict[str, Any]:
        steps = max(self.step - self.first, 1)
        origin = self.timeline[0][0] if self.timeline else 0.0
        return {"first_step": self.first, "last_step": self.step - 1,
                "ops": {name: {"calls_per_step": len(values) / steps,
                               "durations_us": [round(v, 2) for v in values]}
                        for name, values in sorted(self.durations_us.items())},
                "timeline_us": [[round((start - origin) * 1e6, 1), round((end - start) * 1e6, 2),
                                 key] for start, end, key in self.timeline]}


def summarize(root: Path) -> str:
    """One line per run folder under ``root`` (``<machine>_<run>/rank<r>.json``) and operation:
    calls per step (rank mean) and the call time's median, mean and 90th percentile over all
    ranks' calls (us)."""
    lines = [f"{'run':<44} {'op':<24} {'calls/step':>10} {'median us':>10} {'mean us':>9} "
             f"{'p90 us':>8} {'ms/step':>8}"]
    for run in sorted(p for p in root.iterdir() if p.is_dir()):
        ranks = [json.loads(path.read_text()) for path in sorted(run.glob("rank*.json"))]
        for op in sorted({op for record in ranks for op in record["ops"]}):
            rows = [record["ops"][op] for record in ranks if op in record["ops"]]
            values = sorted(v for row in rows for v in row["durations_us"])
            per_step = statistics.mean(row["calls_per_step"] for row in rows)
            mean = statistics.mean(values)
            lines.append(f"{run.name:<44} {op:<24} {per_step:>10.1f} "
                         f"{statistics.median(values):>10.1f} {mean:>9.1f} "
                         f"{values[int(0.9 * (len(values) - 1))]:>8.1f} "
                         f"{per_step * mean / 1e3:>8.2f}")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["summarize"]:
        print(summarize(Path(sys.argv[2])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for rank<r>.json")
    parser.add_argument("--from", dest="first", type=int, default=FIRST_STEP,
                        help=f"first training step timed, 1-based (default {FIRST_STEP})")
    parser.add_argument("script", type=Path)
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    timer = CallTimer(args.first)
    timer.install()
    hook = register_optimizer_step_post_hook(timer.on_optimizer_step)
    try:
        run_as_main(args.script, [a for a in args.args if a != "--"])
    finally:
        hook.remove()
        rank = int(os.environ.get("RANK", "0"))
        (args.out / f"rank{rank}.json").write_text(json.dumps(timer.record()))


if __name__ == "__main__":
    main()
