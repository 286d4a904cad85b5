"""Simulated vs real traffic of the pipeline-parallel and expert-parallel examples (issue 13).

The ground truth is ``scripts/measure/record_traffic.py``'s record of the same scenario run for real
under torchrun on a CPU (gloo), in bf16 as on GPUs. The simulator runs the scenario and its
``trace.json`` lists every collective and send/recv per rank with its bytes. Compared per
rank:

- every send/recv, all_to_all of even splits, all-reduce and broadcast: the multiset of
  (op, bytes) must be the same (a gloo barrier counts as the 4-byte all-reduce that NCCL's
  barrier is);
- all_to_all with split sizes (MoE tokens): the count must be the same per rank; their size
  (the simulator reports the largest row: the most bytes one rank sends) is shown call by
  call but not judged, since it follows the routing (the real router vs
  ``simulation.routing``): it is equal where every rank sends all its routed tokens (the
  dispatch), not where ranks send back what they received.

Usages (from the repository root):
  python3 scripts/validate/validate_traffic.py                     # both recorded scenarios
  python3 scripts/validate/validate_traffic.py --only moe --no-save
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO, SHARED_DATA  # noqa: E402

RECORDINGS = SHARED_DATA / "traffic"
RESULT_PATH = Path(__file__).resolve().parent / "results" / "validate_traffic.txt"
CASES = ("h200x2-llama-pp-1f1b", "h200x2-moe-ep")
"""Scenarios with a recorded ``scripts/data/traffic/traffic_<name>.json``."""
VARIABLE = "all_to_allv"
RECORDED_OP = {"send": "send", "recv_": "recv", "allreduce_": "all_reduce",
               "broadcast_": "broadcast", "barrier": "all_reduce"}
"""The simulator's name of a recorded c10d op (all_to_all apart)."""
BARRIER_BYTES = 4


def recorded_events(rank: dict[str, Any]) -> list[tuple[str, int]]:
    """(op, bytes) of one recorded rank in the simulator's names."""
    events = []
    for event in rank["events"]:
        op = event["op"].split(".", 1)[1]
        if "input_split_sizes" in event:
            name = VARIABLE if event.get("splits_given") else "all_to_all"
            events.append((name, event["bytes_sent"]))
        elif op == "barrier":
            events.append((RECORDED_OP[op], BARRIER_BYTES))
        else:
            events.append((RECORDED_OP.get(op, op), event["bytes"]))
    return events


def simulated_events(trace_path: Path, world: int) -> list[list[tuple[str, int]]]:
    """(op, bytes) per rank of the simulator's trace, in time order."""
    events = json.loads(trace_path.read_text())["traceEvents"]
    per_rank: list[list[tuple[str, int]]] = [[] for _ in range(world)]
    for event in sorted((e for e in events if e.get("cat") == "collective"),
                        key=lambda e: e["ts"]):
        per_rank[event["pid"]].append((event["name"], event["args"]["bytes"]))
    return per_rank


def compare(recorded: list[list[tuple[str, int]]],
            simulated: list[list[tuple[str, int]]]) -> tuple[list[str], int]:
    """Table lines and the number of mismatches."""
    lines, mismatches = [], 0
    for rank, (real, sim) in enumerate(zip(recorded, simulated, strict=True)):
        real_fixed = Counter(e for e in real if e[0] != VARIABLE)
        sim_fixed = Counter(e for e in sim if e[0] != VARIABLE)
        for op, size in sorted(set(real_fixed) | set(sim_fixed)):
            ok = real_fixed[(op, size)] == sim_fixed[(op, size)]
            mismatches += not ok
            lines.append(f"{rank:>4} {op:<12} {size:>12} {real_fixed[(op, size)]:>9} "
                         f"{sim_fixed[(op, size)]:>9}  {'ok' if ok else 'MISMATCH'}")
        real_var = [size for op, size in real if op == VARIABLE]
        sim_var = [size for op, size in sim if op == VARIABLE]
        if real_var or sim_var:
            ok = len(real_var) == len(sim_var)
            mismatches += not ok
            lines.append(f"{rank:>4} {VARIABLE:<12} {'(count)':>12} {len(real_var):>9} "
                         f"{len(sim_var):>9}  {'ok' if ok else 'MISMATCH'}")
    lines += _largest_rows(recorded, simulated)
    return lines, mismatches


def _largest_rows(recorded: list[list[tuple[str, int]]],
                  simulated: list[list[tuple[str, int]]]) -> list[str]:
    """all_to_allv's size as the simulator reports it, the largest row (bytes one rank
    sends), call by call: it follows the routing (the real router vs
    ``simulation.routing``), so it is shown, not judged."""
    real = [[size for op, size in rank if op == VARIABLE] for rank in recorded]
    sim = [size for op, size in simulated[0] if op == VARIABLE]
    if not sim or len({len(calls) for calls in real}) != 1 or len(real[0]) != len(sim):
        return []
    real_rows = [max(sizes) for sizes in zip(*real, strict=True)]
    same = sum(a == b for a, b in zip(real_rows, sim, strict=True))
    return [f"{'all':>4} {VARIABLE:<12} {'largest row':>12} {sum(real_rows):>9} {sum(sim):>9}"
            f"  (info: summed over {len(sim)} calls; {same} calls equal, the rest follow "
            f"the routing)"]


def simulate(name: str, out_root: Path) -> Path:
    """Run the scenario on the simulator; its output folder."""
    from phantora.run import run_scenario
    from phantora.scenario import parse_scenario

    path = REPO / "scenarios" / f"{name}.yaml"
    out = out_root / name
    run_scenario(parse_scenario(yaml.safe_load(path.read_text()), str(path)), out,
                 Console(quiet=True))
    return out


def validate(name: str, out_root: Path) -> tuple[str, int]:
    """The comparison table of one case and its mismatch count."""
    recording = json.loads((RECORDINGS / f"traffic_{name}.json").read_text())
    recorded = [recorded_events(rank) for rank in recording["ranks"]]
    simulated = simulated_events(simulate(name, out_root) / "trace.json",
                                 recording["world_size"])
    lines, mismatches = compare(recorded, simulated)
    header = (f"{name}: recorded {recording['script']} {' '.join(recording['args'])} "
              f"({recording['backend']}, torch {recording['torch']}) vs simulated\n"
              f"rank op                  bytes  recorded simulated")
    verdict = "all match" if not mismatches else f"{mismatches} MISMATCH(ES)"
    return "\n".join([header, *lines, f"-> {verdict}"]), mismatches


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--only", help="regex on the scenario name")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "validate_traffic",
                        help="simulator output folders, one per case")
    parser.add_argument("--no-save", action="store_true",
                        help=f"do not write {RESULT_PATH.relative_to(REPO)}")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.only or re.search(args.only, c)]
    tables, failed = [], 0
    for name in cases:
        table, mismatches = validate(name, args.out)
        print(table + "\n", flush=True)
        tables.append(table)
        failed += mismatches > 0
    if not (args.no_save or args.only):
        RESULT_PATH.write_text("\n\n".join(tables) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
