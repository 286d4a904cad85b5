"""How much a simulated host-bound step moves with the machine that simulates it (issue 14).

Runs the same scenarios under three conditions and prints, per scenario and condition, the
script's median step (its own log, steps 3.., rank 0) and rank 0's host time per step from
``summary.json`` (``ranks[0].host_time.steps``: table-charged + residual, median of steps 3..;
the residual is counted Python work unless the scenario sets ``simulation.host_time:
measured``), then the spread of each over the conditions ((max - min) / median; goal <= 2%):

* ``alone``: nothing else started by this script (other tenants of the machine may still run);
* ``busy``: one busy-looping process per CPU of this machine beside the simulation;
* ``8 ranks``: the scenario's per-rank workload on 8 ranks (``nproc_per_node`` and
  ``gpus_per_host`` set to 8, every rank live: ``simulation.dedup: off``) on this machine's
  CPUs: 4 ranks per core on 2 cores. Data parallelism changes the collectives, so only the
  host time per step is compared for it.

Usages (from the repository root):

  python3 scripts/bench/bench_host_spread.py                      # the default scenarios, 1 run each
  python3 scripts/bench/bench_host_spread.py --repeats 2 --scenarios scenarios/accuracy/h200x2-ci-h100x2-gpt-ddp.yaml
  python3 scripts/bench/bench_host_spread.py --no-ranks8          # skip the 8-rank condition (slowest)
  python3 scripts/bench/bench_host_spread.py --repo ../main        # the same for another checkout
"""

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO  # noqa: E402
from scripts.measure import measure_steps  # noqa: E402

DEFAULT_SCENARIOS = (
    "scenarios/accuracy/h100x1-ci-h100x1-gpt-single.yaml",
    "scenarios/accuracy/h200x2-ci-h100x2-gpt-ddp.yaml",
    "scenarios/accuracy/h200x2-ci-h100x2-gpt-fsdp2.yaml",
)
FIRST_STEP = 3
"""Steps before this one are warm-up (the measurement's rule: median of steps 3..)."""
GOAL_PCT = 2.0


def _spin() -> None:
    while True:
        pass


def with_ranks(spec: dict, ranks: int, folder: Path) -> dict:
    """``spec`` with ``ranks`` ranks on one host; the script path made absolute."""
    spec = json.loads(json.dumps(spec))
    spec["cluster"]["gpus_per_host"] = ranks
    spec["cluster"]["hosts"] = 1
    spec["workload"]["nproc_per_node"] = ranks
    spec["workload"]["script"] = str((folder / spec["workload"]["script"]).resolve())
    return spec


def knows_dedup(repo: Path) -> bool:
    """Whether the checkout's scenarios have ``simulation.dedup`` (rank deduplication)."""
    return "dedup" in (repo / "phantora" / "scenario" / "schema.py").read_text()


def run_once(spec: dict, out: Path, repo: Path) -> tuple[float | None, float | None]:
    """Simulate ``spec`` with the simulator of checkout ``repo``: (median step ms of rank 0's
    log, rank 0's median host ms per step; ``None`` where that checkout reports no split)."""
    scenario = out.with_suffix(".yaml")
    scenario.write_text(yaml.safe_dump(spec))
    proc = subprocess.run([sys.executable, "-m", "phantora.cli", str(scenario), "--out", str(out)],
                          cwd=repo, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        print(f"  failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}", flush=True)
        return None, None
    logs = [p.read_text(errors="replace") for p in sorted((out / "ranks").glob("rank*.log"))]
    step_ms = measure_steps.parse_output(logs, "sim", out.name).median_ms
    rank0 = json.loads((out / "summary.json").read_text())["ranks"][0]
    steps = rank0["host_time"]["steps"] if "host_time" in rank0 else []
    host = [(table + residual) / 1e6 for _, table, residual, *_ in steps[FIRST_STEP - 1:]]
    return step_ms, (statistics.median(host) if host else None)


def spread_pct(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return None
    return (max(values) - min(values)) / statistics.median(values) * 100


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--scenarios", nargs="+", default=list(DEFAULT_SCENARIOS))
    parser.add_argument("--repeats", type=int, default=1, help="runs per condition (median)")
    parser.add_argument("--no-ranks8", action="store_true", help="skip the 8-rank condition")
    parser.add_argument("--out", type=Path, help="keep the runs here (default: a temp folder)")
    parser.add_argument("--repo", type=Path, default=REPO,
                        help="the checkout whose simulator runs (another version, to compare)")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="host_spread_"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in args.scenarios:
        path = Path(path)
        spec = yaml.safe_load(path.read_text())
        ranks = spec["workload"].get("nproc_per_node", spec["cluster"].get("gpus_per_host", 8))
        conditions = {"alone": with_ranks(spec, ranks, path.parent),
                      "busy": with_ranks(spec, ranks, path.parent)}
        if not args.no_ranks8 and ranks > 1:
            conditions["8 ranks"] = with_ranks(spec, 8, path.parent)
            if knows_dedup(args.repo):  # 8 processes on the CPUs, not 2 and 6 mirrors
                conditions["8 ranks"].setdefault("simulation", {})["dedup"] = "off"
        results: dict[str, tuple[float | None, float | None]] = {}
        for condition, cond_spec in conditions.items():
            spinners = []
            if condition == "busy":
                spinners = [multiprocessing.Process(target=_spin, daemon=True)
                            for _ in range(os.cpu_count() or 1)]
                for spinner in spinners:
                    spinner.start()
            try:
                runs = []
                for repeat in range(args.repeats):
                    start = time.perf_counter()
                    out = root / f"{path.stem}-{condition.replace(' ', '')}-{repeat}"
                    runs.append(run_once(cond_spec, out, args.repo))
                    print(f"{path.stem} {condition} #{repeat}: step {runs[-1][0]} ms, host/step "
                          f"{runs[-1][1]} ms ({time.perf_counter() - start:.0f} s)", flush=True)
            finally:
                for spinner in spinners:
                    spinner.kill()
                    spinner.join()
            steps = [r[0] for r in runs if r[0] is not None]
            hosts = [r[1] for r in runs if r[1] is not None]
            results[condition] = (statistics.median(steps) if steps else None,
                                  statistics.median(hosts) if hosts else None)
        rows.append((path.stem, results))
    print()
    print(f"{'scenario':34} {'condition':9} {'step ms':>9} {'host ms/step':>13}")
    worst = 0.0
    for name, results in rows:
        for condition, (step, host) in results.items():
            step_s = f"{step:9.2f}" if step is not None else f"{'-':>9}"
            host_s = f"{host:13.2f}" if host is not None else f"{'-':>13}"
            print(f"{name:34} {condition:9} {step_s} {host_s}")
        step_spread = spread_pct([results[c][0] for c in ("alone", "busy") if c in results])
        host_spread = spread_pct([h for _, h in results.values()])
        for label, value in (("step", step_spread), ("host/step", host_spread)):
            if value is not None:
                worst = max(worst, value)
                print(f"{'':34} spread of {label} over the conditions: {value:.1f}%")
    print(f"\nlargest spread {worst:.1f}% (goal <= {GOAL_PCT:.0f}%): "
          f"{'met' if worst <= GOAL_PCT else 'NOT met'}; runs in {root}")


if __name__ == "__main__":
    main()
