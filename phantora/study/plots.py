"""Sweep plots (matplotlib, the ``study`` extra): simulated time and busbw against each swept
key, one line per combination of the other keys; for scripts, the steady step of every point
as a bar split into its attribution's parts (``attribution.png``)."""

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console

from phantora.report.attribution import PARTS

METRICS = (("simulated_ms", "simulated time (ms)"), ("busbw_gbs", "busbw (GB/s, time-weighted)"))


def plot_sweep(rows: list[dict[str, Any]], keys: list[str], out_dir: Path,
               console: Console) -> list[Path]:
    """One PNG per swept key; none (with a note) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        console.print("[dim]note: no plots: matplotlib is not installed "
                      "(pip install -e '.\\[study]')[/dim]")
        return []
    ok = [row for row in rows if row["status"] == "ok"]
    if not ok:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for key in keys:
        others = [k for k in keys if k != key]
        series: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in ok:
            series[", ".join(f"{k}={row[k]}" for k in others)].append(row)
        figure, axes = plt.subplots(1, len(METRICS), figsize=(6 * len(METRICS), 4))
        for axis, (metric, label) in zip(axes, METRICS):
            for name, members in sorted(series.items()):
                xs = [str(row[key]) for row in members if row[metric] is not None]
                ys = [row[metric] for row in members if row[metric] is not None]
                axis.plot(xs, ys, marker="o", label=name or None)
            axis.ticklabel_format(axis="y", useOffset=False)  # absolute values on the axis
            axis.set_xlabel(key)
            axis.set_ylabel(label)
            axis.grid(alpha=0.3)
            if others:
                axis.legend(fontsize="small")
        figure.tight_layout()
        path = out_dir / f"{key.replace('.', '_')}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        paths.append(path)
    attributed = [row for row in ok if row.get("step_ms") is not None]
    if attributed:
        paths.append(_plot_attribution(plt, attributed, keys, out_dir))
    return paths


def _plot_attribution(plt: Any, rows: list[dict[str, Any]], keys: list[str],
                      out_dir: Path) -> Path:
    """One stacked bar per point, at its own place (points whose swept keys print alike, e.g.
    differing only in ``faults``, are not drawn over each other): its steady step split into
    parts, labelled with its number and its values (a key's last part; faults by kind)."""
    labels = [_point_label(row, keys) for row in rows]
    places = list(range(len(rows)))
    figure, axis = plt.subplots(figsize=(max(6.0, 1.3 * len(rows)), 4.5))
    bottom = [0.0] * len(rows)
    for part in PARTS:
        heights = [row[f"{part}_ms"] for row in rows]
        axis.bar(places, heights, bottom=bottom, label=part.replace("_", " "))
        bottom = [b + h for b, h in zip(bottom, heights)]
    axis.set_xticks(places, labels)
    axis.set_ylabel("steady step (ms)")
    axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axis.tick_params(axis="x", labelsize="x-small")
    figure.tight_layout()
    path = out_dir / "attribution.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _point_label(row: dict[str, Any], keys: list[str]) -> str:
    """``p3``, one line per swept key with a value (a text value alone, else ``name=value``),
    then the faults' kinds."""
    lines = [f"p{row['point']}" if "point" in row else ""]
    for key in keys:
        value = row.get(key)
        if value is not None:
            lines.append(value if isinstance(value, str) else f"{key.rsplit('.', 1)[-1]}={value}")
    kinds = re.findall(r"'kind': '(\w+)'", str(row.get("faults") or ""))
    if kinds:
        lines.append("+".join(kinds))
    return "\n".join(line for line in lines if line)
