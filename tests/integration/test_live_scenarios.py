"""Every bundled training-script scenario runs on the simulator through the CLI and leaves
``summary.json``, ``trace.json`` and one log per rank that show the script ran on (simulated)
GPUs: CUDA events timed its steps, GPU memory was counted, kernels and collectives were traced.
"""

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.live_examples import (ExampleScenario, example_scenarios, parse_steps,
                                             peak_memory_line, trace_spans)


def _cases() -> list[object]:
    """One case per example scenario; the 8-rank one takes about 12 s here, so it is slow."""
    return [pytest.param(e, id=e.name, marks=pytest.mark.slow if e.world_size >= 8 else ())
            for e in example_scenarios()]


def _check_attribution(attribution: dict, steps: list, expected_steps: int) -> None:
    """Every live rank's step is split into parts that sum to it, one window per optimizer
    step, and rank 0's steady windows are the steps its script timed (within 1%)."""
    for step in attribution["steps"]:
        parts_ns = sum(step[f"{part}_ns"] for part in attribution["parts"])
        assert parts_ns == step["duration_ns"], step
    rank0 = [step["duration_ns"] for step in attribution["steps"] if step["rank"] == 0]
    assert len(rank0) == expected_steps
    logged_ms = sum(s.wall_ms for s in steps[1:]) / len(steps[1:])
    assert sum(rank0[1:]) / len(rank0[1:]) / 1e6 == pytest.approx(logged_ms, rel=0.01)


def _check_chakra_export(run_dir: Path, world_size: int,
                         run_cli: Callable[[list[str]], None]) -> None:
    """The default, deduplicated recording exports one Chakra ET per rank, mirrors included,
    each decoding to nodes with collectives."""
    pytest.importorskip("google.protobuf")
    from tests.unit.test_chakra_export import decode, pb

    run_cli(["export-chakra", str(run_dir)])
    traces = sorted((run_dir / "chakra").glob("trace.*.et"))
    assert len(traces) == world_size
    for trace in traces:
        _, nodes = decode(trace)
        assert any(node.type == pb.COMM_COLL_NODE for node in nodes), trace


@pytest.mark.parametrize("example", _cases())
def test_example_scenario_runs_live(example: ExampleScenario, tmp_path: Path,
                                    run_cli: Callable[[list[str]], None]) -> None:
    run_cli([str(example.path), "--out", str(tmp_path)])

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["schema_version"] == 1
    assert summary["workload"] == "script"
    assert summary["simulated_ns"] > 0
    assert [r["rank"] for r in summary["ranks"]] == list(range(example.world_size))
    for rank in summary["ranks"]:
        assert rank["kernels"] > 0
        assert (rank["collectives"] > 0) == (example.world_size > 1)

    live = summary["dedup"].get("live_ranks", list(range(example.world_size)))
    assert live[0] == 0 and len(live) <= example.world_size
    logs = {rank: (tmp_path / "ranks" / f"rank{rank}.log").read_text() for rank in live}
    steps = parse_steps(logs[0])
    expected_steps = int(example.args[example.args.index("--steps") + 1])
    assert [s.step for s in steps] == list(range(1, expected_steps + 1))
    for step in steps:
        assert step.gpu_ms is not None and step.gpu_ms > 0, "CUDA events must time the step"
        assert step.wall_ms > 0
    # the script's perf_counter reads virtual time, which the run as a whole covers
    assert sum(s.wall_ms for s in steps) * 1e6 <= summary["simulated_ns"]
    _check_attribution(summary["attribution"], steps, expected_steps)
    for rank, log in logs.items():
        peak = peak_memory_line(log, rank)
        assert peak is not None and peak.endswith(" GiB") and float(peak.split()[0]) > 0, (
            f"rank {rank} saw no GPU memory: {peak!r}")

    kernels = trace_spans(tmp_path, "kernel")
    assert {e["pid"] for e in kernels} == set(live), "kernels of every live rank"
    assert {"aten::mm", "aten::addmm"} & {e["name"] for e in kernels}, "kernels by aten name"
    if example.world_size > 1:
        collectives = trace_spans(tmp_path, "collective")
        assert collectives and all(e["args"]["bytes"] > 0 for e in collectives)
        assert {e["pid"] for e in collectives} == set(live)
    if summary["dedup"]:
        _check_chakra_export(tmp_path, example.world_size, run_cli)
