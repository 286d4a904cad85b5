"""Measure the mixture-of-experts example's real step times on one GPU, for the accuracy harness.

The runs of issue 13: ``moe_ep.py`` in one process (no expert exchange) at a realistic size
(``moe-600m``: 8 experts, top-2, d_model 1024, 4 x 2048 = 8,192 tokens a step, bf16
autocast), once with the learned router and once with balanced (round-robin) routing, and the
CI scenario ``h100x1-moe-single``. They run and log exactly as ``measure_steps.py`` runs its
suites (same runner, same ``=== RUN``/``=== EXIT`` log blocks, ``<machine>_moe_ep.log``), so
``validate_accuracy.py`` turns them into cases once the logs are under
``scripts/data/steps/<machine>/``. Then, with ``--routing-trace``, the learned run's first
steps again under ``record_traffic.py``: the router's tokens per expert per call, the trace
that ``simulation.routing: trace:<file>`` replays.

  # on the GPU machine
  python3 scripts/measure_moe_steps.py --out "$OUT" --budget-s 150 \\
      --routing-trace "$OUT/routing_trace_moe-600m-b4.json"
  # anywhere: what it would run
  python3 scripts/measure_moe_steps.py --out /tmp/m --machine h100x1 --dry-run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import measure_steps  # scripts/ is not a package: imported from its folder

FIRST_RUNS = 2
"""Runs before the routing trace is recorded (the learned and balanced batch-4 ones); the
others follow it while ``--budget-s`` lasts (it counts the trace's time too)."""
MOE_600M = ("--model", "moe-600m", "--seq-len", "2048", "--steps", "10", "--num-workers", "0")
TRACE_STEPS = 3


def moe_runs() -> list[measure_steps.Run]:
    """Learned and balanced routing at batch 4 (8,192 tokens), the CI scenario, then batch 8
    (left out first where the budget runs short)."""
    runs = [measure_steps.Run(f"moe-600m-b{batch}-{routing}", "moe_ep.py",
                              (*MOE_600M, "--batch-size", str(batch), "--routing", routing))
            for batch in (4, 8) for routing in ("learned", "balanced")]
    return [*runs[:2], measure_steps.scenario_run("h100x1-moe-single"), *runs[2:]]


def trace_command(path: Path) -> list[str]:
    """``record_traffic.py`` on the learned batch-4 run, for ``TRACE_STEPS`` steps."""
    args = measure_steps.with_steps([*MOE_600M, "--batch-size", "4", "--routing", "learned"],
                                    TRACE_STEPS)
    return [sys.executable, str(REPO / "scripts" / "record_traffic.py"), "--nproc", "1",
            "--out", str(path.with_name(path.stem + "_traffic.json")), "--routing-trace",
            str(path), "--", str(measure_steps.EXAMPLES / "moe_ep.py"), *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="log folder")
    parser.add_argument("--machine", help="log-name prefix; default from nvidia-smi, e.g. h100x1")
    parser.add_argument("--budget-s", type=float,
                        help="start no step-time run after this many seconds (the routing "
                             "trace, recorded after the first two runs, counts too)")
    parser.add_argument("--routing-trace", type=Path,
                        help="then record the learned run's routing trace to this file")
    parser.add_argument("--dry-run", action="store_true", help="print the runs only")
    args = parser.parse_args()
    names = [] if args.machine else measure_steps.visible_gpu_names()
    machine = args.machine or (measure_steps.machine_name(names[0], len(names)) if names else None)
    if machine is None:
        parser.error("no GPU visible (nvidia-smi): give --machine, e.g. h100x1")
    runs = moe_runs()
    print(measure_steps.describe_runs(runs, args.out, machine), flush=True)
    if args.routing_trace is not None:
        print(f"  then: {' '.join(trace_command(args.routing_trace))}", flush=True)
    if args.dry_run:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    measure_steps.write_env(args.out, machine)
    started_s = time.monotonic()
    measure_steps.execute(runs[:FIRST_RUNS], args.out, machine, args.budget_s)
    if args.routing_trace is not None:
        with open(args.out / f"{machine}_routing_trace.log", "w") as log:
            done = subprocess.run(trace_command(args.routing_trace), stdout=log,
                                  stderr=subprocess.STDOUT, cwd=REPO, check=False,
                                  env={**os.environ, **measure_steps.SAFE_ENV},
                                  timeout=measure_steps.RUN_TIMEOUT_S)
        print(f"routing trace: rc {done.returncode}", flush=True)
    left_s = None if args.budget_s is None else args.budget_s - (time.monotonic() - started_s)
    measure_steps.execute(runs[FIRST_RUNS:], args.out, machine, left_s)


if __name__ == "__main__":
    main()
