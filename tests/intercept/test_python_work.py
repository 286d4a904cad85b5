"""Counted Python work (``intercept.python_work``, the shim's counter) and the clock's counted
mode: the script's time from counts, never from this machine's CPU."""

import pytest

from intercept.clock import VirtualClock
from intercept.host_fit import load_fit
from intercept.host_references import references
from intercept.python_work import WEIGHTS_REFERENCE, load_weights, weights_for
from tests.intercept.device_harness import run_snippet

COUNTING = """
import threading
from intercept import shim

def loop(n):
    total = 0
    for i in range(n):
        total += i
    return total

def lines_of(work):
    before = shim.work_counts(); work(); after = shim.work_counts()
    return after.lines - before.lines, after.calls - before.calls

assert shim.count_thread()
deltas = [lines_of(lambda: loop(50)) for _ in range(2)]

def excluded_loop():
    with shim.simulator_time():
        loop(50)

def other_thread(counted):
    if counted:
        shim.count_thread()
    before = shim.work_counts(); loop(50); after = shim.work_counts()
    result["thread_counted" if counted else "thread_uncounted"] = after.lines - before.lines

for counted in (False, True):
    thread = threading.Thread(target=other_thread, args=(counted,))
    thread.start(); thread.join()

import sys
sys.settrace(lambda *args: None)
result["replaced"] = not shim.thread_counted()
sys.settrace(None)
result["deltas"] = [lines for lines, _ in deltas]
result["calls"] = [calls for _, calls in deltas]
result["excluded"] = lines_of(excluded_loop)[0]
"""


def test_the_shim_counts_lines_and_calls_outside_excluded_sections_only() -> None:
    result = run_snippet(COUNTING)["result"]
    first, second = result["deltas"]
    assert first == second >= 100  # the same code, the same count: 2 lines per iteration
    assert result["calls"][0] == result["calls"][1] >= 2  # the lambda and loop(), and ours
    assert result["excluded"] <= 3  # the call and the with-statement's own lines
    # a thread is counted from its own count_thread() on (its lines land in the total, less
    # the main thread's few while it waits in join())
    assert result["thread_uncounted"] <= 4
    assert result["thread_counted"] >= 100
    assert result["replaced"]


def test_counted_mode_reads_the_work_not_the_cpu() -> None:
    work = [1_000]
    clock = VirtualClock(script_work=lambda: work[0])
    assert clock.counted and clock.now_ns() == 0
    sum(i * i for i in range(200_000))  # CPU time that must not count
    assert clock.now_ns() == 0
    work[0] += 5_000
    clock.charge_table(700)
    assert clock.now_ns() == 5_700
    clock.correct(-3_000)  # a residual correction means nothing here
    assert clock.now_ns() == 5_700
    split = clock.host_split()
    assert (split.table_ns, split.residual_ns, split.fixed_ns) == (700, 5_000, 0)


@pytest.mark.parametrize("other", [{"op_cost_ns": 10}, {"cpu_scale": object()}])
def test_counted_mode_refuses_a_second_timing(other: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="counted mode"):
        VirtualClock(script_work=lambda: 0, **other)  # type: ignore[arg-type]


def test_weights_are_measured_hot_made_cold_and_scaled_to_another_reference() -> None:
    shipped = load_weights()
    assert 10 < shipped.line_ns < 1_000 and 10 < shipped.call_ns < 1_000
    cold = load_fit().python_cold_factor
    in_a_step = shipped.scaled(cold)
    assert weights_for(WEIGHTS_REFERENCE) == in_a_step
    hosts = references().hosts
    other = next(name for name in hosts if name != WEIGHTS_REFERENCE)
    factor = hosts[other].components_ns["calls"] / hosts[WEIGHTS_REFERENCE].components_ns["calls"]
    assert weights_for(other) == in_a_step.scaled(factor)
    with pytest.raises(ValueError, match="unknown reference host"):
        weights_for("h999-host")


def test_a_trace_function_the_counter_replaces_is_named_in_the_rank_log() -> None:
    run = run_snippet("""
import sys
from intercept.python_work import CountedWork, WorkWeights
sys.settrace(lambda *args: None)
CountedWork(WorkWeights(1.0, 1.0))
""")
    assert "was replaced by the host-time counter; set simulation.host_time: measured" in \
        run["stderr"]
