"""The Python-work microbenchmark's host-free parts (``scripts/measure/measure_python_work.py``):
the sized workloads of ``--after-launch`` and the round hooks of its timer."""

from scripts.measure import measure_python_work


def test_the_after_launch_workloads_grow_with_their_size() -> None:
    for name, (make, sizes) in measure_python_work.AFTER_LAUNCH_SIZES.items():
        lines = [measure_python_work.count(make(size))[0] for size in sizes]
        assert lines == sorted(lines) and len(set(lines)) == len(lines), (name, lines)


def test_each_round_runs_between_its_hooks() -> None:
    events: list[str] = []
    measure_python_work.time_ns(lambda: events.append("run"), rounds=3, repeats=2,
                                before_round=lambda: events.append("before"),
                                after_round=lambda: events.append("after"))
    assert events == ["run"] * 2 + ["before", "run", "run", "after"] * 3
