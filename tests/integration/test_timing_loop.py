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


ONE_RANK_LOOP = '''
import statistics
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(0)
x = torch.ones(2**19, device="cuda", dtype=torch.bfloat16)
for name, call in (("nothing", lambda: None), ("blocking", lambda: dist.all_reduce(x)),
                   ("async", lambda: dist.all_reduce(x, async_op=True))):
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        call()
        torch.cuda.synchronize()
        t1 = time.perf_counter_ns()
        times.append(t1 - t0)
    print(f"{name}: {statistics.median(times)} ns", flush=True)
dist.destroy_process_group()
'''


def test_a_one_rank_timing_loop_charges_the_calls_host_paths_and_the_scripts_lines_only(
        tmp_path: Path, run_cli: Callable[[list[str]], None]) -> None:
    """The stand-ins of ``time.perf_counter``, ``torch.cuda.synchronize`` and the c10d call count
    none of their own Python (a real host runs C there, or a call the table charges whole); a
    blocking call (``async_op=False``) costs its one-rank row less what an async one adds."""
    from intercept.host_time.host_cost import load_table

    (tmp_path / "loop.py").write_text(ONE_RANK_LOOP)
    (tmp_path / "loop.yaml").write_text(yaml.safe_dump({
        "cluster": {"gpu": "h100", "hosts": 1, "gpus_per_host": 1},
        "workload": {"script": "loop.py", "nproc_per_node": 1}}))
    run_cli([str(tmp_path / "loop.yaml"), "--out", str(tmp_path / "out")])
    log = (tmp_path / "out" / "ranks" / "rank0.log").read_text()
    ns = {name: float(value) for name, value in re.findall(r"^(\w+): ([\d.]+) ns$", log, re.M)}
    table = load_table()
    # synchronize's row, and the loop's own four lines and one call (the lambda): < 2 us
    assert 0 < ns["nothing"] - table.sync_ns["device"] < 2_000
    # no GPU time on one rank: the difference is the call's host path, to the ns
    assert abs(ns["blocking"] - ns["nothing"]
               - table.collective_ns("all_reduce", blocking=True)) <= 2
    assert abs(ns["async"] - ns["nothing"] - table.collective_ns("all_reduce")) <= 2
