"""Runs a sweep's points (on Ray when installed, else one after another) into one table.

Each point runs in its own process, ``python -m POINT_MODULE POINT.json`` (the caller names
the module: the CLI's :mod:`phantora.cli.point`). With Ray (the ``study`` extra) the points
are Ray tasks, on a local Ray by default or on the cluster at ``--address``; a live point asks
for as many CPUs as it has ranks, so live points do not share CPUs (their measured host time
would grow). Without Ray they run in turn, with a note. A replayed point needs the base
scenario's live recording, which runs first.
"""

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from phantora.report.out_dir import clear_sweep
from phantora.scenario import ScriptWorkload
from phantora.study.results import point_row, write_table
from phantora.study.sweep import Sweep, SweepPoint

BASE_DIR = "base"
_ERROR_TAIL = 600
"""Characters of a failed point's output kept in its row."""


def run_sweep(sweep: Sweep, out_dir: Path | None, console: Console, point_module: str,
              address: str | None = None) -> int:
    """Run every point (each by ``python -m point_module POINT.json``) and write
    ``out_dir/results.csv`` (and ``.parquet``) and the plots; 0 if at least one point ran, 1 if
    none did."""
    out_dir = out_dir or Path("out") / f"{sweep.name}-sweep"
    clear_sweep(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wall_start = time.perf_counter()
    tasks = [_task(point, sweep, out_dir) for point in sweep.points if point.scenario]
    rows: dict[int, dict[str, Any]] = {
        point.index: point_row(point, "invalid", None, point.error, 0.0)
        for point in sweep.points if point.scenario is None}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        base_error = ""
        if sweep.needs_recording:  # its own bar: the recording is no point of the sweep
            recording = progress.add_task("live recording of the base scenario", total=1)
            base = {"data": {**sweep.base, "name": f"{sweep.name}-base"},
                    "source": sweep.source, "out": str(out_dir / BASE_DIR), "replay_of": None}
            code, output, _ = run_point(point_module, base, out_dir / BASE_DIR / "point.json")
            base_error = "" if code == 0 else f"the base recording failed: {_tail(output)}"
            progress.advance(recording)
        bar = progress.add_task(f"sweep {sweep.name}", total=len(sweep.points))
        progress.advance(bar, len(rows))
        runnable = []
        for point, spec in tasks:
            if spec["replay_of"] and base_error:
                rows[point.index] = point_row(point, "replay", None, base_error, 0.0)
                progress.advance(bar)
            else:
                runnable.append((point, spec))

        def done(point: SweepPoint, spec: dict[str, Any], code: int, output: str,
                 wall_s: float) -> None:
            summary = _summary(Path(spec["out"])) if code == 0 else None
            rows[point.index] = point_row(point, "replay" if spec["replay_of"] else "live",
                                          summary, "" if code == 0 else _tail(output), wall_s)
            progress.advance(bar)

        _execute(point_module, runnable, done, console, address)
    ordered = [rows[index] for index in sorted(rows)]
    written = write_table(ordered, out_dir, console)
    wall_s = time.perf_counter() - wall_start
    failed = sum(1 for row in ordered if row["status"] != "ok")
    console.print(f"sweep {sweep.name}: {len(ordered)} points ({failed} failed) in "
                  f"{wall_s:.1f} s wall; wrote " + ", ".join(str(p) for p in written),
                  highlight=False)
    return 0 if failed < len(ordered) else 1


def _task(point: SweepPoint, sweep: Sweep, out_dir: Path) -> tuple[SweepPoint, dict[str, Any]]:
    assert point.scenario is not None
    replay = point.replayable and isinstance(point.scenario.workload, ScriptWorkload)
    out = out_dir / f"p{point.index}"
    return point, {"data": point.data, "source": sweep.source, "out": str(out),
                   "replay_of": str(out_dir / BASE_DIR) if replay else None,
                   "cpus": 1 if replay or not isinstance(point.scenario.workload,
                                                         ScriptWorkload)
                   else point.scenario.workload.world_size}


def run_point(point_module: str, spec: dict[str, Any],
              spec_path: Path) -> tuple[int, str, float]:
    """Run one point in a child process: (exit code, its output, wall seconds)."""
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(json.dumps(spec, indent=1, default=str) + "\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", point_module, str(spec_path)],
                          capture_output=True, text=True, check=False)
    output = done.stdout + done.stderr
    (spec_path.parent / "console.log").write_text(output)
    return done.returncode, output, time.perf_counter() - start


def _execute(point_module: str, tasks: list[tuple[SweepPoint, dict[str, Any]]],
             done: Callable[[SweepPoint, dict[str, Any], int, str, float], None],
             console: Console, address: str | None) -> None:
    try:
        import ray
    except ImportError:
        if address is not None:
            console.print("[yellow]note:[/yellow] --address needs Ray: pip install -e '.\\[study]'")
        if len(tasks) > 1:
            console.print("[dim]note: Ray is not installed (pip install -e '.\\[study]'); "
                          "running the points one after another[/dim]")
        for point, spec in tasks:
            done(point, spec, *run_point(point_module, spec, Path(spec["out"]) / "point.json"))
        return
    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    try:
        capacity = max(1, int(ray.cluster_resources().get("CPU", 1)))
        remote = ray.remote(run_point)
        pending = {remote.options(num_cpus=min(spec["cpus"], capacity)).remote(
            point_module, spec, Path(spec["out"]) / "point.json"): (point, spec)
            for point, spec in tasks}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            point, spec = pending.pop(ready[0])
            try:
                done(point, spec, *ray.get(ready[0]))
            except ray.exceptions.RayError as error:
                done(point, spec, 1, f"Ray task failed: {error}", 0.0)
    finally:
        ray.shutdown()


def _summary(out: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def _tail(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors[-1] if errors else "\n".join(lines[-5:]))[-_ERROR_TAIL:]
