"""Replay against live: does a recorded run, replayed on its own scenario, give the live
estimate, and how much faster is it?

For each scenario: run it live (``phantora-ns3 SCENARIO --out DIR``, recording ``DIR/graph``),
then replay the recording on the same scenario (``phantora-ns3 replay DIR SCENARIO``), each
in a fresh process. Prints the simulated time of both, their difference (goal: within 5%), and
the wall seconds of both (``summary.json`` ``wall_seconds.total``: from loading the scenario to
writing the summary, ns-3's JIT compile included; the machine's other tenants make wall time
noisy). ``--other KEY=VALUE`` also replays the last scenario on a variant of itself (a dotted
key, YAML value), to show what the replay is for.

Usage:
  python scripts/bench/bench_replay.py                                   # the two bundled examples
  python scripts/bench/bench_replay.py scenarios/h100x2-gpt-ddp.yaml
  python scripts/bench/bench_replay.py scenarios/h100x2-gpt-ddp.yaml \
      scenarios/2x4-h100-rail-gpt-ddp.yaml --other cluster.network.nic_bandwidth=100Gbps
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from phantora.study.sweep import set_key  # noqa: E402
from scripts import common  # noqa: E402
from scripts.common import REPO as ROOT  # noqa: E402
DEFAULT = ("scenarios/h100x2-gpt-ddp.yaml", "scenarios/2x4-h100-rail-gpt-ddp.yaml")


def simulate(args: list[str]) -> dict:
    out = Path(args[args.index("--out") + 1])
    done = subprocess.run([sys.executable, "-m", "phantora.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"phantora-ns3 {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("scenarios", nargs="*", default=DEFAULT)
    parser.add_argument("--other", default=None, help="KEY=VALUE for an extra replay")
    args = parser.parse_args()
    table = Table(title="replay vs live")
    for column in ("scenario", "run", "simulated (ms)", "vs live", "wall (s)"):
        table.add_column(column, justify="left" if column in ("scenario", "run") else "right")
    with tempfile.TemporaryDirectory() as work:
        for scenario in args.scenarios:
            name = Path(scenario).stem
            live_dir = Path(work) / name
            live = simulate([scenario, "--out", str(live_dir)])
            runs = [("live", live), ("replay", simulate(
                ["replay", str(live_dir), scenario, "--out", str(live_dir) + "-replay"]))]
            if args.other and scenario == args.scenarios[-1]:
                key, value = args.other.split("=", 1)
                data = yaml.safe_load((ROOT / scenario).read_text())
                set_key(data, key, yaml.safe_load(value))
                variant = (ROOT / scenario).parent / f".bench-replay-{name}.yaml"
                variant.write_text(yaml.safe_dump(data))
                try:
                    runs.append((f"replay {args.other}", simulate(
                        ["replay", str(live_dir), str(variant), "--out",
                         str(live_dir) + "-other"])))
                finally:
                    variant.unlink()
            for label, summary in runs:
                diff = 100.0 * (summary["simulated_ns"] - live["simulated_ns"]) / live[
                    "simulated_ns"]
                table.add_row(name, label, f"{summary['simulated_ns'] / 1e6:.3f}",
                              f"{diff:+.3f}%", f"{summary['wall_seconds']['total']:.1f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
