"""How much a lent host's speed moves the real steps: the stored runs that were watched
(``measure_steps.py run --host-watch``, an ``=== HOST`` line in their log), each run's step
median beside the host's speed during it, and the fit of log(step) on log(speed) within each
workload (each workload's own mean taken out, so workloads of different sizes pool).

A slope of -1 is a step that is all host time; 0 one the host's speed does not touch; ``r``
says how much of the runs' spread within a workload the host's speed accounts for (``r**2``).

    python3 scripts/measure/host_speed_effect.py                    # scripts/data/steps
    python3 scripts/measure/host_speed_effect.py --machine h200x1
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts.common import REPO  # noqa: E402
from scripts.measure.measure_steps import stored_runs  # noqa: E402

STEPS = REPO / "scripts" / "data" / "steps"


@dataclass(frozen=True)
class WatchedRun:
    machine: str
    workload: str
    log: str
    host_speed: float
    step_ms: float


@dataclass(frozen=True)
class Fit:
    slope: float
    r: float
    runs: int
    workloads: int


def watched_runs(root: Path, machine: str | None = None) -> list[WatchedRun]:
    """Every run under ``root/<machine>/*.log`` with both a host reading and measured steps."""
    return [WatchedRun(result.machine, result.name, log.name, result.host_speed, result.median_ms)
            for log, result in stored_runs(root)
            if (machine is None or result.machine == machine)
            and result.host_speed and result.median_ms]


def within_workload_fit(runs: list[WatchedRun]) -> Fit | None:
    """Least squares of log(step) on log(speed), each workload centred on its own means; None
    where fewer than two workloads have two runs or the speeds do not vary."""
    groups: dict[tuple[str, str], list[WatchedRun]] = defaultdict(list)
    for run in runs:
        groups[(run.machine, run.workload)].append(run)
    xs: list[float] = []
    ys: list[float] = []
    kept = 0
    for group in groups.values():
        if len(group) < 2:
            continue
        kept += 1
        x = [math.log(run.host_speed) for run in group]
        y = [math.log(run.step_ms) for run in group]
        xs += [v - statistics.mean(x) for v in x]
        ys += [v - statistics.mean(y) for v in y]
    if kept < 2 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    slope = statistics.linear_regression(xs, ys, proportional=True).slope  # centred: no intercept
    return Fit(slope, statistics.correlation(xs, ys), len(xs), kept)


def table(runs: list[WatchedRun]) -> str:
    lines = [f"{'machine':8s} {'workload':34s} {'log':34s} {'host':>6s} {'step ms':>8s}"]
    for run in sorted(runs, key=lambda r: (r.machine, r.workload, r.host_speed)):
        lines.append(f"{run.machine:8s} {run.workload:34s} {run.log:34s} "
                     f"{run.host_speed:6.3f} {run.step_ms:8.2f}")
    fit = within_workload_fit(runs)
    lines.append("")
    lines.append("within-workload fit of log(step) on log(host speed): " + (
        f"slope {fit.slope:+.2f}, r {fit.r:+.2f} (r^2 {fit.r ** 2:.2f}) over {fit.runs} runs "
        f"of {fit.workloads} workloads" if fit else "too few watched runs"))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", nargs="?", type=Path, default=STEPS,
                        help="folder of <machine>/*.log (default scripts/data/steps)")
    parser.add_argument("--machine", help="only this machine's folder (e.g. h200x1)")
    args = parser.parse_args()
    if not args.root.is_dir():
        parser.error(f"{args.root} is not a folder of <machine>/*.log step logs")
    runs = watched_runs(args.root, args.machine)
    if not runs:
        parser.error(f"no run under {args.root} has an '=== HOST' line: measure with "
                     "measure_steps.py run --host-watch")
    print(table(runs))


if __name__ == "__main__":
    main()
