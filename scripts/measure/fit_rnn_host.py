"""Fit the host cost of a cuDNN recurrent call (``intercept.host_time.cudnn_rnn_host``) on the
records of ``scripts/measure/measure_rnn_host.py``.

cuDNN enqueues kernels, events and stream waits per time step and layer, so the host time of
one ``_cudnn_rnn`` or ``_cudnn_rnn_backward`` grows with ``seq x layers x directions`` (its
*layer-steps*), except where it runs the whole sequence without per-step host work
(``intercept.host_time.cudnn_rnn_host.enqueues_per_step``: a one-layer, one-direction half-precision
LSTM; its host time stays flat in sequence length). Each row is first put on the reference host: its wall time times the reference's
``torch_ops`` probe component over the row's own probe (a record without per-row probes
interpolates between its first and last, in the order the rows ran). Then per pass, pooled over
cells and dtypes, a relative least-squares fit of ``call_ns + layer_step_ns x layer-steps``.
The check rows (``"check": true``: the zoo's LSTM, width 1024) are printed against the fit, not
fitted on.

    python3 scripts/measure/fit_rnn_host.py scripts/measure/data/rnn_host/*.json \\
        --write hwmodel/measured/data/cudnn_rnn_host.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402

from hwmodel.measured.host_references import references  # noqa: E402
from intercept.host_time.cudnn_rnn_host import layer_steps  # noqa: E402

REFERENCE = "h100-host"
PASSES = ("fwd", "bwd")


def row_steps(row: dict[str, Any]) -> int:
    return layer_steps(row["cell"], row["dtype"], row["seq"], row["layers"], row["directions"])


def reference_rows(record: dict[str, Any], reference_ns: int) -> list[dict[str, Any]]:
    """The record's rows that did not fill the launch queue, each with ``reference_ns``: its host
    time on the reference host."""
    rows = record["rows"]
    first, last = record["probe_before"]["torch_ops"], record["probe_after"]["torch_ops"]
    kept = []
    for index, row in enumerate(rows):
        if row["queue_full"]:
            continue
        probe = (row["probe_ns"]["torch_ops"] if "probe_ns" in row
                 else first + (last - first) * index / max(1, len(rows) - 1))
        kept.append({**row, "reference_ns": row["host_ns"] * reference_ns / probe,
                     "host": record["system"].get("gpu", "?")})
    return kept


def fit(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """``(call_ns, layer_step_ns)`` minimising the squared relative error."""
    x = np.array([row_steps(r) for r in rows], dtype=float)
    y = np.array([r["reference_ns"] for r in rows])
    design = np.vstack([np.ones_like(x), x]).T / y[:, None]
    (call_ns, step_ns), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    return float(call_ns), float(step_ns)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--write", type=Path, help="write the fitted cost file here")
    args = parser.parse_args()
    reference_ns = references().hosts[REFERENCE].components_ns["torch_ops"]
    rows = [row for path in args.records
            for row in reference_rows(json.loads(path.read_text()), reference_ns)]
    console = Console()
    fitted: dict[str, tuple[float, float]] = {}
    table = Table(title=f"cuDNN recurrent call, host time on {REFERENCE} (us)")
    for column in ("pass", "rows", "call", "per layer-step", "mean |err|", "max |err|",
                   "check rows: real -> fitted"):
        table.add_column(column)
    for direction in PASSES:
        grid = [r for r in rows if r["pass"] == direction and not r.get("check")]
        call_ns, step_ns = fitted[direction] = fit(grid)
        errors = [abs(call_ns + step_ns * row_steps(r) - r["reference_ns"]) / r["reference_ns"]
                  for r in grid]
        checks = ", ".join(f"{r['reference_ns'] / 1e3:.0f} -> "
                           f"{(call_ns + step_ns * row_steps(r)) / 1e3:.0f}"
                           for r in rows if r["pass"] == direction and r.get("check"))
        table.add_row(direction, str(len(grid)), f"{call_ns / 1e3:.0f}", f"{step_ns / 1e3:.2f}",
                      f"{100 * np.mean(errors):.0f}%", f"{100 * max(errors):.0f}%", checks or "-")
    console.print(table)
    if args.write:
        document = {
            "reference": REFERENCE,
            "call_ns": {d: round(fitted[d][0]) for d in PASSES},
            "layer_step_ns": {d: round(fitted[d][1]) for d in PASSES},
            "provenance": {"records": [str(p) for p in args.records],
                           "how": "scripts/measure/fit_rnn_host.py: rows on the reference host "
                                  "by their torch_ops probe; per pass a relative least-squares "
                                  "fit over cells, dtypes, sequences, layers and directions"},
        }
        args.write.write_text(json.dumps(document, indent=1) + "\n")
        console.print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
