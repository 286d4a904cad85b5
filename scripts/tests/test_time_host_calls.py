"""``scripts/measure/time_host_calls.py``: collective calls are timed per training step, and the
shipped collective host cost (``intercept.host_time.collective_host``) matches the calls it
read."""

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from intercept.host_time.collective_host import load_collective_cost
from scripts.common import REPO
from scripts.measure import time_host_calls

SCRIPT = """
import os
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
dist.init_process_group("gloo", rank=0, world_size=1, init_method="tcp://127.0.0.1:29531")
w = torch.nn.Parameter(torch.ones(4))
opt = torch.optim.SGD([w], lr=0.1)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
for step in range(1, 6):
    model(torch.ones(4))
    for _ in range(step):  # step s makes s all_reduce calls
        dist.all_reduce(torch.ones(4))
    dist.broadcast(torch.ones(2), src=0)
    funcol.all_reduce(torch.ones(4), "sum", [0]).wait()
    w.sum().backward()
    w.detach().tolist()  # on the CPU: no wait on a GPU, not timed
    import gc; gc.collect(1)
    opt.step()
dist.destroy_process_group()
"""


def timed_record(tmp_path: Path, *flags: str) -> dict:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "calls"
    subprocess.run([sys.executable, str(time_host_calls.__file__),
                    "--out", str(out), "--from", "3", *flags, "--", str(script)], check=True,
                   cwd=tmp_path, timeout=120)
    return json.loads((out / "rank0.json").read_text())


def test_calls_from_the_first_timed_step_on_are_recorded(tmp_path: Path) -> None:
    record = timed_record(tmp_path)
    assert record["modules"] == {}  # without --modules
    assert (record["first_step"], record["last_step"]) == (3, 5)
    ops = record["ops"]
    assert len(ops["all_reduce/1"]["durations_us"]) == 3 + 4 + 5
    assert ops["all_reduce/1"]["calls_per_step"] == 4.0
    assert ops["broadcast/1"]["calls_per_step"] == 1.0
    assert ops["funcol.all_reduce/1"]["calls_per_step"] == 1.0
    assert all(d > 0 for d in ops["broadcast/1"]["durations_us"])
    timeline = record["timeline_us"]
    assert [key for _, _, key in timeline[:5]] == (["all_reduce/1"] * 3
                                                  + ["broadcast/1", "funcol.all_reduce/1"])
    starts = [start for start, _, _ in timeline]
    assert starts[0] == 0 and starts == sorted(starts)
    assert not any(key.startswith(time_host_calls.SYNC_PREFIX) for _, _, key in timeline)
    step_ends = record["step_ends_us"]
    assert len(step_ends) == 3 and step_ends == sorted(step_ends) and step_ends[0] > starts[0]
    assert record["origin_s"] > 0
    assert record["gc"]["1"]["runs_per_step"] >= 1.0  # the script's own gc.collect(1) a step


def test_each_module_class_forward_is_timed_with_modules(tmp_path: Path) -> None:
    modules = timed_record(tmp_path, "--modules")["modules"]
    assert set(modules) == {"Sequential", "Linear", "ReLU"}
    assert all(row["calls_per_step"] == 1.0 for row in modules.values())
    # inclusive: the container's time holds its children's
    assert modules["Sequential"]["us_per_step"] > modules["Linear"]["us_per_step"] > 0


def test_named_functions_are_timed_per_step(tmp_path: Path) -> None:
    functions = timed_record(tmp_path, "--functions",
                             "torch.ones,torch.Tensor.detach")["functions"]
    # a step s makes s + 3 (the collectives' and the model's input): 21 over steps 3-5
    assert functions["torch.ones"]["calls_per_step"] == 7.0
    assert functions["torch.Tensor.detach"]["calls_per_step"] == 1.0
    assert all(row["us_per_step"] > 0 for row in functions.values())


def test_a_function_name_that_does_not_resolve_is_named() -> None:
    with pytest.raises(SystemExit, match="torch.no_such_function"):
        time_host_calls.resolve_owner("torch.no_such_function")


def test_a_module_whose_own_import_fails_is_named_with_what_it_lacks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "needs_missing"
    package.mkdir()
    (package / "__init__.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit, match="needs 'no_such_dependency_xyz'"):
        time_host_calls.resolve_owner("needs_missing.Engine.forward")
    # a missing dependency whose name merely begins the module's is still named
    (package / "__init__.py").write_text("import needs\n")
    for name in [n for n in sys.modules if n.startswith("needs_missing")]:
        del sys.modules[name]
    with pytest.raises(SystemExit, match="needs 'needs'"):
        time_host_calls.resolve_owner("needs_missing.Engine.forward")


def test_a_wait_on_the_gpu_is_timed_and_left_out_of_the_fit(tmp_path: Path) -> None:
    class OnGpu:
        is_cuda = True

    timer = time_host_calls.CallTimer(first=1)
    assert timer.wrap_sync("tolist", lambda tensor: [1.0],
                           time_host_calls.tensor_on_gpu)(OnGpu()) == [1.0]
    (_, _, key), = timer.timeline
    assert key == "sync.tolist/0"
    run = tmp_path / "calls" / "h200x2_ddp"
    run.mkdir(parents=True)
    (run / "rank0.json").write_text(json.dumps({"timeline_us": [
        [0.0, 10.0, "all_reduce/2"], [100.0, 500.0, "sync.item/0"], [1000.0, 50.0, "all_reduce/2"]]}))
    call, = time_host_calls.session_calls(tmp_path, "h200-host")
    assert call.gap_ns == pytest.approx(990e3, rel=0.2)  # since the last collective, not the wait


def test_the_summary_has_a_row_per_run_and_op(tmp_path: Path) -> None:
    run = tmp_path / "h200x2_ddp"
    run.mkdir()
    for rank, durations in enumerate(([10.0, 30.0], [20.0, 40.0])):
        (run / f"rank{rank}.json").write_text(json.dumps(
            {"first_step": 3, "last_step": 4,
             "ops": {"all_reduce": {"calls_per_step": 1.0, "durations_us": durations}}}))
    rows = time_host_calls.summarize(tmp_path).splitlines()
    assert len(rows) == 2
    assert rows[1].split() == ["h200x2_ddp", "all_reduce", "1.0", "25.0", "25.0", "30.0", "0.03"]


def test_the_fit_recovers_a_model_the_calls_follow() -> None:
    hot = {"all_reduce": 40e3, "all_gather": 15e3}
    calls = [time_host_calls.Call(row, gap, hot[row] + 17e3 * math.log1p(gap / 20e3), "run")
             for row in hot for gap in (0.0, 5e3, 50e3, 400e3, 3e6, 9e6)]
    fitted_hot, slope, error = time_host_calls.fit_calls(calls, tau_ns=20e3)
    assert slope == pytest.approx(17e3, rel=1e-3)
    assert fitted_hot == pytest.approx(hot, rel=1e-3)
    assert error < 1e-3


def test_the_spread_fit_recovers_the_ranks_spread_of_synthetic_runs(tmp_path: Path) -> None:
    """Four ranks whose host work between calls is 1 ms times a rank factor (0.8, 0.9, 1.0,
    1.1): rank 0 is left out, the rest spread by a coefficient of variation of 0.1 at every
    window length, so the fit puts it all in the persistent part."""
    run = tmp_path / "calls" / "h200x4_synthetic"
    run.mkdir(parents=True)
    for rank, factor in enumerate((0.8, 0.9, 1.0, 1.1)):
        timeline, t = [], 0.0
        for _ in range(4 * 65):
            timeline.append([round(t, 3), 10.0, "all_reduce/4"])
            t += 10.0 + 1000.0 * factor
        step_ends = [timeline[i][0] - 1.0 for i in range(0, len(timeline), 65)]
        (run / f"rank{rank}.json").write_text(json.dumps(
            {"timeline_us": timeline, "step_ends_us": step_ends}))
    document = time_host_calls.fit_spread([tmp_path])
    assert document["sigma_persistent"] == pytest.approx(0.1, abs=0.01)
    assert document["sigma_short"] == pytest.approx(0.0, abs=0.03)
    assert document["provenance"]["runs"] == ["{}/h200x4_synthetic".format(tmp_path.name)]


def test_the_shipped_model_matches_the_measured_calls_by_gap() -> None:
    """Against the stored calls it was fitted on (session ``h200x2.j``): the median call of each
    decade of gap within 30% of the model's median there, on the reference host."""
    model = load_collective_cost()
    session = REPO / "scripts/measure/data/collective_host/h200x2.j"
    calls = time_host_calls.session_calls(session, model.reference)
    by_decade: dict[int, list[tuple[float, float]]] = {}
    for call in calls:
        decade = len(str(int(call.gap_ns // 1000)))  # 1: < 10 us, 2: < 100 us, ...
        by_decade.setdefault(decade, []).append(
            (call.cost_ns, model.call_ns(call.row, round(call.gap_ns))))
    checked = 0
    for decade, pairs in sorted(by_decade.items()):
        if len(pairs) < 50:
            continue
        measured = statistics.median(p[0] for p in pairs)
        modelled = statistics.median(p[1] for p in pairs)
        assert modelled == pytest.approx(measured, rel=0.3), f"gaps of 10^{decade - 1} us"
        checked += 1
    assert checked >= 4
