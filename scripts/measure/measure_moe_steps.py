"""Measure the mixture-of-experts example's real step times on one GPU, for the accuracy harness.

The runs of issue 13: ``moe_ep.py`` in one process (no expert exchange) at a realistic size
(``moe-600m``: 8 experts, top-2, d_model 1024, 4 x 2048 = 8,192 tokens a step, bf16
autocast), once with the learned router and once with balanced (round-robin) routing, and the
CI scenario ``h100x1-moe-single``. They run and log exactly as ``measure_steps.py`` runs its
suites (same runner, same ``=== RUN``/``=== EXIT`` log blocks, ``<machine>_moe_ep.log``), so
``validate_accuracy.py`` turns them into cases once the logs are under
``scripts/data/steps/<machine>/``. The learned-routing runs run under ``record_routing.py``,
which writes their router's tokens per expert per call, every step, to
``<machine>_<run>.routing.json`` beside the log: the trace that the harness replays
(``simulation.routing: trace:<file>``) when it simulates that run.

  # on the GPU machine
  python3 scripts/measure/measure_moe_steps.py --out "$OUT" --budget-s 300
  # anywhere: what it would run
  python3 scripts/measure/measure_moe_steps.py --out /tmp/m --machine h100x1 --dry-run
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.measure import measure_steps  # noqa: E402

MOE_600M = ("--model", "moe-600m", "--seq-len", "2048", "--steps", "10", "--num-workers", "0")
RECORDER = Path(__file__).resolve().with_name("record_routing.py")


def routing_trace_path(out: Path, machine: str, run: str) -> Path:
    """Where a learned-routing run's trace goes: beside its log, named after the run."""
    return out / f"{machine}_{run}.routing.json"


def moe_runs(out: Path, machine: str) -> list[measure_steps.Run]:
    """Learned and balanced routing at batch 4 (8,192 tokens), the CI scenario, then batch 8
    (left out first where the budget runs short); learned ones under the routing recorder."""
    runs = [measure_steps.Run(f"moe-600m-b{batch}-{routing}", "moe_ep.py",
                              (*MOE_600M, "--batch-size", str(batch), "--routing", routing))
            for batch in (4, 8) for routing in ("learned", "balanced")]
    runs = [*runs[:2], measure_steps.scenario_run("h100x1-moe-single"), *runs[2:]]
    return [replace(run, runner=(str(RECORDER), "--out",
                                 str(routing_trace_path(out, machine, run.name)), "--"))
            if "learned" in run.args else run for run in runs]


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--out", type=Path, required=True, help="log folder")
    parser.add_argument("--machine", help="log-name prefix; default from nvidia-smi, e.g. h100x1")
    parser.add_argument("--budget-s", type=float, help="start no run after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="print the runs only")
    args = parser.parse_args()
    names = [] if args.machine else measure_steps.visible_gpu_names()
    machine = args.machine or (measure_steps.machine_name(names[0], len(names)) if names else None)
    if machine is None:
        parser.error("no GPU visible (nvidia-smi): give --machine, e.g. h100x1")
    runs = moe_runs(args.out, machine)
    print(measure_steps.describe_runs(runs, args.out, machine), flush=True)
    if args.dry_run:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    measure_steps.write_env(args.out, machine)
    measure_steps.execute(runs, args.out, machine, args.budget_s)


if __name__ == "__main__":
    main()
