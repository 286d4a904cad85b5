"""Fit the host-time constants of ``intercept.host_fit`` on real training steps.

The real steps (``--real``, e.g. ``scripts/data/host_fit/h200x2-6layer.txt``: the example
scripts at a configuration outside the accuracy harness, measured on a lent GPU machine) are
simulated here with the shipped constants. A host-bound step's simulated time moves linearly
with both constants: its counted Python work (``summary.json``: ``host_time`` residual) scales
with the cold-code factor, its DTensor dispatches (the steps' fourth number) with the per-op
cost. The multipliers that minimise the steps' relative squared error are solved for, and the
new constants written (``--write``). Then the accuracy harness (``validate_accuracy.py``)
checks them on cases they were not fitted on.

    python3 scripts/fit_host_time.py --real scripts/data/host_fit/h200x2-6layer.txt \\
        --write phantora/calibration/data/host_fit.json
    python3 scripts/fit_host_time.py --real scripts/data/host_fit/h200x2-6layer.txt  # check

A run without ``--write`` only reports the fit cases' errors with the shipped constants.
"""

import argparse
import json
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

import yaml
from rich.console import Console

REPO = Path(__file__).resolve().parent.parent
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
    python_ms: float
    subclass_ms: float

    def predicted_ms(self, cold: float, subclass: float) -> float:
        """The simulated step with the constants multiplied by ``cold`` and ``subclass``."""
        return (self.simulated_ms + (cold - 1) * self.python_ms
                + (subclass - 1) * self.subclass_ms)


def read_real(path: Path) -> tuple[list[str], dict[str, float]]:
    """The fit configuration's arguments and each script's mean real step (ms)."""
    text = path.read_text()
    args = ARGS_LINE.search(text)
    if args is None:
        raise SystemExit(f"{path}: no '# M=\"...\"' line with the scripts' arguments")
    real = {m["script"]: statistics.mean(float(v) for v in m["ms"].split())
            for m in REAL_LINE.finditer(text)}
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
    return FitCase(script, 0.0, float(mean[1]),
                   statistics.median(s[2] for s in steps) / 1e6,
                   statistics.median(s[3] for s in steps) / 1e6)


def fit(cases: list[FitCase]) -> tuple[float, float]:
    """Multipliers of the cold-code factor and the subclass cost minimising the cases'
    relative squared error (the second stays 1 where no case dispatches DTensor ops)."""
    rows = [(c.python_ms / c.real_ms, c.subclass_ms / c.real_ms,
             (c.real_ms - c.simulated_ms + c.python_ms + c.subclass_ms) / c.real_ms)
            for c in cases]
    a11 = sum(x1 * x1 for x1, _, _ in rows)
    a12 = sum(x1 * x2 for x1, x2, _ in rows)
    a22 = sum(x2 * x2 for _, x2, _ in rows)
    b1 = sum(x1 * y for x1, _, y in rows)
    b2 = sum(x2 * y for _, x2, y in rows)
    if a22 == 0:
        return b1 / a11, 1.0
    det = a11 * a22 - a12 * a12
    return (b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", type=Path, required=True, help="the real steps' record")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "fit_host_time",
                        help="folder of the simulator outputs")
    parser.add_argument("--write", type=Path, help="write the fitted constants here")
    args = parser.parse_args()
    from intercept.host_fit import load_fit

    script_args, real = read_real(args.real)
    args.out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True, quiet=True)
    cases = []
    for script, real_ms in real.items():
        start_s = time.perf_counter()
        case = simulate(script, script_args, args.out, console)
        cases.append(FitCase(script, real_ms, case.simulated_ms, case.python_ms,
                             case.subclass_ms))
        print(f"simulated {script} in {time.perf_counter() - start_s:.0f} s", flush=True)
    cold, subclass = fit(cases)
    shipped = load_fit()
    print(f"\n{'script':12s} {'real ms':>8s} {'sim ms':>8s} {'err %':>7s} {'python ms':>9s} "
          f"{'dtensor ms':>10s} {'fitted ms':>9s} {'err %':>7s}")
    for c in cases:
        fitted = c.predicted_ms(cold, subclass)
        print(f"{c.script:12s} {c.real_ms:8.2f} {c.simulated_ms:8.2f} "
              f"{100 * (c.simulated_ms / c.real_ms - 1):+7.1f} {c.python_ms:9.2f} "
              f"{c.subclass_ms:10.2f} {fitted:9.2f} {100 * (fitted / c.real_ms - 1):+7.1f}")
    new_cold = shipped.python_cold_factor * cold
    new_subclass = round(shipped.tensor_subclass_ns * subclass)
    print(f"\npython_cold_factor {shipped.python_cold_factor:.3f} -> {new_cold:.3f}; "
          f"tensor_subclass_ns {shipped.tensor_subclass_ns} -> {new_subclass} "
          f"({shipped.reference})")
    if args.write:
        record = {"reference": shipped.reference, "python_cold_factor": round(new_cold, 3),
                  "tensor_subclass_ns": new_subclass,
                  "provenance": {"real_steps": str(args.real.relative_to(REPO)
                                                   if args.real.is_absolute() else args.real),
                                 "gpu": GPU, "cases": {c.script: c.real_ms for c in cases},
                                 "fitted_by": "scripts/fit_host_time.py",
                                 "date": time.strftime("%Y-%m-%d", time.gmtime())}}
        args.write.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
