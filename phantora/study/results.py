"""A sweep's results: one row per point, a CSV (and Parquet) table, and plots.

Columns: ``point``, each swept key, ``mode`` (live / replay / invalid), ``status`` (ok /
error), ``error``, ``simulated_ms`` (the whole script, or the whole collectives sweep),
``comm_ms`` (summed collective time), ``busbw_gbs`` (the collectives' busbw weighted by their
time), ``collectives``, ``flows``, ``replay_vs_live_pct`` (replays: against the base
recording), the steady step and its attribution for scripts (``step_ms`` and one
``<part>_ms`` per part of :data:`~phantora.report.attribution.PARTS`, mean over live ranks),
``wall_s`` and ``out``.
"""

import csv
from pathlib import Path
from typing import Any

from rich.console import Console

from phantora.report.attribution import PARTS
from phantora.study.sweep import SweepPoint

STEP_COLUMNS = ("step_ms", *(f"{part}_ms" for part in PARTS))
"""The steady step's columns, from ``summary.json``'s ``attribution``."""


def point_row(point: SweepPoint, mode: str, summary: dict[str, Any] | None, error: str,
              wall_s: float) -> dict[str, Any]:
    row: dict[str, Any] = {"point": point.index, **{key: _cell(value) for key, value
                                                    in point.values.items()},
                           "mode": mode, "status": "ok" if summary and not error else "error",
                           "error": error or ("" if summary else "no summary.json written")}
    metrics = dict.fromkeys(("simulated_ms", "comm_ms", "busbw_gbs", "collectives", "flows",
                             "replay_vs_live_pct", *STEP_COLUMNS))
    if summary:
        rows = summary.get("collectives") or []
        time_us = [r["time_us"] * r.get("count", 1) for r in rows]
        comm_us = sum(time_us)
        metrics.update(
            simulated_ms=round(summary["simulated_ns"] / 1e6, 6),
            comm_ms=round(comm_us / 1e3, 6),
            busbw_gbs=round(sum(r["busbw_gbs"] * t for r, t in zip(rows, time_us)) / comm_us, 3)
            if comm_us else None,
            collectives=sum(r.get("count", 1) for r in rows),
            flows=sum(r["flows"] * r.get("count", 1) for r in rows),
            replay_vs_live_pct=(summary.get("replay") or {}).get("difference_pct"))
        steady = (summary.get("attribution") or {}).get("steady")
        if steady:
            metrics.update({column: round(steady[column.removesuffix("_ms") + "_ns"] / 1e6, 6)
                            for column in STEP_COLUMNS})
    return {**row, **metrics, "wall_s": round(wall_s, 2),
            "out": "" if point.scenario is None else f"p{point.index}"}


def _cell(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def _one_type_per_column(rows: list[dict[str, Any]], columns: list[str]
                         ) -> list[dict[str, Any]]:
    """``rows`` with every column that mixes kinds of value (a swept ``nccl.channels: [auto,
    16]``) as text, so that Parquet can type it; ints and floats are one kind."""
    def kind(value: Any) -> str:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return "number" if number else type(value).__name__

    mixed = {column for column in columns
             if len({kind(row[column]) for row in rows if row.get(column) is not None}) > 1}
    return [{key: str(value) if key in mixed and value is not None else value
             for key, value in row.items()} for row in rows]


def write_table(rows: list[dict[str, Any]], out_dir: Path, console: Console) -> list[Path]:
    """``results.csv``, ``results.parquet`` (pyarrow installed) and ``plots/``: the paths."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    csv_path = out_dir / "results.csv"
    with csv_path.open("w", newline="") as out:
        writer = csv.DictWriter(out, columns)
        writer.writeheader()
        writer.writerows(rows)
    written = [csv_path]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        pass
    else:
        parquet = out_dir / "results.parquet"
        pq.write_table(pa.Table.from_pylist(_one_type_per_column(rows, columns)), parquet)
        written.append(parquet)
    from phantora.study.plots import plot_sweep
    plots = plot_sweep(rows, [c for c in columns if "." in c], out_dir / "plots", console)
    return written + plots
