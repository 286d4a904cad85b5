"""A step's host work between two collective calls, real (timed) against simulated, window by
window: where a host-bound step's estimate departs from the real host.

The real side is a rank's record of ``time_host_calls.py`` (unprofiled; each collective call's
start and duration, the host's timed waits on the GPU, the step ends); the simulated side is the
same rank's execution graph (``RUN_DIR/graph/rank<r>.jsonl``: each record's host gap, the
optimizer steps in ``meta.json``). Window ``i`` of a step is the host time from the end of its
collective call ``i`` to the end of call ``i + 1``, the second call's own cost included and the
timed waits on the GPU left out; the simulated window is the sum of the records' host gaps over
the same stretch (no waits: a sync's block is not a host gap). Each window is the median over
the steady steps (the real record's timed steps; the simulated steps from the third).

A real window also holds waits the runner does not time: syncs torch issues from C++
(``torch.tensor`` of CUDA scalars reads each with ``.item()`` below the Python method), the
blocking host-to-device copy of pageable memory. A window far above the simulated one is where
to look, not yet a host cost.

  python3 scripts/measure/compare_host_windows.py RUN_DIR RECORD_JSON --rank R [--top N]
"""

import argparse
import bisect
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from phantora.record.graph import load_recording  # noqa: E402
from scripts.measure.time_host_calls import SYNC_PREFIX, host_work_segments  # noqa: E402

SKIPPED_SIMULATED_STEPS = 2
"""Simulated optimizer steps left out at the start (NCCL set-up, first-seen shapes)."""


def real_windows(record: dict[str, Any]) -> tuple[list[str], list[list[float]]]:
    """The collective kinds of the first timed step and, per timed step, its windows (us):
    ``host_work_segments``' gaps, each with the call that ends it."""
    ends = record["step_ends_us"]
    kinds: list[str] = []
    steps = []
    for (low, high), segments in zip(zip(ends, ends[1:]), host_work_segments(record)):
        calls = [e for e in record["timeline_us"]
                 if low <= e[0] < high and not e[2].startswith(SYNC_PREFIX)]
        kinds = kinds or [call[2].split("/")[0] for call in calls]
        steps.append([segment + later[1] for segment, later in zip(segments, calls[1:])])
    return kinds, steps


def simulated_windows(run_dir: Path, rank: int) -> tuple[list[str], list[list[float]]]:
    """The same for a simulated rank: its collective kinds and, per steady optimizer step, the
    host gaps summed between two collectives (us). One pass over the rank's records (in program
    order, so each step's are contiguous)."""
    recording = load_recording(run_dir)
    records = recording.ranks[rank]
    if not records:
        raise SystemExit(f"rank {rank} of {run_dir} was mirrored, not run live: pick a live rank")
    bounds = recording.meta["optimizer_steps_ns"][rank][SKIPPED_SIMULATED_STEPS:]
    steps: list[list[float]] = [[] for _ in bounds[1:]]
    step_kinds: list[list[str]] = [[] for _ in bounds[1:]]
    current, gap = -1, 0.0
    for record in records:
        step = bisect.bisect_right(bounds, record["t_ns"]) - 1
        if not 0 <= step < len(steps):
            continue
        if step != current:
            current, gap = step, 0.0
        gap += record["cpu_ns"] / 1e3
        if record["op"] == "collective":
            if step_kinds[step]:
                steps[step].append(gap)
            gap = 0.0
            step_kinds[step].append(record["kind"])
    return next((kinds for kinds in step_kinds if kinds), []), steps


def medians(steps: list[list[float]]) -> list[float]:
    """Per window, the median over the steps that have it."""
    length = min((len(s) for s in steps), default=0)
    return [statistics.median(s[i] for s in steps) for i in range(length)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a simulated run's output folder")
    parser.add_argument("record", type=Path, help="time_host_calls.py's rank<r>.json")
    parser.add_argument("--rank", type=int, required=True, help="the rank of both")
    parser.add_argument("--top", type=int, default=10, help="largest differences to list")
    args = parser.parse_args()
    real_kinds, real_steps = real_windows(json.loads(args.record.read_text()))
    sim_kinds, sim_steps = simulated_windows(args.run_dir, args.rank)
    real, sim = medians(real_steps), medians(sim_steps)
    if len(real) != len(sim):
        print(f"note: {len(real)} real windows a step against {len(sim)} simulated (the calls "
              "differ); compared in order up to the shorter")
    rows = list(zip(range(len(real)), real, sim))
    print(f"host work between collective calls, rank {args.rank}: real {sum(real) / 1e3:.1f} ms, "
          f"simulated {sum(sim) / 1e3:.1f} ms over {len(rows)} windows "
          f"(real {len(real_steps)} steps, simulated {len(sim_steps)})")
    tenth = max(1, len(rows) // 10)
    print("by tenth of the step (ms):")
    for first in range(0, len(rows), tenth):
        part = rows[first:first + tenth]
        print(f"  windows {first:4d}-{first + len(part) - 1:4d}  real "
              f"{sum(r for _, r, _ in part) / 1e3:7.2f}  simulated "
              f"{sum(s for _, _, s in part) / 1e3:7.2f}")
    print("largest differences (us): window, the call ending it real/simulated, real, simulated")
    for i, r, s in sorted(rows, key=lambda row: -abs(row[1] - row[2]))[:args.top]:
        after = (f"{real_kinds[i + 1] if i + 1 < len(real_kinds) else '?'}/"
                 f"{sim_kinds[i + 1] if i + 1 < len(sim_kinds) else '?'}")
        print(f"  {i:4d}  {after:40s} {r:9.1f} {s:9.1f}")


if __name__ == "__main__":
    main()
