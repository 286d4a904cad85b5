"""Run an unmodified training script under ``torch.profiler`` for a few of its steps and write
one Kineto trace per rank: what ``phantora-ns3 diff`` and ``phantora-ns3 calibrate`` read.

A step is the stretch between two optimizer steps (a global optimizer post-hook advances the
profiler), so the script needs no change and its own step timer keeps running. Only training
steps ``FIRST..LAST`` (1-based, default 6..6) are recorded, with the step before them as the
profiler's warm-up; the script's other steps run unprofiled, so its logged step times stay
the real ones outside that window. Shapes are recorded (``record_shapes``): calibration maps
each kernel to the aten op and input shapes that launched it.

  # one process: writes DIR/rank0.json.gz
  python3 scripts/measure/profile_run.py --out DIR -- scenarios/examples/gpt_single.py --steps 10
  # several: each rank writes DIR/rank<r>.json.gz
  torchrun --nproc_per_node 2 scripts/measure/profile_run.py --out DIR --steps 6:7 -- \\
      scenarios/examples/gpt_ddp.py --steps 10
  # the whole run under one profiler, as docs/diff.md's snippet records it (no schedule)
  python3 scripts/measure/profile_run.py --out DIR --whole-run -- zoo_train.py --steps 4
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts.common import run_as_main  # noqa: E402


DEFAULT_STEPS = (6, 6)
"""Training steps recorded unless ``--steps`` says otherwise (1-based, first and last)."""


def parse_steps(text: str) -> tuple[int, int]:
    """``"6:7"`` -> ``(6, 7)``: the first and last training step recorded, 1-based; the first
    must be at least 2 (the step before it is the profiler's warm-up)."""
    first, _, last = text.partition(":")
    span = (int(first), int(last or first))
    if span[0] < 2 or span[1] < span[0]:
        raise argparse.ArgumentTypeError(f"--steps {text!r}: need FIRST:LAST with 2 <= FIRST <= LAST")
    return span


class OptimizerStepProfiler:
    """Advances a profiler at each step of the first optimizer that steps (a framework's
    wrapper stepping several inner optimizers per training step counts once)."""

    def __init__(self, prof: profile) -> None:
        self._prof = prof
        self._owner: int | None = None

    def __call__(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        if self._owner is None:
            self._owner = id(optimizer)
        if id(optimizer) == self._owner:
            self._prof.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for rank<r>.json.gz")
    parser.add_argument("--steps", type=parse_steps, default=DEFAULT_STEPS,
                        help="FIRST:LAST training steps to record, 1-based (default 6:6)")
    parser.add_argument("--whole-run", action="store_true",
                        help="profile the whole run, no schedule and no profiler steps")
    parser.add_argument("script", type=Path)
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    first, last = args.steps
    # profiler step i is training step i + 1 (the hook steps after each optimizer step)
    plan = schedule(wait=first - 2, warmup=1, active=last - first + 1, repeat=1)

    def write(prof: profile) -> None:
        prof.export_chrome_trace(str(args.out / f"rank{rank}.json.gz"))

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    script_args = [a for a in args.args if a != "--"]
    if args.whole_run:
        with profile(activities=activities, record_shapes=True) as prof:
            run_as_main(args.script, script_args)
        write(prof)
        return
    with profile(activities=activities, schedule=plan, on_trace_ready=write,
                 record_shapes=True) as prof:
        hook = register_optimizer_step_post_hook(
            OptimizerStepProfiler(prof))
        try:
            run_as_main(args.script, script_args)
        finally:
            hook.remove()


if __name__ == "__main__":
    main()
