"""A step's kernel time, from a real trace and from a simulated run: what
``scripts/validate/validate_calibration.py`` compares and
``tests/integration/test_calibrate_real_trace.py`` checks."""

from __future__ import annotations

import json
from pathlib import Path

from phantora.profiles.families import HOST_TRANSFERS
from phantora.profiles.kineto import read_trace


def traced_step_kernel_ms(trace: Path) -> float:
    """GPU time of the kernels launched in the trace's (last) profiled step, host copies
    left out."""
    rank = read_trace(trace)
    start, end = rank.steps[-1]
    return sum(k.duration_ns for k in rank.kernels
               if k.launch_ns is not None and start <= k.launch_ns < end
               and not k.name.startswith(HOST_TRANSFERS)) / 1e6


def simulated_step_kernel_ms(run: Path) -> float | None:
    """GPU time of the kernels rank 0 launched in its last step (the recorded graph's kernels
    within the step's span), host copies left out; None without such a run."""
    if not (run / "summary.json").is_file():
        return None
    step = json.loads((run / "summary.json").read_text())["attribution"]["steps"][-1]
    total = 0
    for line in (run / "graph" / "rank0.jsonl").read_text().splitlines():
        record = json.loads(line)
        if (record["op"] == "kernel" and record["source"] != "host-transfer"
                and step["start_ns"] <= record["t_ns"] < step["end_ns"]):
            total += record["duration_ns"]
    return total / 1e6
