"""Counted host time (the default) on a real script: a host-bound step's estimate is the same
whether this machine is idle or busy, and summary.json splits it into table and counted work."""

import json
from collections.abc import Callable
from pathlib import Path

import yaml

from measurements.cpu_load import busy_cpus
from tests.integration.live_examples import SCENARIO_DIR, parse_steps


def run_single(tmp_path: Path, run_cli: Callable[[list[str]], None], name: str
               ) -> tuple[dict, list[float]]:
    """The bundled one-GPU tiny GPT (host-bound: 4 steps of 2 micro-batches), counted."""
    spec = yaml.safe_load((SCENARIO_DIR / "h100x1-gpt-single.yaml").read_text())
    spec["workload"]["script"] = str((SCENARIO_DIR / spec["workload"]["script"]).resolve())
    spec["workload"]["args"] = ["--steps", "4", "--grad-accum", "2", "--num-workers", "0"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / name
    run_cli([str(path), "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    return summary, [s.wall_ms for s in parse_steps((out / "ranks" / "rank0.log").read_text())]


def test_a_host_bound_step_is_the_same_on_an_idle_and_a_busy_machine(
        tmp_path: Path, run_cli: Callable[[list[str]], None]) -> None:
    idle, idle_steps = run_single(tmp_path, run_cli, "idle")
    with busy_cpus(2):
        busy, busy_steps = run_single(tmp_path, run_cli, "busy")
    assert len(idle_steps) == 4
    assert busy_steps == idle_steps
    host_time = idle["ranks"][0]["host_time"]
    steps = host_time["steps"]
    assert len(steps) == 4
    # the middle steps (no warm-up) charge the same table time; the script's own work differs
    # a little with its branches (the learning-rate warm-up)
    assert steps[1][1] == steps[2][1] > 0
    assert all(0 < work < table for _, table, work, *_ in steps)
    # of the table's part: no DTensor here, the autograd engine's nodes and the ops' own costs
    # every step; of the Python, the cold part (the optimizer's member walks run hot)
    assert all(dtensor == 0 and 0 < nodes < table and 0 < ops < table - nodes
               for _, table, _, dtensor, nodes, ops, _ in steps)
    assert all(0 < cold < work for _, _, work, _, _, _, cold in steps)
    assert busy["ranks"][0]["host_time"] == host_time


READ_TIME = """
import time
import torch
x = torch.ones(8, device="cuda")
start = time.perf_counter()
for _ in range(1000):
    time.perf_counter()
looped = time.perf_counter()
for _ in range(1000):
    pass
print(f"reads {looped - start:.9f} loop {time.perf_counter() - looped:.9f}")
"""


def test_reading_the_clock_costs_about_a_call(
        tmp_path: Path, run_cli: Callable[[list[str]], None]) -> None:
    """A real host reads ``time.perf_counter`` in one C call; the virtual clock's own Python
    must not be charged as the script's (it was 8.5 us a reading, then its call and first line,
    1.2 us): a loop of readings costs what a loop of ``pass`` does, its lines."""
    script = tmp_path / "read_time.py"
    script.write_text(READ_TIME)
    spec = {"name": "read-time", "cluster": {"gpu": "h100", "hosts": 1, "gpus_per_host": 1},
            "workload": {"script": str(script)}}
    path = tmp_path / "read_time.yaml"
    path.write_text(yaml.safe_dump(spec))
    run_cli([str(path), "--out", str(tmp_path / "out")])
    line = next(line for line in (tmp_path / "out" / "ranks" / "rank0.log").read_text()
                .splitlines() if line.startswith("reads "))
    reads_s, loop_s = float(line.split()[1]), float(line.split()[3])
    per_read_us = (reads_s - loop_s) / 1000 * 1e6
    assert 0 <= per_read_us < 0.1
