"""A user's collectives timing loop (``synchronize; t0; collective; synchronize; t1``)
runs to the end on the simulator, and its times are host launch plus GPU time."""

import json
import re
from collections.abc import Callable
from pathlib import Path

import yaml

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "timing" / "h200x2-time-collectives.yaml"


def test_the_timing_loop_runs_and_each_call_takes_at_least_its_collective(
        tmp_path: Path, run_cli: Callable[[list[str]], None]) -> None:
    spec = yaml.safe_load(SCENARIO.read_text())
    spec["workload"]["script"] = str(SCENARIO.parent / spec["workload"]["script"])
    spec["workload"]["args"] = ["--ops", "all_reduce,broadcast", "--max-mib", "4",
                                "--iters", "20"]
    scenario = tmp_path / "loop.yaml"
    scenario.write_text(yaml.safe_dump(spec))
    run_cli([str(scenario), "--out", str(tmp_path / "out")])
    log = (tmp_path / "out" / "ranks" / "rank0.log").read_text()
    times = {(op, int(mib)): float(us) for op, mib, us in
             re.findall(r"^(\w+) (\d+) MiB: ([\d.]+) us$", log, re.MULTILINE)}
    assert set(times) == {(op, mib) for op in ("all_reduce", "broadcast") for mib in (1, 2, 4)}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    for row in summary["collectives"]:
        assert times[(row["op"], row["bytes"] >> 20)] >= row["time_us"]
