"""What ``torch.profiler`` adds to a step's host time, per host event it records: the stored
single-GPU traces (``scripts/data/traces/<machine>/``, one profiled step each) against the same
scripts' unprofiled step medians (``scripts/data/steps/<machine>/``). For each case: (the
profiled step - the unprofiled median) / (the CPU ops + CUDA runtime and driver calls recorded
in the step); the median over the cases is ``phantora.profiles.kineto.PROFILER_NS_PER_EVENT``.

A case whose unprofiled step the GPU bounds hides part of the cost (the profiled step's extra
host time partly runs under GPU work), and the profiler also slows kernels a little: each
ratio is an estimate, and their spread is the constant's uncertainty.

    python3 scripts/measure/fit_profiler_cost.py                    # h100x1
    python3 scripts/measure/fit_profiler_cost.py --machine h200x4
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from phantora.profiles.kineto import read_trace  # noqa: E402
from scripts.common import REPO  # noqa: E402
from scripts.measure.measure_steps import stored_runs  # noqa: E402

DATA = REPO / "scripts" / "data"


def unprofiled_medians(machine: str) -> dict[str, float]:
    """Run name -> the median of its unprofiled runs' step medians on ``machine``."""
    medians: dict[str, list[float]] = defaultdict(list)
    for _, run in stored_runs(DATA / "steps"):
        if run.machine == machine and not run.profiled and run.rc == 0 and run.median_ms:
            medians[run.name].append(run.median_ms)
    return {name: statistics.median(values) for name, values in medians.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machine", default="h100x1")
    args = parser.parse_args()
    medians = unprofiled_medians(args.machine)
    rows = []
    for folder in sorted((DATA / "traces" / args.machine).glob(f"{args.machine}_*")):
        case = folder.name.removeprefix(f"{args.machine}_")
        traces = sorted(folder.glob("rank*.json.gz"))
        if case not in medians or len(traces) != 1:
            continue  # no unprofiled run of it, or several ranks
        trace = read_trace(traces[0])
        (start, end), = trace.steps
        ops, calls = trace.host_events(start, end)
        profiled_ms = (end - start) / 1e6
        rows.append((case, profiled_ms, medians[case], ops, calls,
                     (profiled_ms - medians[case]) * 1e3 / (ops + calls)))
    if not rows:
        raise SystemExit(f"no one-rank trace of {args.machine} with unprofiled runs of its script")
    print(f"{'case':34} {'profiled ms':>11} {'unprofiled':>10} {'cpu ops':>7} {'calls':>6} "
          f"{'us/event':>8}")
    for case, profiled_ms, unprofiled, ops, calls, ratio in rows:
        print(f"{case:34} {profiled_ms:11.1f} {unprofiled:10.1f} {ops:7d} {calls:6d} "
              f"{ratio:8.2f}")
    ratios = [row[-1] for row in rows]
    print(f"median {statistics.median(ratios):.2f} us per event over {len(ratios)} cases "
          f"(range {min(ratios):.2f}-{max(ratios):.2f})")

if __name__ == "__main__":
    main()
