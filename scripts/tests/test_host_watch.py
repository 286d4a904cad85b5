"""The host-speed watch beside real runs (``scripts/measure/host_watch.py``) and the ``=== HOST``
line ``measure_steps.py run --host-watch`` writes from it."""

import gzip
import json
from pathlib import Path

import pytest

from hwmodel.measured.host_references import references
from scripts.measure import host_cpu_scan, host_speed_effect, host_watch, measure_steps
from scripts.tests.test_validation_scripts import ShellRun

STAT = ("cpu  100 0 50 800 10 0 5 35 0 0\n"
        "cpu0 50 0 25 400 5 0 2 17 0 0\n")


def test_cpu_ticks_reads_the_total_and_steal_columns() -> None:
    assert host_watch.cpu_ticks(STAT) == (1000, 35)
    assert host_watch.cpu_ticks("cpu  1 2 3 4\n") == (10, None)
    assert host_watch.cpu_ticks("intr 5\n") is None


def reading(t: float, scale: float, ticks: tuple[int, int] | None = None) -> host_watch.Reading:
    base = references().hosts["h200-host"].components_ns
    cpu, steal = ticks if ticks else (None, None)
    return host_watch.Reading(t, {n: round(v * scale) for n, v in base.items()}, cpu, steal)


def test_speed_during_takes_the_rounds_inside_the_run() -> None:
    reference = references().hosts["h200-host"]
    readings = [reading(0.0, 0.5), reading(1.0, 2.0, (1000, 10)), reading(2.0, 1.0),
                reading(3.0, 1.25, (2000, 110)), reading(9.0, 0.5)]
    speed = host_watch.speed_during(readings, 1.0, 3.0, reference)
    assert speed is not None and speed.rounds == 3
    assert speed.factor == pytest.approx(1 / 1.25, rel=1e-3)  # the median round
    assert (speed.lowest, speed.highest) == (pytest.approx(0.5), pytest.approx(1.0))
    assert speed.steal_share == pytest.approx(0.1)  # 100 of 1000 ticks between the ends
    unticked = host_watch.speed_during(readings, 1.0, 2.5, reference)  # an end without ticks
    assert unticked is not None and unticked.steal_share is None
    assert host_watch.speed_during(readings, 4.0, 8.0, reference) is None
    line = speed.log_line("gpt2-124m-b8", "h200-host")
    assert line.startswith("=== HOST gpt2-124m-b8: 0.800 of h200-host (3 rounds")
    assert measure_steps.HOST_RE.match(line).group(2) == "0.800"


class FakeWatcher(measure_steps.HostWatcher):
    """The watcher's reading of a watch file, without starting the watch."""

    def __init__(self, path: Path) -> None:
        self.reference = references().for_gpu("h200")
        self.path = path


def test_a_watched_run_ends_its_log_with_the_host_speed(tmp_path: Path) -> None:
    watch = tmp_path / "watch.jsonl"
    slow = json.dumps({"t": 0, "ns": reading(0, 2.0).components_ns})
    watch.write_text(slow + "\n")
    # the run writes a round at half the reference's speed while it runs (and a line cut short)
    code = (f"import json, time; open({str(watch)!r}, 'a').write("
            f"json.dumps({{**json.loads({slow!r}), 't': time.time()}}) + '\\n' + '{{\"t\": 1')\n"
            "print('step 3/3 | loss 1 | 12.0 ms | x')")
    run = ShellRun("ok", "gpt_single.py", (), 1, code=code)
    measure_steps.execute([run], tmp_path, "h200x1", watcher=FakeWatcher(watch))
    [result] = measure_steps.parse_log(tmp_path / "h200x1_gpt_single.log", "h200x1")
    assert result.steps_ms == [12.0] and result.host_speed == pytest.approx(0.5, abs=1e-3)
    assert "(1 rounds, 0.500-0.500; steal n/a)" in (tmp_path / "h200x1_gpt_single.log").read_text()
    quiet = ShellRun("quiet", "gpt_single.py", (), 1, code="print('step 3/3 | loss 1 | 9.0 ms | x')")
    measure_steps.execute([quiet], tmp_path, "h200x1", watcher=FakeWatcher(tmp_path / "none"))
    text = (tmp_path / "h200x1_gpt_single.log").read_text()
    assert "=== HOST quiet: no round of none inside the run" in text
    assert measure_steps.parse_log(tmp_path / "h200x1_gpt_single.log", "h200x1")[1].host_speed is None


def test_a_gzipped_watch_reads_as_the_plain_one(tmp_path: Path) -> None:
    lines = "\n".join(json.dumps({"t": t, "ns": {"calls": 5}, "cpu_ticks": 9}) for t in (1, 2))
    (tmp_path / "w.jsonl").write_text(lines + "\n")
    (tmp_path / "w.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    plain = host_watch.read_watch(tmp_path / "w.jsonl")
    assert host_watch.read_watch(tmp_path / "w.jsonl.gz") == plain
    assert [r.t for r in plain] == [1.0, 2.0] and plain[0].steal_ticks is None


def test_fast_cpus_are_those_near_the_best_median() -> None:
    factors = {0: [0.45, 0.9, 0.44], 1: [0.9, 0.92, 0.4], 2: [0.95, 0.93, 0.5], 3: [0.3, 0.3, 0.3]}
    assert host_cpu_scan.fast_cpus(factors, within=0.1) == [1, 2]
    assert host_cpu_scan.fast_cpus(factors, within=0.6) == [0, 1, 2]


def watched(workload: str, speed: float, step_ms: float) -> host_speed_effect.WatchedRun:
    return host_speed_effect.WatchedRun("h200x1", workload, "x.log", speed, step_ms)


def test_the_host_speed_fit_pools_workloads_around_their_own_means() -> None:
    # step = size * speed**-0.5 exactly, for two workloads 10x apart in size
    runs = [watched(w, s, size * s ** -0.5) for w, size in (("a", 10.0), ("b", 100.0))
            for s in (0.4, 0.6, 0.9)]
    fit = host_speed_effect.within_workload_fit(runs + [watched("alone", 0.5, 3.0)])
    assert fit is not None and (fit.runs, fit.workloads) == (6, 2)
    assert fit.slope == pytest.approx(-0.5) and fit.r == pytest.approx(-1.0)
    flat = [watched(w, 0.5, 10.0 + i) for w in "ab" for i in range(2)]  # speeds do not vary
    assert host_speed_effect.within_workload_fit(flat) is None
    assert "too few watched runs" in host_speed_effect.table(runs[:2])


def test_the_stored_watched_runs_are_found_and_fitted() -> None:
    runs = host_speed_effect.watched_runs(host_speed_effect.STEPS, "h200x1")
    assert len(runs) >= 20 and all(0 < r.host_speed < 2 and r.step_ms > 0 for r in runs)
    fit = host_speed_effect.within_workload_fit(runs)
    assert fit is not None and -1.0 < fit.slope < 0  # a slower host, a longer step
