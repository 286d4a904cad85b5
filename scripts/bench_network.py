"""Speed benchmark of the network core: whole `phantora-ns3` runs, process start included.

Runs each bench scenario (scenarios/bench/allreduce-{16,64,128}gpu.yaml: 1 GiB all_reduce on
8-GPU H100 hosts, rail-optimized 400 Gbps fabric) with the packet-level ns-3 backend and with
the fluid flow backend, each in a fresh process, and prints wall seconds, simulated busbw,
ns-3 events and packets, events/s and peak RSS. Goal: 64 GPUs on ns-3 in <= 60 s wall.

Usage:
  1. python scripts/bench_network.py                       # all three sizes, both backends
  2. python scripts/bench_network.py --gpus 64 --backend ns3
  3. python scripts/bench_network.py --export-result bench.json
  4. python scripts/bench_network.py --import-result bench.json   # reprint a saved run
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "scenarios" / "bench"


def run_one(gpus: int, backend: str, work: Path) -> dict[str, object]:
    """Run one bench scenario in a fresh process; return what it measured."""
    scenario = yaml.safe_load((BENCH / f"allreduce-{gpus}gpu.yaml").read_text())
    scenario["cluster"]["network"]["backend"] = backend
    path = work / f"allreduce-{gpus}gpu-{backend}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    out = work / path.stem
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "phantora.cli", str(path), "--out", str(out)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{path.name} failed:\n{proc.stdout}\n{proc.stderr}")
    summary = json.loads((out / "summary.json").read_text())
    result = summary["collectives"][0]
    extra = summary["network"]["extra"]
    events = int(extra.get("inter.events", 0))
    simulate_s = summary["wall_seconds"]["total"] - summary["wall_seconds"]["setup"]
    return {
        "gpus": gpus, "backend": backend, "wall_s": round(wall, 2),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
        "time_us": result["time_us"], "busbw_gbs": result["busbw_gbs"], "flows": result["flows"],
        "events": events, "events_per_s": round(events / simulate_s) if events else 0,
        "packets": int(extra.get("inter.data_packets", 0)),
        "packet_hops": int(extra.get("inter.packet_hops", 0)),
        "peak_rss_mb": round(summary["peak_rss_bytes"] / 2**20),
    }


def print_table(rows: list[dict[str, object]], header: str) -> None:
    table = Table(title="phantora-ns3 network benchmark: 1 GiB all_reduce, 8-GPU H100 hosts, "
                        "rail-optimized 400 Gbps")
    columns = ["gpus", "backend", "wall_s", "cpu_s", "time_us", "busbw_gbs", "flows", "events",
               "events_per_s", "packets", "packet_hops", "peak_rss_mb"]
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*(f"{row[c]:.1f}" if isinstance(row[c], float) else str(row[c])
                        for c in columns))
    console = Console(width=200)  # full rows even when piped to a file
    console.print(header)
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="*", default=[16, 64, 128],
                        choices=[16, 64, 128])
    parser.add_argument("--backend", nargs="*", default=["ns3", "flow"], choices=["ns3", "flow"])
    parser.add_argument("--export-result", type=Path)
    parser.add_argument("--import-result", type=Path)
    args = parser.parse_args()
    if args.import_result:
        saved = json.loads(args.import_result.read_text())
        print_table(saved["rows"], saved["header"])
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    header = (f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} "
              f"cores, Python {platform.python_version()}; commit {commit}")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for gpus in args.gpus:
            for backend in args.backend:
                rows.append(run_one(gpus, backend, Path(work)))
                print(json.dumps(rows[-1]), flush=True)
    print_table(rows, header)
    if args.export_result:
        args.export_result.write_text(json.dumps({"header": header, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
