"""Counted Python work (``intercept.host_time.python_work``, the shim's counter) and the clock's
counted mode: the script's time from counts, never from this machine's CPU."""

import pytest

from hwmodel.measured.host_references import references
from intercept.host_time.clock import VirtualClock
from intercept.host_time.host_fit import load_fit
from intercept.host_time.python_work import (WEIGHTS_REFERENCE, StepWeights, load_weights,
                                             weights_for)
from tests.intercept.device_harness import run_snippet

COUNTING = """
import threading
from intercept.process import shim

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
    in_a_step = StepWeights(cold=shipped.scaled(cold), hot=shipped)
    assert weights_for(WEIGHTS_REFERENCE) == in_a_step
    hosts = references().hosts
    other = next(name for name in hosts if name != WEIGHTS_REFERENCE)
    factor = hosts[other].components_ns["calls"] / hosts[WEIGHTS_REFERENCE].components_ns["calls"]
    assert weights_for(other) == StepWeights(cold=shipped.scaled(factor).scaled(cold),
                                             hot=shipped.scaled(factor))
    with pytest.raises(ValueError, match="unknown reference host"):
        weights_for("h999-host")


def test_a_trace_function_the_counter_replaces_is_named_in_the_rank_log() -> None:
    run = run_snippet("""
import sys
from intercept.host_time.python_work import CountedWork, StepWeights, WorkWeights
sys.settrace(lambda *args: None)
CountedWork(StepWeights(WorkWeights(1.0, 1.0), WorkWeights(1.0, 1.0)))
""")
    assert "was replaced by the host-time counter; set simulation.host_time: measured" in \
        run["stderr"]


STAND_INS = """
import time
from intercept.host_time.clock import VirtualClock, patched_time
from intercept.process import shim

assert shim.count_thread()

def counts(work):
    before = shim.work_counts(); work(); after = shim.work_counts()
    return [a - b for a, b in zip(after, before)][:2]

def stand_in():  # what a stand-in of a C call (time.perf_counter, synchronize) looks like
    x = 1
    with shim.simulator_time():
        pass

def script_then_stand_in():
    total = 0
    for i in range(20):
        total += i
    stand_in()

def nested():
    with shim.simulator_time():
        stand_in()

result["c_call"] = counts(int)
result["stand_in"] = counts(stand_in)
result["script_then_stand_in"] = counts(script_then_stand_in)
result["nested"] = counts(nested)
with patched_time(VirtualClock()):
    result["perf_counter"] = counts(time.perf_counter)
result["after"] = counts(lambda: sum(i for i in range(50)))
"""


def test_a_stand_in_that_enters_the_simulators_section_gives_its_work_back() -> None:
    """The function whose ``with`` opens an outermost excluded section is the simulator's: its
    call, its lines and what it called on the way in count nothing; its caller's do."""
    result = run_snippet(STAND_INS)["result"]
    c_lines, c_calls = result["c_call"]  # the probe's own lines around a call of C
    # a real host runs a C call there (or one whose whole cost a table charges)
    assert result["stand_in"] == result["perf_counter"] == [c_lines, c_calls]
    # the script's own loop before the call still counts, all of it
    lines, calls = result["script_then_stand_in"]
    assert lines >= c_lines + 2 * 20 + 2 and calls == c_calls + 1
    # inside a section nothing counts, and nothing more is given back
    assert result["nested"] == [c_lines, c_calls]
    # and counting goes on as before once the section is left
    assert result["after"][0] >= 50


HOT_WALK = """
from torch import nn
from intercept.host_time.python_work import hot_walk_code
from intercept.process import shim

model = nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)) for _ in range(8)])
shim.set_hot_code(hot_walk_code())
assert shim.count_thread()

def delta(work):
    before = shim.work_counts(); work(); after = shim.work_counts()
    return [a - b for a, b in zip(after, before)]

def consume():
    total = 0
    for p in model.parameters():
        total += 1
    return total

def op():
    with shim.simulator_time():  # a stand-in: its own call and line are the simulator's
        pass

def consume_with_ops():
    for p in model.parameters():
        op()

result["walk"] = delta(lambda: list(model.parameters()))
result["consumer"] = delta(consume)
result["after"] = delta(lambda: sum(i for i in range(50)))
result["consumer_with_ops"] = delta(consume_with_ops)
"""


def test_member_walks_count_as_hot_work_and_their_consumers_do_not() -> None:
    result = run_snippet(HOT_WALK)["result"]
    lines, calls, hot_lines, hot_calls = result["walk"]
    assert hot_lines > 200 and hot_calls > 100  # 25 modules' walk, 32 parameters
    # the lambda, work_counts() itself, and the walk's first step (down to the first
    # parameter): the snippet's set-up ran the simulator before it, so it runs cold
    first_step = lines
    assert first_step <= 80 and calls <= 25
    # the consumer's loop body between two yields is the script's, the walk's steps hot (its
    # first too: no op since the last walk)
    lines, calls, hot_lines, hot_calls = result["consumer"]
    assert lines >= 2 * 32 and hot_lines > result["walk"][2]
    # once the walk has returned, nothing is hot any more
    assert result["after"][2:] == [0, 0] and result["after"][0] >= 50
    # a consumer that runs an op between two steps makes every step after it cold
    lines, calls, hot_lines, hot_calls = result["consumer_with_ops"]
    assert hot_lines <= first_step and lines > result["walk"][2]


def test_counted_work_charges_hot_walks_at_the_hot_weights() -> None:
    run = run_snippet("""
from torch import nn
from intercept.host_time.python_work import CountedWork, StepWeights, WorkWeights
work = CountedWork(StepWeights(cold=WorkWeights(1e6, 0.0), hot=WorkWeights(1.0, 0.0)))
model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(8)])
before = work.ns(); list(model.parameters()); result["walk_ns"] = work.ns() - before
before = work.ns(); sum(i for i in range(50)); result["loop_ns"] = work.ns() - before
""")
    result = run["result"]
    cold_lines, hot_ns = divmod(result["loop_ns"], 1_000_000)  # cold: 1 ms a line, hot 1 ns
    assert 50 <= cold_lines <= 70 and hot_ns == 0  # the loop, and ns()'s own few lines
    cold_lines, hot_ns = divmod(result["walk_ns"], 1_000_000)
    assert cold_lines <= 80 and hot_ns >= 100  # its first step cold, ~300 lines hot at 1 ns
