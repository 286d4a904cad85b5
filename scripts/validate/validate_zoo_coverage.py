"""How much of each zoo model's GPU time the kernel tables cost, on a simulated H100 and H200.

Every model of ``scenarios/examples/zoo_train.py`` at its full size (the size its real steps
were measured at) runs for two steps on one simulated GPU of each kind; the table gives, from
each run's ``summary.json`` (``compute_coverage``), the share of GPU time from measured or
interpolated table rows of the GPU itself, from the H100's rows moved to the GPU by the spec
sheets (``moved-from-reference``: ops the H200 table lacks), from the fitted roofline (the
fallback: the issue's bound is 3%) and from host copies (the model's first ``.to("cuda")``), and
the op the fallback costs most.

  python3 scripts/validate/validate_zoo_coverage.py            # ~10 minutes on 2 cores
  python3 scripts/validate/validate_zoo_coverage.py --models hf-llama --gpus h200 --no-save
"""

import json
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402

ZOO_SCRIPT = common.REPO / "scenarios" / "examples" / "zoo_train.py"
RESULT_PATH = Path(__file__).resolve().parent / "results" / "validate_zoo_coverage.txt"
MAX_FALLBACK_PCT = 3.0


def simulate(model: str, gpu: str, out: Path) -> dict:
    """The run's ``compute_coverage``."""
    scenario = {"name": f"zoo-{model}-{gpu}",
                "cluster": {"gpu": gpu, "hosts": 1, "gpus_per_host": 1},
                "workload": {"script": str(ZOO_SCRIPT), "args": ["--model", model, "--steps", "2"],
                             "nproc_per_node": 1, "env": {"OMP_NUM_THREADS": "1"}}}
    path = out / f"{scenario['name']}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    run_dir = out / scenario["name"]
    subprocess.run([sys.executable, "-m", "phantora.cli", str(path), "--out", str(run_dir)],
                   check=True, capture_output=True)
    return json.loads((run_dir / "summary.json").read_text())["compute_coverage"]


def row(model: str, gpu: str, coverage: dict) -> str:
    sources = coverage["by_source"]
    tables = 100 * coverage["from_tables_share"]
    fallback = 100 * coverage["fallback_share"]
    copies = 100 * sources.get("host-transfer", {}).get("share", 0.0)
    moved = 100 * sources.get("moved-from-reference", {}).get("share", 0.0)
    by_op = coverage.get("fallback_by_op") or {}
    top = max(by_op.items(), key=lambda kv: kv[1], default=None)
    top_text = f"{top[0]} {100 * top[1]:.1f}%" if top else "-"
    flag = "" if fallback <= MAX_FALLBACK_PCT else f"  > {MAX_FALLBACK_PCT:.0f}%"
    return (f"| {model} | {gpu.upper()} | {tables:.1f}% | {moved:.1f}% | {fallback:.1f}%{flag} "
            f"| {copies:.1f}% | {top_text} |")


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--models", default="", help="comma-separated (default: all)")
    parser.add_argument("--gpus", default="h100,h200")
    parser.add_argument("--out", type=Path, default=common.REPO / "out" / "zoo_coverage")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    models = [m for m in args.models.split(",") if m] or sorted(
        common.load_example("zoo_train").ZOO)
    lines = ["| model | GPU | tables | moved from H100 | fallback | host copies "
             "| largest fallback op |", "|---|---|---|---|---|---|---|"]
    for model in models:
        for gpu in args.gpus.split(","):
            lines.append(row(model, gpu, simulate(model, gpu, args.out)))
            print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    if not args.no_save:
        RESULT_PATH.write_text(text + "\n")


if __name__ == "__main__":
    main()
