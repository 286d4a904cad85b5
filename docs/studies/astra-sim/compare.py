"""Replay a phantora-ns3 Chakra export in ASTRA-sim 2's analytical backend and compare.

  python docs/studies/astra-sim/compare.py RUN_DIR ET_DIR NETWORK.yml SYSTEM.json \
      --astra-sim BIN [--log-dir DIR]

RUN_DIR is the phantora-ns3 run (``graph/``, ``summary.json``), ET_DIR its ``export-chakra``
output, BIN ``AstraSim_Analytical_Congestion_Unaware`` or ``..._Aware``; SYSTEM.json must have
``"trace-enabled": 1`` (ASTRA-sim then logs each node's issue and callback tick at debug level,
which is how rank 0's collective times are read: its statistics report stops at CPU nodes).
Prints ASTRA-sim's total and "exposed communication" per rank (distinct values), the trace's
longest path with every collective at 0, and per (op, bytes) rank 0's collective time in both.
Documented in docs/studies/astra-sim.md.
"""

import argparse
import glob
import json
import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

from phantora.study.chakra import et_def_pb2 as pb
from phantora.study.chakra.importer import read_nodes

HERE = Path(__file__).parent


def longest_path_without_comm(nodes: list) -> int:
    """ns: every node at its duration (0 -> 1 ns, as ASTRA-sim), every collective at 0."""
    finish: dict[int, int] = {}
    for node in nodes:
        weight = max(node.duration_micros * 1000, 1) if node.type == pb.COMP_NODE else 0
        finish[node.id] = max((finish[d] for d in node.data_deps), default=0) + weight
    return max(finish.values())


def run_astra(args: argparse.Namespace) -> tuple[dict, dict]:
    log = Path(args.log_dir)
    log.mkdir(parents=True, exist_ok=True)
    cmd = [args.astra_sim, f"--workload-configuration={args.et_dir}/trace",
           f"--comm-group-configuration={args.et_dir}/comm_group.json",
           f"--system-configuration={args.system}",
           f"--remote-memory-configuration={HERE / 'no_memory_expansion.json'}",
           f"--network-configuration={args.network}", f"--logging-folder={log}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    ranks = {int(r): (int(t), int(e)) for r, t, e in re.findall(
        r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles", proc.stdout)}
    ticks: dict[int, dict[str, int]] = defaultdict(dict)
    for path in sorted(glob.glob(f"{log}/log*.log"), key=os.path.getmtime):
        for line in open(path):
            m = re.search(r"(issue|callback),sys->id=0, tick=(\d+), node->id=(\d+), .*node->type=7$",
                          line.strip())
            if m:
                ticks[int(m[3])][m[1]] = int(m[2])
    return ranks, ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("et_dir")
    parser.add_argument("network")
    parser.add_argument("system")
    parser.add_argument("--astra-sim", required=True)
    parser.add_argument("--log-dir", default="astra-log")
    args = parser.parse_args()
    summary = json.loads(Path(args.run_dir, "summary.json").read_text())
    nodes = read_nodes(Path(args.et_dir, "trace.0.et"))
    ranks, ticks = run_astra(args)
    print(f"phantora-ns3: simulated {summary['simulated_ns'] / 1e6:.3f} ms; trace's longest path "
          f"with collectives at 0: {longest_path_without_comm(nodes) / 1e6:.3f} ms")
    print("ASTRA-sim total / exposed communication (ms), distinct over "
          f"{len(ranks)} ranks:", sorted({(t / 1e6, e / 1e6) for t, e in ranks.values()}))
    records = [json.loads(line) for line in open(Path(args.run_dir, "graph", "rank0.jsonl"))]
    records = [r for r in records if r["op"] == "collective" and r["kind"] not in ("send", "recv")]
    colls = [n for n in nodes if n.type == pb.COMM_COLL_NODE]
    assert len(records) == len(colls), (len(records), len(colls))
    rows: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
    for record, node in zip(records, colls):
        key = (record["kind"], record["bytes"], f"{record['algorithm']}/{record['protocol']}")
        row = rows[key]
        row[0] += 1
        row[1] += record["end_ns"] - record["start_ns"]
        row[2] += ticks[node.id]["callback"] - ticks[node.id]["issue"]
    print("| op | bytes | ours: algorithm/protocol | count | ours (us) | ASTRA-sim (us) | diff |")
    print("|---|---|---|---|---|---|---|")
    ours_total = astra_total = ours_sim = astra_sim = 0
    for (op, size, algo), (count, ours, astra) in sorted(rows.items()):
        ours_total += ours
        astra_total += astra
        if op != "broadcast":  # ASTRA-sim replays a broadcast's exported duration
            ours_sim += ours
            astra_sim += astra
        print(f"| {op} | {size} | {algo} | {count} | {ours / count / 1e3:.1f} | "
              f"{astra / count / 1e3:.1f} | {100 * (astra - ours) / ours:+.0f}% |")
    print(f"| all collectives | | | | {ours_total / 1e6:.3f} ms | {astra_total / 1e6:.3f} ms | "
          f"{100 * (astra_total - ours_total) / ours_total:+.0f}% |")
    if ours_sim:
        print(f"| all but broadcast | | | | {ours_sim / 1e6:.3f} ms | {astra_sim / 1e6:.3f} ms | "
              f"{100 * (astra_sim - ours_sim) / ours_sim:+.0f}% |")


if __name__ == "__main__":
    main()
