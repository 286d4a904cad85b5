"""Speed benchmark of the network core: whole `phantora-ns3` runs, process start included.

Runs each bench scenario (scenarios/bench/allreduce-{16,64,128}gpu.yaml: 1 GiB all_reduce on
8-GPU H100 hosts, rail-optimized 400 Gbps fabric) on the packet-level ns-3 backend with each
transport (roce: PFC + DCQCN, simai preset; dctcp) and on the fluid flow backend, each in a
fresh process, and prints wall seconds, simulated busbw, ns-3 events, packets and packet-hops
(every packet, acks and PFC frames included, sent over a link), packet-hops per second of
simulation CPU (one process: per core), and peak RSS. Goals (issue 17): 64 GPUs on ns-3 in
<= 30 s wall, 128 GPUs in <= 60 s, >= 1.5 M packet-hops/s per core.

Usage:
  1. python scripts/bench/bench_network.py                       # all sizes, roce, dctcp and flow
  2. python scripts/bench/bench_network.py --gpus 64 --backend roce
  3. python scripts/bench/bench_network.py --export-result bench.json
  4. python scripts/bench/bench_network.py --import-result bench.json   # reprint a saved run
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO as ROOT  # noqa: E402

BENCH = ROOT / "scenarios" / "bench"


BACKENDS = ("roce", "dctcp", "flow")
"""ns-3 with each transport, and the fluid model."""


def run_one(gpus: int, backend: str, work: Path) -> dict[str, object]:
    """Run one bench scenario in a fresh process; return what it measured."""
    scenario = yaml.safe_load((BENCH / f"allreduce-{gpus}gpu.yaml").read_text())
    network = scenario["cluster"]["network"]
    network["backend"] = "flow" if backend == "flow" else "ns3"
    if backend != "flow":
        network["transport"] = backend
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
    hops = int(extra.get("inter.packet_hops", 0))
    simulate_s = summary["wall_seconds"]["total"] - summary["wall_seconds"]["setup"]
    ns3_cpu_s = float(extra.get("inter.run_cpu_s", 0.0))
    return {
        "gpus": gpus, "backend": backend, "wall_s": round(wall, 2),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
        "time_us": result["time_us"], "busbw_gbs": result["busbw_gbs"], "flows": result["flows"],
        "events": events, "events_per_s": round(events / simulate_s) if events else 0,
        "packets": int(extra.get("inter.data_packets", 0)),
        "packet_hops": hops,
        "hops_per_cpu_s": round(hops / ns3_cpu_s) if ns3_cpu_s else 0,
        "drops": int(extra.get("inter.drops", 0)),
        "pause_frames": int(extra.get("inter.pfc_pause_frames", 0)),
        "ecn_marks": int(extra.get("inter.ecn_marks", 0)),
        "peak_rss_mb": round(summary["peak_rss_bytes"] / 2**20),
    }


def print_table(rows: list[dict[str, object]], header: str) -> None:
    table = Table(title="phantora-ns3 network benchmark: 1 GiB all_reduce, 8-GPU H100 hosts, "
                        "rail-optimized 400 Gbps")
    columns = ["gpus", "backend", "wall_s", "cpu_s", "time_us", "busbw_gbs", "flows", "events",
               "events_per_s", "packets", "packet_hops", "hops_per_cpu_s", "drops",
               "pause_frames", "ecn_marks", "peak_rss_mb"]
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*(f"{row[c]:.1f}" if isinstance(row[c], float) else str(row[c])
                        for c in columns))
    console = Console(width=200)  # full rows even when piped to a file
    console.print(header)
    console.print(table)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--gpus", type=int, nargs="*", default=[16, 64, 128],
                        choices=[16, 64, 128])
    parser.add_argument("--backend", nargs="*", default=list(BACKENDS), choices=BACKENDS)
    common.add_result_flags(parser)
    args = parser.parse_args()
    if saved := common.imported_result(args):
        print_table(saved["rows"], saved["header"])
        return
    header = common.machine_header(load=True)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for gpus in args.gpus:
            for backend in args.backend:
                rows.append(run_one(gpus, backend, Path(work)))
                rows[-1]["load_avg"] = round(os.getloadavg()[0], 2)
                print(json.dumps(rows[-1]), flush=True)
    print_table(rows, header)
    common.export_result(args, header, rows)


if __name__ == "__main__":
    main()
