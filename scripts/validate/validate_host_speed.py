"""Real runs whose host speed was watched, simulated at the reference speed and at that run's
speed (``cluster.host_speed``): does charging the probed speed bring the estimate closer?

Every stored run of ``scripts/data/steps/`` with an ``=== HOST`` line (``measure_steps.py run
--host-watch``: the host's speed during the run against its reference host) whose workload has
an accuracy scenario (``scenarios/accuracy/<machine>-<run>.yaml``) is compared with that
scenario simulated at ``host_speed`` 1.0 and at the run's speed; steps are read as the harness
reads them (median of steps 3..).

  python3 scripts/validate/validate_host_speed.py            # table to stdout and results/
  python3 scripts/validate/validate_host_speed.py --no-save
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from scripts.measure.measure_steps import parse_output, stored_runs  # noqa: E402
from scripts.validate.variants import simulate_variant  # noqa: E402

STEPS = REPO / "scripts" / "data" / "steps"
SCENARIOS = REPO / "scenarios" / "accuracy"
RESULTS = REPO / "scripts" / "validate" / "results" / "validate_host_speed.txt"


@cache
def simulated_ms(scenario: Path, speed: float, out: Path) -> float:
    """The scenario's median step (ms) with ``cluster.host_speed`` = ``speed``."""
    run_dir = simulate_variant(scenario, {"host_speed": speed}, out, str(speed))
    logs = [p.read_text() for p in sorted((run_dir / "ranks").glob("rank*.log"))]
    result = parse_output(logs, "", scenario.stem)
    assert result.median_ms is not None, f"{scenario}: no step lines"
    return result.median_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    lines = ["| case | host speed (of its reference) | real ms | simulated at 1.0 | "
             "simulated at the run's speed |", "|---|---|---|---|---|"]
    errors: dict[str, list[float]] = {"reference": [], "probed": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _, run in stored_runs(STEPS):
            scenario = SCENARIOS / f"{run.machine}-{run.name}.yaml"
            if run.host_speed is None or run.median_ms is None or not scenario.exists():
                continue
            real = run.median_ms
            at_ref = simulated_ms(scenario, 1.0, Path(tmp))
            at_speed = simulated_ms(scenario, run.host_speed, Path(tmp))
            ref_err, speed_err = (at_ref - real) / real * 100, (at_speed - real) / real * 100
            errors["reference"].append(abs(ref_err))
            errors["probed"].append(abs(speed_err))
            lines.append(f"| {scenario.stem} | {run.host_speed:.3f} | {real:.2f} | "
                         f"{at_ref:.2f} ({ref_err:+.1f}%) | {at_speed:.2f} ({speed_err:+.1f}%) |")
            print(lines[-1], flush=True)
    summary = (f"{len(errors['reference'])} watched runs: mean |error| at the reference speed "
               f"{statistics.mean(errors['reference']):.1f}% (max "
               f"{max(errors['reference']):.1f}%), at each run's probed speed "
               f"{statistics.mean(errors['probed']):.1f}% (max {max(errors['probed']):.1f}%)")
    text = "\n".join(lines) + "\n\n" + summary + "\n"
    print(summary)
    if not args.no_save:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
