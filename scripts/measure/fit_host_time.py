"""Fit the host-time constants of ``intercept.host_time.host_fit`` on real training steps.

The real steps (``--real``, e.g. ``scripts/measure/data/host_fit/h200x2-6layer.txt``: the example
scripts at a configuration outside the accuracy harness, measured on a lent GPU machine) are
simulated here with the shipped constants. A host-bound step's simulated time moves linearly
with the three constants: its counted Python work (``summary.json``: ``host_time`` residual)
scales with the cold-code factor, its DTensor dispatches and autograd nodes (the steps' fourth
and fifth numbers) with their per-op and per-node costs. The residual also holds the member
walks charged hot (``intercept.host_time.python_work.HOT_WALKS``), which the factor does not scale:
a fit that moves the factor far is run again until the multipliers are about 1. The multipliers
that minimise the steps' relative squared error are solved for, and the new constants written
(``--write``).
Then the accuracy harness (``validate_accuracy.py``) checks them on cases they were not fitted
on.

    python3 scripts/measure/fit_host_time.py --real scripts/measure/data/host_fit/h200x2-6layer.txt \\
        --write phantora/calibration/data/host_fit.json
    python3 scripts/measure/fit_host_time.py --real scripts/measure/data/host_fit/h200x2-6layer.txt  # check

A run without ``--write`` only reports the fit cases' errors with the shipped constants.
"""

import json
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO  # noqa: E402

EXAMPLES = REPO / "scenarios" / "examples"
GPU = "h200"
"""The fit cases' GPU (and so their reference host): the machine the real steps came from."""
ARGS_LINE = re.compile(r'^# M="(?P<args>[^"]+)"', re.MULTILINE)
REAL_LINE = re.compile(r"^(?P<script>gpt_\w+)\s+(?P<ms>[\d.\s]+)$", re.MULTILINE)
MEAN_LINE = re.compile(r"mean of steps \d+-\d+: ([\d.]+) ms/step")


@dataclass(frozen=True)
class FitCase:
    """One script at the fit configuration: its real step (mean of runs) and the simulated
    one split into what each constant scales (ms per step)."""

    script: str
    real_ms: float
    simulated_ms: float
    scaled_ms: tuple[float, float, float]
    """What each constant contributes: counted Python, DTensor dispatches, autograd nodes."""

    def predicted_ms(self, multipliers: tuple[float, float, float]) -> float:
        """The simulated step with each constant multiplied by its multiplier."""
        return self.simulated_ms + sum((m - 1) * part
                                       for m, part in zip(multipliers, self.scaled_ms))


def read_real(path: Path) -> tuple[list[str], dict[str, float]]:
    """The fit configuration's arguments and each script's mean real step (ms) over all its
    runs (of every session in the record)."""
    text = path.read_text()
    args = ARGS_LINE.search(text)
    if args is None:
        raise SystemExit(f"{path}: no '# M=\"...\"' line with the scripts' arguments")
    runs: dict[str, list[float]] = {}
    for m in REAL_LINE.finditer(text):
        runs.setdefault(m["script"], []).extend(float(v) for v in m["ms"].split())
    real = {script: statistics.mean(ms) for script, ms in runs.items()}
    if not real:
        raise SystemExit(f"{path}: no '<script> <ms> ...' lines")
    return args["args"].split(), real


def simulate(script: str, args: list[str], out: Path, console: Console) -> FitCase:
    """Simulate ``script`` at the fit configuration on one host of two GPUs (one rank for the
    single-GPU script), as the real steps ran."""
    from phantora.cli import run_scenario
    from phantora.scenario import parse_scenario

    ranks = 1 if script == "gpt_single" else 2
    spec = {"name": f"fit-{script}", "cluster": {"gpu": GPU, "hosts": 1, "gpus_per_host": 2},
            "workload": {"script": str(EXAMPLES / f"{script}.py"), "args": args,
                         "nproc_per_node": ranks, "env": {"OMP_NUM_THREADS": "1"}}}
    path = out / f"{script}.yaml"
    path.write_text(yaml.safe_dump(spec))
    run_scenario(parse_scenario(spec, str(path)), out / script, console)
    log = (out / script / "ranks" / "rank0.log").read_text()
    mean = MEAN_LINE.search(log)
    if mean is None:
        raise SystemExit(f"{script}: no 'mean of steps' line in its rank 0 log")
    steps = json.loads((out / script / "summary.json").read_text())["ranks"][0]["host_time"][
        "steps"][1:]  # the first step compiles and warms up; the mean starts at step 2 too
    parts = tuple(statistics.median(s[i] for s in steps) / 1e6 for i in (2, 3, 4))
    return FitCase(script, 0.0, float(mean[1]), parts)  # type: ignore[arg-type]


def fit(cases: list[FitCase]) -> tuple[float, float, float]:
    """Multipliers of the three constants minimising the cases' relative squared error; a
    constant no case exercises keeps multiplier 1."""
    used = [i for i in range(3) if any(c.scaled_ms[i] for c in cases)]
    design = np.array([[c.scaled_ms[i] / c.real_ms for i in used] for c in cases])
    target = np.array([(c.real_ms - c.simulated_ms + sum(c.scaled_ms)) / c.real_ms
                       for c in cases])
    solution = np.linalg.lstsq(design, target, rcond=None)[0]
    multipliers = [1.0, 1.0, 1.0]
    for i, value in zip(used, solution):
        multipliers[i] = float(value)
    return multipliers[0], multipliers[1], multipliers[2]


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--real", type=Path, required=True, help="the real steps' record")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "fit_host_time",
                        help="folder of the simulator outputs")
    parser.add_argument("--write", type=Path, help="write the fitted constants here")
    args = parser.parse_args()
    from intercept.host_time.host_fit import load_fit

    script_args, real = read_real(args.real)
    args.out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True, quiet=True)
    cases = []
    for script, real_ms in real.items():
        start_s = time.perf_counter()
        case = simulate(script, script_args, args.out, console)
        cases.append(FitCase(script, real_ms, case.simulated_ms, case.scaled_ms))
        print(f"simulated {script} in {time.perf_counter() - start_s:.0f} s", flush=True)
    multipliers = fit(cases)
    shipped = load_fit()
    print(f"\n{'script':12s} {'real ms':>8s} {'sim ms':>8s} {'err %':>7s} {'python':>7s} "
          f"{'dtensor':>7s} {'nodes':>7s} {'fitted ms':>9s} {'err %':>7s}")
    for c in cases:
        fitted = c.predicted_ms(multipliers)
        python, dtensor, nodes = c.scaled_ms
        print(f"{c.script:12s} {c.real_ms:8.2f} {c.simulated_ms:8.2f} "
              f"{100 * (c.simulated_ms / c.real_ms - 1):+7.1f} {python:7.2f} {dtensor:7.2f} "
              f"{nodes:7.2f} {fitted:9.2f} {100 * (fitted / c.real_ms - 1):+7.1f}")
    if min(multipliers) <= 0:
        raise SystemExit(f"multipliers {multipliers}: a constant would be <= 0; the fit cases do "
                         "not tell the constants apart")
    cold = shipped.python_cold_factor * multipliers[0]
    subclass = round(shipped.tensor_subclass_ns * multipliers[1])
    node = round(shipped.autograd_node_ns * multipliers[2])
    print(f"\npython_cold_factor {shipped.python_cold_factor:.3f} -> {cold:.3f}; "
          f"tensor_subclass_ns {shipped.tensor_subclass_ns} -> {subclass}; "
          f"autograd_node_ns {shipped.autograd_node_ns} -> {node} ({shipped.reference})")
    if args.write:
        record = {"reference": shipped.reference, "python_cold_factor": round(cold, 3),
                  "tensor_subclass_ns": subclass, "autograd_node_ns": node,
                  "provenance": {"real_steps": str(args.real.relative_to(REPO)
                                                   if args.real.is_absolute() else args.real),
                                 "gpu": GPU, "cases": {c.script: c.real_ms for c in cases},
                                 "fitted_by": "scripts/measure/fit_host_time.py",
                                 "date": time.strftime("%Y-%m-%d", time.gmtime())}}
        args.write.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
