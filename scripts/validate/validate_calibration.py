"""Kernel calibrations from real profiler traces, against real training steps (issue 36, part 2).

A calibration (``phantora-ns3 calibrate``, docs/calibrate.md) is built here from the stored
Kineto traces (``scripts/data/traces/``) and each measured run of a check is simulated twice:
with ``cluster.calibration`` set to it, and with the packaged measured tables (the baseline),
both against the run's measured median step (``scripts/data/steps/``, read as
``validate_accuracy.py`` reads them: the same scenarios, ``SIMULATED_STEPS`` steps).

(a) cross-script, H100: calibrated from the traces of GPT-2 124M (b8, b16) and ResNet-50 (b64,
    b128), predicting Llama (150M, 1B, MoE 2B, compiled), ViT-B/16 and GPT-2 350M.
(b) cross-GPU: calibrated from every one-GPU H100 trace, predicting H200 steps through the spec
    sheets (each kernel's roofline bound moves from one GPU's peaks to the other's); and the
    reverse, from the H200 traces (four runs side by side on one host) to H100 steps.
Goal: mean |error| <= 8% per check. Each table also shows where the calibrated GPU time came
from (calibrated rows, their interpolation, the roofline fitted to them).

Usages (from the repository root):
  python3 scripts/validate/validate_calibration.py              # ~15 min; writes the table to
                                                                # scripts/validate/results/
  python3 scripts/validate/validate_calibration.py --only 'llama-1b' --no-save
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO, SHARED_DATA  # noqa: E402
from scripts.measure import measure_steps  # noqa: E402
from scripts.validate import validate_accuracy  # noqa: E402
from scripts.validate.validate_accuracy import Case, Outcome, error_pct  # noqa: E402

TRACES = SHARED_DATA / "traces"
RESULT_PATH = Path(__file__).resolve().parent / "results" / "validate_calibration.txt"
SIMULATED_STEPS = 4
"""Steps per simulation: the measurement's warm-up (1-2) and two measured; host time is
counted, so a simulated step does not vary from step to step."""
GOAL_MEAN_PCT = 8.0

ONE_GPU_RUNS = ("ci-h100x1-gpt-single", "gpt2-124m-b8", "gpt2-124m-b16", "gpt2-350m-b8",
                "llama-150m-b8", "llama-150m-b16", "llama-1b-b2", "llama-1b-b4",
                "llama-moe-2b-b4", "resnet50-b64", "resnet50-b128", "vit-b16-b64",
                "gpt2-124m-b8-compile", "gpt2-124m-b8-compile-cudagraphs", "llama-1b-b4-compile",
                "resnet50-b64-compile")
"""The one-GPU runs traced on both GPUs (``h100x1/`` and ``h200x4/``)."""


@dataclass(frozen=True)
class Calibration:
    """Which traces a calibration is built from: ``scripts/data/traces/<folder>/<folder>_<run>``."""

    name: str
    gpu: str
    folder: str
    runs: tuple[str, ...]

    def traces(self) -> list[Path]:
        return [TRACES / self.folder / f"{self.folder}_{run}" / "rank0.json.gz"
                for run in self.runs]


GPT2_RESNET = Calibration("h100-gpt2-resnet", "h100", "h100x1",
                          ("gpt2-124m-b8", "gpt2-124m-b16", "resnet50-b64", "resnet50-b128"))
H100_ALL = Calibration("h100-all", "h100", "h100x1", ONE_GPU_RUNS)
H200_ALL = Calibration("h200-all", "h200", "h200x4", ONE_GPU_RUNS)


@dataclass(frozen=True)
class Check:
    title: str
    calibration: Calibration
    machine: str
    """Whose measured steps are predicted: ``h100x1``, ``h200x1``."""
    runs: tuple[str, ...]


CHECKS = (
    Check("(a) cross-script H100: GPT-2 124M + ResNet-50 traces -> other scripts' H100 steps",
          GPT2_RESNET, "h100x1",
          ("gpt2-350m-b8", "llama-150m-b8", "llama-150m-b16", "llama-1b-b2", "llama-1b-b4",
           "llama-moe-2b-b4", "vit-b16-b64", "llama-1b-b4-compile")),
    Check("(b) H100 -> H200: H100 traces + spec sheets -> H200 steps", H100_ALL, "h200x1",
          ("gpt2-124m-b8", "gpt2-124m-b8-compile", "llama-moe-2b-b4", "llama-1b-b4",
           "llama-1b-b4-compile", "resnet50-b64", "resnet50-b128", "vit-b16-b64")),
    Check("(b) H200 -> H100: H200 traces + spec sheets -> H100 steps", H200_ALL, "h100x1",
          ("gpt2-350m-b8", "llama-150m-b8", "llama-150m-b16", "llama-1b-b2", "llama-1b-b4",
           "llama-moe-2b-b4", "vit-b16-b64", "llama-1b-b4-compile")),
)


def build(calibration: Calibration, folder: Path) -> Path:
    """Write the calibration to ``folder/<name>.json``, as ``phantora-ns3 calibrate`` does."""
    from phantora.cluster.catalogue import lookup_gpu
    from phantora.profiles.calibrate import calibrate
    from phantora.profiles.kineto import read_trace

    path = folder / f"{calibration.name}.json"
    calibrate([read_trace(p) for p in calibration.traces()],
              lookup_gpu(calibration.gpu)).write(path)
    return path


def shortened(case: Case) -> Case:
    """The case's scenario over :data:`SIMULATED_STEPS` steps."""
    workload = dict(case.scenario["workload"])
    workload["args"] = measure_steps.with_steps(list(workload["args"]), SIMULATED_STEPS)
    return replace(case, scenario={**case.scenario, "workload": workload})


def calibrated(case: Case, path: Path) -> Case:
    """The case with ``cluster.calibration`` (an absolute path) and its own output folder."""
    cluster = {**case.scenario["cluster"], "calibration": str(path)}
    return replace(case, name=f"{case.name}-{path.stem}",
                   scenario={**case.scenario, "cluster": cluster})


@dataclass(frozen=True)
class Row:
    run: str
    measured_ms: float
    builtin: Outcome
    calibrated: Outcome
    sources: dict[str, float]
    """Share of the calibrated run's GPU time (host copies left out) per cost source."""


def sources_of(out_dir: Path) -> dict[str, float]:
    coverage = json.loads((out_dir / "summary.json").read_text())["compute_coverage"]
    device = {source: tally["time_ns"] for source, tally in coverage["by_source"].items()
              if source != "host-transfer"}
    total = sum(device.values()) or 1
    return {source: ns / total for source, ns in device.items()}


def table(check: Check, rows: list[Row]) -> list[str]:
    lines = [check.title,
             f"{'run':<34} {'meas ms':>8} {'built-in ms':>11} {'err %':>7} {'calib. ms':>9} "
             f"{'err %':>7}  calibrated / interpolated / roofline / unknown share"]
    errors: dict[str, list[float]] = {"built-in": [], "calibrated": []}
    for row in rows:
        base = error_pct(row.builtin.simulated_ms, row.measured_ms)
        ours = error_pct(row.calibrated.simulated_ms, row.measured_ms)
        for kind, error in (("built-in", base), ("calibrated", ours)):
            if error is not None:
                errors[kind].append(abs(error))
        shares = " / ".join(f"{row.sources.get(s, 0.0):.0%}" for s in (
            "calibrated", "calibrated-interpolated", "calibrated-roofline", "unknown-op"))
        failed = row.calibrated.error or row.builtin.error
        lines.append(f"{row.run:<34} {row.measured_ms:>8.2f} "
                     f"{_num(row.builtin.simulated_ms):>11} {_num(base, '+.1f'):>7} "
                     f"{_num(row.calibrated.simulated_ms):>9} {_num(ours, '+.1f'):>7}  {shares}"
                     + (f"  FAILED: {failed}" if failed else ""))
    for kind, values in errors.items():
        if values:
            lines.append(f"{kind}: mean |error| {statistics.mean(values):.1f}%, max "
                         f"{max(values):.1f}% over {len(values)} cases")
    ours = errors["calibrated"]
    met = len(ours) >= 8 and statistics.mean(ours) <= GOAL_MEAN_PCT
    lines.append(f"goal (calibrated: mean <= {GOAL_MEAN_PCT:.0f}% on >= 8 cases): "
                 f"{'met' if met else 'NOT met'}")
    return lines


def _num(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--only", help="regex on <machine>-<run> (re.search)")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "validate_calibration",
                        help="folder of the calibrations and the simulator outputs")
    parser.add_argument("--no-save", action="store_true",
                        help=f"do not write {RESULT_PATH.relative_to(REPO)}")
    args = parser.parse_args()
    console = Console(width=160)
    cases = {case.name: case for case in validate_accuracy.measured_cases()}
    builtin: dict[str, Outcome] = {}
    """Each case's run on the packaged tables, shared by the checks that predict it."""
    report: list[str] = []
    for check in CHECKS:
        wanted = [run for run in check.runs
                  if not args.only or re.search(args.only, f"{check.machine}-{run}")]
        if not wanted:
            continue
        path = build(check.calibration, args.out / "calibrations")
        console.print(f"{check.title}: calibration {path}", highlight=False)
        rows = []
        for run in wanted:
            case = shortened(cases[f"{check.machine}-{run}"])
            if case.name not in builtin:
                builtin[case.name] = validate_accuracy.simulate(case, args.out, console)
            ours = calibrated(case, path)
            outcome = validate_accuracy.simulate(ours, args.out, console)
            rows.append(Row(run, case.measured_ms, builtin[case.name], outcome,
                            sources_of(args.out / ours.name) if outcome.error is None else {}))
            console.print(f"  {case.name}: measured {case.measured_ms:.2f} ms, built-in "
                          f"{_num(rows[-1].builtin.simulated_ms)} ms, calibrated "
                          f"{_num(outcome.simulated_ms)} ms", highlight=False)
        report += table(check, rows) + [""]
    text = "\n".join(report)
    console.print(text, highlight=False)
    if not args.no_save and not args.only:
        RESULT_PATH.write_text(text + "\n")


if __name__ == "__main__":
    main()
