"""VirtualClock: arithmetic, CPU-time exclusion (nested, per thread), and the time patches."""

import threading
import time

import pytest

from intercept.host_time.clock import VirtualClock, patched_time

BURN_NS = 30_000_000
"""CPU burnt per measurement: well above the clock's read jitter."""


def burn_cpu(ns: int = BURN_NS) -> None:
    """Spend ``ns`` of this thread's CPU time."""
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass


def test_reproducible_clock_counts_only_charges_ticks_and_jumps() -> None:
    clock = VirtualClock(start_ns=100, epoch_ns=0, op_cost_ns=7)
    burn_cpu()
    assert clock.now_ns() == 100
    clock.tick()
    clock.tick()
    clock.charge(1_000)
    assert clock.now_ns() == 100 + 2 * 7 + 1_000
    clock.advance_to(5_000)
    assert clock.now_ns() == 5_000
    clock.advance_to(4_000)  # the past: nothing changes
    clock.tick()
    assert clock.now_ns() == 5_007


def test_two_reproducible_clocks_agree_exactly() -> None:
    def run() -> list[int]:
        clock = VirtualClock(epoch_ns=0, op_cost_ns=3)
        readings = []
        for step in range(50):
            clock.tick()
            burn_cpu(100_000)
            clock.charge(step)
            if step % 7 == 0:
                clock.advance_to(clock.now_ns() + 11)
            readings.append(clock.now_ns())
        return readings

    assert run() == run()


def test_measured_clock_follows_script_cpu_time() -> None:
    clock = VirtualClock(epoch_ns=0)
    before = clock.now_ns()
    burn_cpu()
    elapsed = clock.now_ns() - before
    assert BURN_NS <= elapsed < BURN_NS * 1.5
    time.sleep(0.05)  # blocked, no CPU: no virtual time
    assert clock.now_ns() - before < BURN_NS * 1.5


def test_excluded_cpu_time_is_not_virtual_time_and_sections_nest() -> None:
    clock = VirtualClock(epoch_ns=0)
    before = clock.now_ns()
    with clock.excluded():
        burn_cpu()
        with clock.excluded():
            burn_cpu()
        frozen = clock.now_ns()
        burn_cpu()
    # 3 x BURN_NS were burnt inside: what leaks is the sections' own edges, a few ms at most on
    # a loaded machine (3.5 ms seen once with both CPUs busy)
    assert frozen - before < BURN_NS // 4
    assert clock.now_ns() - before < BURN_NS // 4
    burn_cpu()  # outside again: counts
    assert clock.now_ns() - before >= BURN_NS


def test_exclusion_is_per_thread() -> None:
    """A thread inside excluded() hides only its own CPU time; others keep counting."""
    clock = VirtualClock(epoch_ns=0)
    before = clock.now_ns()

    def excluded_worker() -> None:
        with clock.excluded():
            burn_cpu(2 * BURN_NS)

    worker = threading.Thread(target=excluded_worker)
    worker.start()
    burn_cpu()  # the main thread's CPU is the script's
    worker.join()
    elapsed = clock.now_ns() - before
    assert BURN_NS <= elapsed < 1.5 * BURN_NS

    plain = threading.Thread(target=burn_cpu)  # a script thread outside excluded(): counts
    before = clock.now_ns()
    plain.start()
    plain.join()
    assert clock.now_ns() - before >= BURN_NS


def test_readings_never_go_backwards_while_threads_enter_and_leave_exclusion() -> None:
    clock = VirtualClock(epoch_ns=0)
    stop = threading.Event()

    def flicker() -> None:
        while not stop.is_set():
            with clock.excluded():
                burn_cpu(50_000)

    workers = [threading.Thread(target=flicker) for _ in range(2)]
    for worker in workers:
        worker.start()
    readings = [clock.now_ns() for _ in range(20_000)]
    stop.set()
    for worker in workers:
        worker.join()
    assert all(b >= a for a, b in zip(readings, readings[1:], strict=False))


def test_advance_to_jumps_forward_and_measuring_continues_from_there() -> None:
    clock = VirtualClock(epoch_ns=0)
    target = clock.now_ns() + 10**9
    clock.advance_to(target)
    assert target <= clock.now_ns() < target + BURN_NS // 10
    burn_cpu()
    assert clock.now_ns() >= target + BURN_NS


def test_negative_costs_are_refused() -> None:
    with pytest.raises(ValueError, match="op_cost_ns"):
        VirtualClock(op_cost_ns=-1)
    with pytest.raises(ValueError, match="-5 ns"):
        VirtualClock().charge(-5)


def test_time_functions_read_virtual_time_and_are_restored() -> None:
    real_perf_counter = time.perf_counter
    clock = VirtualClock(start_ns=2_000_000_000, epoch_ns=1_700_000_000 * 10**9, op_cost_ns=0)
    with patched_time(clock):
        assert time.perf_counter_ns() == time.monotonic_ns() == 2_000_000_000
        assert time.perf_counter() == time.monotonic() == 2.0
        assert time.time_ns() == 1_700_000_002 * 10**9
        assert time.time() == 1_700_000_002.0
        wall_before = real_perf_counter()
        time.sleep(30)  # virtual: returns at once
        assert real_perf_counter() - wall_before < 1.0
        assert time.perf_counter_ns() == 32_000_000_000
        with pytest.raises(ValueError):
            time.sleep(-1)
    assert time.perf_counter is real_perf_counter
    assert time.perf_counter() < 10**7  # the real clock again, not epoch-sized


def test_a_short_sleep_is_a_poll_that_also_waits_for_real() -> None:
    """Polls of a file lock another rank holds must not spin the clock forward: each waits."""
    clock = VirtualClock(epoch_ns=0, op_cost_ns=0)
    real_monotonic = time.monotonic
    with patched_time(clock):
        wall_before = real_monotonic()
        for _ in range(4):
            time.sleep(0.02)
        wall_s = real_monotonic() - wall_before
    assert wall_s >= 0.08
    assert clock.now_ns() >= 80_000_000


def test_sleep_in_a_background_thread_is_real_and_leaves_the_clock_alone() -> None:
    clock = VirtualClock(epoch_ns=0, op_cost_ns=0)
    real_monotonic = time.monotonic
    with patched_time(clock):
        thread = threading.Thread(target=time.sleep, args=(0.05,))
        wall_before = real_monotonic()
        thread.start()
        thread.join()
        wall_s = real_monotonic() - wall_before
    assert wall_s >= 0.05
    assert clock.now_ns() == 0


def test_a_reading_taken_while_the_clock_reads_does_not_deadlock() -> None:
    """A garbage collection can start inside a reading (the counted work's reading allocates);
    a script's gc callback that reads a timer then reads the clock again on the same thread."""
    clocks: list[VirtualClock] = []
    inner: list[int] = []
    collecting: list[bool] = []

    def script_work() -> int:
        if clocks and not collecting:
            collecting.append(True)  # a collection does not start inside its own callback
            inner.append(clocks[0].now_ns())  # what a gc callback reading perf_counter does
        return 5

    clocks.append(VirtualClock(epoch_ns=0, script_work=script_work))
    done = threading.Event()
    reader = threading.Thread(target=lambda: (clocks[0].now_ns(), done.set()), daemon=True)
    reader.start()
    assert done.wait(10), "the clock deadlocked on a reading taken inside a reading"
    assert inner and clocks[0].now_ns() >= max(inner)
