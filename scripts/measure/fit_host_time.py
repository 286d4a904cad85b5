"""Fit the host-time constants of ``intercept.host_time.host_fit`` on real training steps.

The real steps (``--real``, e.g. ``scripts/measure/data/host_fit/h200x2-6layer.txt``: the example
scripts at a configuration outside the accuracy harness, measured on a lent GPU machine) are
simulated here with the shipped constants; with ``--harness DIR`` the accuracy harness's cases
simulated under DIR (``validate_accuracy.py --out DIR``) join them: those matching
``--harness-fit`` as fit rows, the others as a check (a linear preview, not the harness's
verdict). A host-bound step's simulated time moves about linearly with the three constants
(:data:`CONSTANTS`): its counted Python at the cold weights (``summary.json``:
``ranks[0].host_time.steps``) with the cold-code factor, its DTensor dispatches and autograd
nodes with their costs (the intercepted ops' table costs are reported beside them). The
multipliers that minimise the fit rows' relative squared error are solved for (``--hold``
keeps a measured constant fixed, ``--fit`` names the free ones), and the new constants written
(``--write``). Then the accuracy harness checks them on the cases they were not fitted on.

    python3 scripts/measure/fit_host_time.py --real scripts/measure/data/host_fit/h200x2-6layer.txt \\
        --harness out/validate_accuracy --fit python_cold_factor tensor_subclass_ns \\
        --write hwmodel/measured/data/host_fit.json
    python3 scripts/measure/fit_host_time.py --real scripts/measure/data/host_fit/h200x2-6layer.txt  # check

A run without ``--write`` only reports the fit.
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
    """What each constant contributes (:data:`CONSTANTS`): counted Python at the cold weights,
    DTensor dispatches, autograd nodes."""
    ops_ms: float = 0.0
    """The intercepted ops' table costs (no constant: reported beside the parts)."""

    def predicted_ms(self, multipliers: tuple[float, ...]) -> float:
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


CONSTANTS = ("python_cold_factor", "tensor_subclass_ns", "autograd_node_ns")
"""The fitted constants, in the order of :attr:`FitCase.scaled_ms`."""
STEP_FIELDS = (6, 3, 4)
"""Where each constant's part lies in a step of ``summary.json``'s ``ranks[].host_time.steps``
(cold Python, DTensor, autograd nodes)."""
OPS_FIELD = 5
"""Where a step's intercepted ops' table costs lie in it."""


def step_parts(steps: list[list[int]]) -> tuple[tuple[float, float, float], float]:
    """Per constant, its median ms per step over ``steps``; and the ops' median ms."""
    a, b, c = (statistics.median(s[i] for s in steps) / 1e6 for i in STEP_FIELDS)
    return (a, b, c), statistics.median(s[OPS_FIELD] for s in steps) / 1e6


def simulate(script: str, args: list[str], out: Path, console: Console,
             reuse: bool = False) -> FitCase:
    """Simulate ``script`` at the fit configuration on one host of two GPUs (one rank for the
    single-GPU script), as the real steps ran; ``reuse``: read an earlier simulation under
    ``out`` where there is one."""
    from phantora.run import run_scenario
    from phantora.scenario import parse_scenario

    ranks = 1 if script == "gpt_single" else 2
    spec = {"name": f"fit-{script}", "cluster": {"gpu": GPU, "hosts": 1, "gpus_per_host": 2},
            "workload": {"script": str(EXAMPLES / f"{script}.py"), "args": args,
                         "nproc_per_node": ranks, "env": {"OMP_NUM_THREADS": "1"}}}
    path = out / f"{script}.yaml"
    path.write_text(yaml.safe_dump(spec))
    if not (reuse and (out / script / "summary.json").exists()):
        run_scenario(parse_scenario(spec, str(path)), out / script, console)
    log = (out / script / "ranks" / "rank0.log").read_text()
    mean = MEAN_LINE.search(log)
    if mean is None:
        raise SystemExit(f"{script}: no 'mean of steps' line in its rank 0 log")
    steps = json.loads((out / script / "summary.json").read_text())["ranks"][0]["host_time"][
        "steps"][1:]  # the first step compiles and warms up; the mean starts at step 2 too
    return FitCase(script, 0.0, float(mean[1]), *step_parts(steps))


def fit(cases: list[FitCase], free: tuple[int, ...] = (0, 1, 2),
        held: dict[int, float] | None = None) -> tuple[float, ...]:
    """Multipliers of the constants (:data:`CONSTANTS`) minimising the cases' relative squared
    error: those in ``held`` (index -> multiplier) fixed, the others in ``free`` fitted; a
    constant in neither, or that no case exercises, keeps multiplier 1."""
    multipliers = [1.0] * len(CONSTANTS)
    for i, value in (held or {}).items():
        multipliers[i] = value
    used = [i for i in free if i not in (held or {}) and any(c.scaled_ms[i] for c in cases)]
    design = np.array([[c.scaled_ms[i] / c.real_ms for i in used] for c in cases])
    target = np.array([(c.real_ms - c.predicted_ms(multipliers)
                        + sum(c.scaled_ms[i] for i in used)) / c.real_ms for c in cases])
    solution = np.linalg.lstsq(design, target, rcond=None)[0]
    for i, value in zip(used, solution):
        multipliers[i] = float(value)
    return tuple(multipliers)


def harness_cases(out: Path, min_host_share: float) -> list[FitCase]:
    """The accuracy harness's measured cases simulated under ``out`` (``validate_accuracy.py
    --out``) whose host bounds at least ``min_host_share`` of the simulated step (the step moves
    about linearly with the host constants there); rank 0's parts."""
    from scripts.validate import validate_accuracy

    rows = []
    for case in validate_accuracy.measured_cases():
        summary_path = out / case.name / "summary.json"
        if not summary_path.exists():
            continue
        summary = json.loads(summary_path.read_text())
        share = (((summary.get("attribution") or {}).get("steady") or {}).get("share") or {}
                 ).get("host_bound")
        simulated_ms, _ = validate_accuracy.read_simulated(out / case.name, case)
        steps = summary["ranks"][0]["host_time"]["steps"][
            validate_accuracy.measure_steps.FIRST_MEASURED_STEP - 1:]
        if share is None or share < min_host_share or simulated_ms is None or not steps:
            continue
        rows.append(FitCase(case.name, case.measured_ms, simulated_ms, *step_parts(steps)))
    return rows


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--real", type=Path, required=True, help="the real steps' record")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "fit_host_time",
                        help="folder of the simulator outputs")
    parser.add_argument("--harness", type=Path, metavar="DIR",
                        help="also the accuracy harness's host-bound cases simulated under DIR "
                             "with the shipped constants (validate_accuracy.py --out DIR): fit "
                             "rows where they match --harness-fit, checked (a linear preview) "
                             "otherwise")
    parser.add_argument("--harness-fit", default="^h200x2-", metavar="REGEX",
                        help="the harness cases fitted on (re.search on the case name)")
    parser.add_argument("--min-host-share", type=float, default=0.5,
                        help="harness cases whose host bounds less of the step are left out")
    parser.add_argument("--fit", nargs="+", choices=CONSTANTS, default=list(CONSTANTS),
                        help="the constants to fit (the others keep their shipped values)")
    parser.add_argument("--hold", nargs="+", default=[], metavar="NAME=VALUE",
                        help="constants held at a measured value instead of fitted, e.g. "
                             "autograd_node_ns=17649")
    parser.add_argument("--reuse", action="store_true",
                        help="read the fit cases' simulations from an earlier run under --out "
                             "(simulated with the same shipped constants)")
    parser.add_argument("--write", type=Path, help="write the fitted constants here")
    args = parser.parse_args()
    from intercept.host_time.host_fit import load_fit

    script_args, real = read_real(args.real)
    args.out.mkdir(parents=True, exist_ok=True)
    shipped = load_fit()
    constants = {name: getattr(shipped, name) for name in CONSTANTS}
    stamp = args.out / "constants.json"
    if args.reuse and (not stamp.exists() or json.loads(stamp.read_text()) != constants):
        raise SystemExit(f"--reuse: the simulations under {args.out} were not made with the "
                         f"shipped constants {constants}; run without --reuse")
    stamp.write_text(json.dumps(constants))
    console = Console(stderr=True, quiet=True)
    cases = []
    for script, real_ms in real.items():
        start_s = time.perf_counter()
        case = simulate(script, script_args, args.out, console, args.reuse)
        cases.append(FitCase(script, real_ms, case.simulated_ms, case.scaled_ms, case.ops_ms))
        print(f"simulated {script} in {time.perf_counter() - start_s:.0f} s", flush=True)
    checked: list[FitCase] = []
    if args.harness:  # simulated with the shipped constants too (the help says so)
        for case in harness_cases(args.harness, args.min_host_share):
            (cases if re.search(args.harness_fit, case.script) else checked).append(case)
    held = {}
    for item in args.hold:
        name, _, value = item.partition("=")
        if name not in CONSTANTS or not value:
            parser.error(f"--hold {item!r}: expected NAME=VALUE, NAME one of "
                         f"{', '.join(CONSTANTS)}")
        held[CONSTANTS.index(name)] = float(value) / getattr(shipped, name)
    multipliers = fit(cases, tuple(CONSTANTS.index(name) for name in args.fit), held)
    print(f"\n{'case':44s} {'real ms':>8s} {'sim ms':>8s} {'err %':>7s} {'python':>7s} "
          f"{'dtensor':>7s} {'nodes':>7s} {'ops':>7s} {'fitted ms':>9s} {'err %':>7s}")
    for label, rows in (("fitted on", cases), ("checked (linear preview)", checked)):
        errors = []
        for c in rows:
            fitted = c.predicted_ms(multipliers)
            errors.append((abs(c.simulated_ms / c.real_ms - 1), abs(fitted / c.real_ms - 1)))
            print(f"{c.script:44s} {c.real_ms:8.2f} {c.simulated_ms:8.2f} "
                  f"{100 * (c.simulated_ms / c.real_ms - 1):+7.1f} "
                  + " ".join(f"{part:7.2f}" for part in (*c.scaled_ms, c.ops_ms))
                  + f" {fitted:9.2f} {100 * (fitted / c.real_ms - 1):+7.1f}")
        if errors:
            print(f"{label}, {len(rows)} cases: mean |error| "
                  f"{100 * statistics.mean(e for e, _ in errors):.1f}% -> "
                  f"{100 * statistics.mean(e for _, e in errors):.1f}%, max "
                  f"{100 * max(e for e, _ in errors):.1f}% -> "
                  f"{100 * max(e for _, e in errors):.1f}%\n")
    if min(multipliers) <= 0:
        raise SystemExit(f"multipliers {multipliers}: a constant would be <= 0; the fit cases do "
                         "not tell the constants apart")
    fitted = {"python_cold_factor": round(shipped.python_cold_factor * multipliers[0], 3),
              "tensor_subclass_ns": round(shipped.tensor_subclass_ns * multipliers[1]),
              "autograd_node_ns": round(shipped.autograd_node_ns * multipliers[2])}
    print("; ".join(f"{name} {getattr(shipped, name)} -> {value}"
                    for name, value in fitted.items()) + f" ({shipped.reference})")
    if args.write:
        record = {"reference": shipped.reference, **fitted,
                  "provenance": {"real_steps": str(args.real.relative_to(REPO)
                                                   if args.real.is_absolute() else args.real),
                                 "gpu": GPU,
                                 "harness_fit": (f"{args.harness_fit} (host share >= "
                                                 f"{args.min_host_share})"
                                                 if args.harness else None),
                                 "cases": {c.script: round(c.real_ms, 3) for c in cases},
                                 "fitted": list(args.fit),
                                 "fitted_by": "scripts/measure/fit_host_time.py",
                                 "date": time.strftime("%Y-%m-%d", time.gmtime())}}
        args.write.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
