"""TorchTitan's own entry point (``python -m torchtitan.train``) and toml configs run
unmodified on the simulator: every bundled TorchTitan scenario trains its steps, its log lines
read virtual time, and the collectives its parallelism needs reach the network model.
Needs ``pip install -e ".[frameworks]"``."""

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.live_examples import ROOT, needs_framework, trace_spans

pytestmark = needs_framework("torchtitan")

EXAMPLES = ROOT / "scenarios" / "examples"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"step:\s+(\d+)\s+loss:.*?tps:\s+([\d,]+)")
STEPS = 4


def run(run_cli: Callable[[list[str]], None], name: str, out: Path) -> tuple[dict, list[str]]:
    """summary.json and the per-rank logs of one bundled TorchTitan scenario."""
    run_cli([str(EXAMPLES / f"{name}.yaml"), "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    logs = [ANSI.sub("", (out / "ranks" / f"rank{r['rank']}.log").read_text())
            for r in summary["ranks"]]
    return summary, logs


def ops_by_rank(summary: dict, out: Path) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {r["rank"]: set() for r in summary["ranks"]}
    for event in trace_spans(out, "collective"):
        found[event["pid"]].add(event["name"].split()[0])
    return found


def assert_trained(summary: dict, logs: list[str], logging_ranks: list[int]) -> None:
    for rank in logging_ranks:
        steps = [(int(s), int(t.replace(",", ""))) for s, t in STEP.findall(logs[rank])]
        assert [s for s, _ in steps] == list(range(1, STEPS + 1)), logs[rank][-2000:]
        assert all(tps > 0 for _, tps in steps)
    assert "Training completed" in logs[0]
    assert not any("the simulator does not know" in log for log in logs), \
        "a value TorchTitan steers by was read as a placeholder"
    coverage = summary["compute_coverage"]
    assert coverage["by_source"].get("unknown-op", {"share": 0})["share"] < 0.001
    assert all(r["kernels"] > 0 for r in summary["ranks"])


@pytest.mark.slow
def test_fsdp2_gathers_parameters_and_scatters_gradients(run_cli: Callable, tmp_path: Path) -> None:
    summary, logs = run(run_cli, "h100x2-torchtitan-llama3-fsdp2", tmp_path)
    assert_trained(summary, logs, [0, 1])
    for ops in ops_by_rank(summary, tmp_path).values():
        assert {"all_gather", "reduce_scatter"} <= ops
    assert (tmp_path / "torchtitan").is_dir(), "{out} in args is the run's output folder"


@pytest.mark.slow
def test_fsdp2_with_tensor_parallel(run_cli: Callable, tmp_path: Path) -> None:
    summary, logs = run(run_cli, "h100x4-torchtitan-llama3-fsdp2-tp2", tmp_path)
    assert_trained(summary, logs, [0, 1, 2, 3])
    for ops in ops_by_rank(summary, tmp_path).values():
        # FSDP over the data-parallel pair, sequence-parallel TP gathers and scatters activations
        assert {"all_gather", "reduce_scatter"} <= ops


@pytest.mark.slow
def test_pipeline_1f1b_sends_activations_between_stages(run_cli: Callable,
                                                       tmp_path: Path) -> None:
    summary, logs = run(run_cli, "h100x2-torchtitan-llama3-pp-1f1b", tmp_path)
    assert_trained(summary, logs, [1])  # TorchTitan logs the loss on the last stage
    for ops in ops_by_rank(summary, tmp_path).values():
        assert {"send", "recv"} <= ops  # activations forward, gradients back


@pytest.mark.slow
def test_compile_runs_generated_kernels(run_cli: Callable, tmp_path: Path) -> None:
    summary, logs = run(run_cli, "h100x2-torchtitan-llama3-fsdp2-compile", tmp_path)
    assert_trained(summary, logs, [0, 1])
    names = {e["name"] for e in trace_spans(tmp_path, "kernel")}
    assert any(name.startswith("inductor::") for name in names), sorted(names)[:20]
