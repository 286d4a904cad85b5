"""Whole training steps at packet level: full ns-3 against rail mirroring, same recording.

Records a training script once (a live run on the flow backend, a few seconds to minutes),
then replays the recording at packet level (ns-3, RoCE or ``--transport dctcp``) on each
fabric and each ``cluster.network.symmetry`` setting, each replay in a fresh process: off
simulates every rail (full packet level, the reference), auto mirrors rails with identical
flows (exact), approximate also mirrors rails whose flow sizes differ by up to 0.1% and
simulates each rail's rings on two hosts. It prints, per run, the wall and CPU seconds (all
processes; the host is shared, so CPU is the steadier measure), the ns-3 part of it, peak
RSS, ns-3 events, packet-hops per second of ns-3 CPU, the steady step, the fabric's counters
(data packets, ECN marks, PFC pause frames, CNPs, rate cuts, drops), what mirroring did
(rails simulated, restarts, fallback), and each fast run's difference to full on its fabric.
A mirrored run's counters are its simulated ones scaled to every rail and host.

Fabrics: rail-optimized (rings stay on their rail), the same with host 3's NICs at half rate
(every rail alike: mirrored, but no two-host rings), and a 4:1 oversubscribed leaf-spine with
2 hosts per leaf (rings cross spines: ECN marks and DCQCN cuts), which has no rails, so
mirroring falls back to full there.

Default workload: GPT-2 124M, FSDP2 over 128 H100s (16 hosts of 8), 100 Gbps NICs, 2 steps
(scenarios/studies/gpt2-124m-fsdp2-128xh100-fabrics.yaml without its sweep). ``--scale``
takes the Llama 3 8B scenario of scenarios/scale/ instead, ``--hosts`` resizes either.

Usage:
  1. python scripts/bench/bench_packet_scale.py                         # 128 GPUs, both fabrics
  2. python scripts/bench/bench_packet_scale.py --fabric rail --symmetry auto off
  3. python scripts/bench/bench_packet_scale.py --scale --hosts 128 --symmetry approximate
  4. python scripts/bench/bench_packet_scale.py --export-result packet_scale.json
  5. python scripts/bench/bench_packet_scale.py --import-result packet_scale.json
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO as ROOT  # noqa: E402

STUDY = ROOT / "scenarios" / "studies" / "gpt2-124m-fsdp2-128xh100-fabrics.yaml"
SCALE = ROOT / "scenarios" / "scale" / "h100-1024-llama3-8b-fsdp2.yaml"
FABRICS: dict[str, dict[str, Any]] = {
    "rail": {"topology": "rail-optimized"},
    "rail-slow-host": {"topology": "rail-optimized"},
    "leaf-spine-4:1": {"topology": "leaf-spine", "oversubscription": 4, "hosts_per_leaf": 2},
}
FAULTS: dict[str, list[dict[str, Any]]] = {
    "rail-slow-host": [{"kind": "nic_degrade", "hosts": [3], "factor": 0.5}],
}
"""Faults of a fabric: host 3's NICs at half rate congest every rail alike."""
SYMMETRY = ("off", "auto", "approximate")
COUNTERS = ("data_packets", "ecn_marks", "pfc_pause_frames", "cnps", "rate_cuts", "drops")
"""Fabric counters compared between full and fast."""


def base_scenario(scale: bool, hosts: int | None) -> dict[str, Any]:
    """The workload's scenario without a sweep, its script path absolute, on the flow
    backend (the recording run)."""
    source = SCALE if scale else STUDY
    scenario = yaml.safe_load(source.read_text())
    scenario.pop("sweep", None)
    workload = scenario["workload"]
    workload["script"] = str((source.parent / workload["script"]).resolve())
    if hosts is not None:
        scenario["cluster"]["hosts"] = hosts
    scenario["cluster"]["network"]["backend"] = "flow"
    return scenario


def run_cli(argv: list[str], out: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """``phantora-ns3 argv`` in a fresh process: its summary, its wall and CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "phantora.cli", *argv, "--out", str(out)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"phantora-ns3 {' '.join(argv)} failed:\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-3000:]}")
    cost = {"wall_s": round(wall, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)}
    return json.loads((out / "summary.json").read_text()), cost


def replay_row(recording: Path, scenario: dict[str, Any], fabric: str, symmetry: str,
               transport: str, work: Path) -> dict[str, Any]:
    """Replay ``recording`` at packet level on ``fabric`` with ``symmetry``; one table row."""
    network = scenario["cluster"]["network"]
    network.update(backend="ns3", transport=transport, symmetry=symmetry, **FABRICS[fabric])
    if transport != "roce":
        network.pop("roce", None)
    for key in ("oversubscription", "hosts_per_leaf"):
        if key not in FABRICS[fabric]:
            network.pop(key, None)
    scenario["faults"] = FAULTS.get(fabric, [])
    path = work / f"{fabric.replace(':', '-')}-{transport}-{symmetry}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    summary, cost = run_cli(["replay", str(recording), str(path)], work / path.stem)
    gpus = scenario["cluster"]["hosts"] * scenario["cluster"]["gpus_per_host"]
    return summary_row(summary, cost, gpus, f"{fabric} {transport}", symmetry)


def summary_row(summary: dict[str, Any], cost: dict[str, float], gpus: int, fabric: str,
                symmetry: str) -> dict[str, Any]:
    """A table row from a run's ``summary.json`` and its :func:`run_cli` cost."""
    extra = {key.removeprefix("inter."): value
             for key, value in summary["network"]["extra"].items() if key.startswith("inter.")}
    ns3_cpu_s = float(extra.get("run_cpu_s", 0.0))
    hops = int(extra.get("packet_hops_simulated", extra.get("packet_hops", 0)))
    return {
        "gpus": gpus, "fabric": fabric, "symmetry": symmetry, **cost,
        "ns3_cpu_s": round(ns3_cpu_s, 1), "peak_rss_mb": round(summary["peak_rss_bytes"] / 2**20),
        "step_ms": round(summary["attribution"]["steady"]["step_ns"] / 1e6, 4),
        "events": int(extra.get("events", 0)),
        "hops_per_cpu_s": round(hops / ns3_cpu_s) if ns3_cpu_s else 0,
        **{counter: int(extra.get(counter, 0)) for counter in COUNTERS},
        "rails_simulated": f"{extra.get('symmetry.rails_simulated', '-')}"
                           f"/{extra.get('symmetry.rails', '-')}",
        "restarts": extra.get("symmetry.restarts", 0),
        "fallback": str(extra.get("symmetry.fallback", "")).split(":")[0][:24],
    }


def add_differences(rows: list[dict[str, Any]]) -> None:
    """Each fast row's step and counters against the full (``off``) row of its fabric."""
    full = {(row["gpus"], row["fabric"]): row for row in rows if row["symmetry"] == "off"}
    for row in rows:
        reference = full.get((row["gpus"], row["fabric"]))
        if reference is None or row is reference:
            continue
        row["cpu_speedup"] = round(reference["cpu_s"] / row["cpu_s"], 2)
        row["step_diff_%"] = round(100 * (row["step_ms"] / reference["step_ms"] - 1), 4)
        row["worst_counter_diff_%"] = round(max(
            (100 * abs(row[c] - reference[c]) / reference[c] for c in COUNTERS if reference[c]),
            default=0.0), 2)


def print_table(rows: list[dict[str, Any]], header: str) -> None:
    table = Table(title="phantora-ns3: a training step at packet level, full (symmetry off) "
                        "against rail mirroring")
    columns = ["gpus", "fabric", "symmetry", "wall_s", "cpu_s", "ns3_cpu_s", "peak_rss_mb", "step_ms",
               "events", "hops_per_cpu_s", *COUNTERS, "rails_simulated", "restarts",
               "cpu_speedup", "step_diff_%", "worst_counter_diff_%", "fallback"]
    for column in columns:
        table.add_column(column, justify="left" if column == "fallback" else "right")
    for row in rows:
        table.add_row(*(str(row.get(column, "")) for column in columns))
    console = Console(width=320)  # full rows even when piped to a file
    console.print(header)
    console.print(table)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--fabric", nargs="*", default=list(FABRICS), choices=list(FABRICS))
    parser.add_argument("--symmetry", nargs="*", default=list(SYMMETRY), choices=SYMMETRY)
    parser.add_argument("--transport", default="roce", choices=["roce", "dctcp"])
    parser.add_argument("--scale", action="store_true",
                        help="Llama 3 8B FSDP2 (scenarios/scale/) instead of GPT-2 124M")
    parser.add_argument("--hosts", type=int, help="hosts of 8 GPUs (default: the scenario's)")
    parser.add_argument("--recording", type=Path,
                        help="replay this recorded run instead of recording one")
    common.add_result_flags(parser)
    args = parser.parse_args()
    if saved := common.imported_result(args):
        print_table(saved["rows"], saved["header"])
        return
    header = common.machine_header(load=True)
    scenario = base_scenario(args.scale, args.hosts)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        recording = args.recording
        if recording is None:
            path = work / "record.yaml"
            path.write_text(yaml.safe_dump(scenario))
            recording = work / "record"
            _, cost = run_cli([str(path)], recording)
            print(f"recorded on the flow backend in {cost['wall_s']} s", flush=True)
        for fabric in args.fabric:
            for symmetry in args.symmetry:
                rows.append(replay_row(recording, json.loads(json.dumps(scenario)), fabric,
                                       symmetry, args.transport, work))
                rows[-1]["load_avg"] = round(os.getloadavg()[0], 2)
                print(json.dumps(rows[-1]), flush=True)
    add_differences(rows)
    print_table(rows, header)
    common.export_result(args, header, rows)


if __name__ == "__main__":
    main()
