"""`phantora-ns3 diff` on every stored trace: where each simulated step differs from the real
one, in one table.

For each run under ``scripts/data/traces/<machine>/`` with a matching accuracy
scenario (``scenarios/accuracy/<machine>-<run>.yaml``), the scenario's simulated run is taken
from ``out/validate_accuracy/<machine>-<run>/`` (``validate_accuracy.py`` writes it; missing
ones are simulated here) and diffed against the traces. Printed per case:

* GPU time launched per step outside communication (the kernel families), real vs simulated;
* the collectives' transfer time (each real collective's shortest instance over the ranks,
  which waited for no one), real vs simulated, summed over the step's collectives;
* collectives whose count per step differs (a different program, not a different speed), and
  the total time (waiting included) of point-to-point ops and of uneven all-to-alls;
* the largest divergence that is not GPU idle time or a collective's wait.

The profiled step's own length is not compared: the profiler slows the host of each rank by a
different amount (``docs/diff.md``); the unprofiled step times are ``validate_accuracy.py``'s.

  python3 scripts/validate/validate_diff.py            # table into results/validate_diff.txt
  python3 scripts/validate/validate_diff.py --only tp --no-save
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO, SHARED_DATA  # noqa: E402

TRACES = SHARED_DATA / "traces"
ACCURACY = REPO / "scenarios" / "accuracy"
RUNS = REPO / "out" / "validate_accuracy"
OUT = REPO / "out" / "validate_diff"
RESULT_PATH = Path(__file__).resolve().parent / "results" / "validate_diff.txt"
COMMUNICATION, IDLE = "communication", "idle"
P2P = frozenset({"send", "recv", "send_recv"})
"""Point-to-point ops: NCCL runs a group of them as one kernel, which a real trace cannot
always split into sends and receives, so they are compared as one total."""
TOTALLED = {"p2p": P2P, "all_to_allv": frozenset({"all_to_allv"})}
"""Ops compared as one total per step: point-to-point, and all-to-alls with uneven splits
(their sizes follow the routing, which the simulation draws its own way)."""


def cases(only: str | None) -> list[tuple[str, list[Path]]]:
    """(case name, its rank traces) of every stored run with a scenario."""
    found = []
    for folder in sorted(p for p in TRACES.glob("*/*") if p.is_dir()):
        ranks = sorted(folder.glob("rank*.json.gz"), key=lambda p: int(p.name[4:-8]))
        name = folder.name.replace("_", "-", 1)
        if ranks and (ACCURACY / f"{name}.yaml").exists() \
                and (only is None or re.search(only, name)):
            found.append((name, ranks))
    return found


def run_dir(name: str) -> Path:
    """The case's simulated run: ``validate_accuracy.py``'s, else one simulated here earlier,
    else simulated now."""
    for existing in (RUNS / name, OUT / "runs" / name):
        if (existing / "summary.json").exists():
            return existing
    target = OUT / "runs" / name
    subprocess.run(["phantora-ns3", str(ACCURACY / f"{name}.yaml"), "--out", str(target)],
                   check=True, capture_output=True, cwd=REPO)
    return target


def diff(name: str, traces: list[Path]) -> dict[str, Any]:
    """``diff.json``'s mean over ranks for one case."""
    out = OUT / name
    subprocess.run(["phantora-ns3", "diff", *map(str, traces), str(run_dir(name)), "--out",
                    str(out)], check=True, capture_output=True, cwd=REPO)
    return json.loads((out / "diff.json").read_text())["mean"]


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.2f}"


def _pct(real: float, sim: float) -> str:
    return f"{100 * (sim - real) / real:+.0f}%" if real else "-"


def row(name: str, mean: dict[str, Any]) -> str:
    """One case's line of the table."""
    families = [f for f in mean["families"] if f["family"] not in (COMMUNICATION, IDLE)]
    gpu_real = sum(f["real_ns"] for f in families)
    gpu_sim = sum(f["sim_ns"] for f in families)
    matched = [c for c in mean["collectives"] if c["real_count"] and c["sim_count"]
               and c["real_mean_transfer_ns"] is not None]
    transfer_real = sum(c["real_count"] * c["real_mean_transfer_ns"] for c in matched)
    transfer_sim = sum(c["real_count"] * c["sim_mean_transfer_ns"] for c in matched)
    totalled = frozenset().union(*TOTALLED.values())
    mismatched = [f"{c['op']} {c['bytes']}B {c['real_count']:g}/{c['sim_count']:g}"
                  for c in mean["collectives"]
                  if c["real_count"] != c["sim_count"] and c["op"] not in totalled]
    for label, ops in TOTALLED.items():
        rows = [c for c in mean["collectives"] if c["op"] in ops]
        if rows:
            mismatched.append(f"{label} ms " + "/".join(
                _ms(sum(c[f"{side}_total_ns"] for c in rows)) for side in ("real", "sim")))
    kernel = next((d for d in mean["divergences"]
                   if d["family"] not in (COMMUNICATION, IDLE)), None)
    largest = (f"{d['bucket']} {_ms(d['real_ns'])}/{_ms(d['sim_ns'])}"
               if (d := kernel) else "-")
    return (f"{name:<40} {_ms(gpu_real):>8} {_ms(gpu_sim):>8} {_pct(gpu_real, gpu_sim):>6} "
            f"{_ms(transfer_real):>8} {_ms(transfer_sim):>8} {_pct(transfer_real, transfer_sim):>6}"
            f"  {'; '.join(mismatched) or '-':<36} {largest}")


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--only", help="regex on the case name")
    parser.add_argument("--no-save", action="store_true", help="print only")
    args = parser.parse_args()
    lines = [f"{'case':<40} {'GPU real':>8} {'sim':>8} {'err':>6} {'xfer real':>8} {'sim':>8} "
             f"{'err':>6}  {'collectives real/sim count':<36} largest kernel divergence "
             "real/sim ms",
             "(GPU: kernel time per step outside communication, ms; xfer: collectives' transfer "
             "time per step, ms, over the collectives both sides have)"]
    for name, traces in cases(args.only):
        try:
            lines.append(row(name, diff(name, traces)))
        except subprocess.CalledProcessError as exc:
            lines.append(f"{name:<40} failed: {(exc.stderr or b'').decode()[-200:].strip()}")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if not args.no_save:
        RESULT_PATH.write_text(common.machine_header() + "\n" + text)


if __name__ == "__main__":
    main()
