"""``phantora-ns3 diff`` on whole-run profiles of real H100 runs: a profiler around the whole
script, no schedule and no ``ProfilerStep`` ranges (``scripts/measure/profile_run.py
--whole-run``, as ``docs/diff.md``'s snippet records it), against a fresh simulation of the same
script. Steps are cut at the optimizer's step ranges; the first optimizer step ends training
step 1, so a 4-step run compares steps 2-4."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from phantora.cli import main
from tests.integration.live_examples import ROOT, needs_framework

TRACES = ROOT / "scripts" / "data" / "traces" / "h100x1"
ZOO_SCRIPT = ROOT / "scenarios" / "examples" / "zoo_train.py"


def _diff(tmp_path: Path, run: str, args: list[str]) -> dict[str, Any]:
    traces = sorted((TRACES / f"h100x1_whole-run-{run}").glob("rank*.json.gz"))
    if not traces:
        pytest.skip(f"no stored whole-run trace h100x1_whole-run-{run} in this checkout")
    scenario = {"name": run, "cluster": {"gpu": "h100", "hosts": 1, "gpus_per_host": 1},
                "workload": {"script": str(ZOO_SCRIPT), "args": args, "nproc_per_node": 1,
                             "env": {"OMP_NUM_THREADS": "1"}}}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    assert main([str(path), "--out", str(tmp_path / "run")]) == 0
    assert main(["diff", *map(str, traces), str(tmp_path / "run"),
                 "--out", str(tmp_path / "diff")]) == 0
    return json.loads((tmp_path / "diff" / "diff.json").read_text())


def _gpu_ns(mean: dict[str, Any], side: str) -> int:
    return sum(row[f"{side}_ns"] for row in mean["families"])


@needs_framework("transformers")
def test_whole_run_of_a_hugging_face_llama_is_cut_at_its_optimizer_steps(tmp_path: Path) -> None:
    document = _diff(tmp_path, "hf-llama-ci", ["--model", "hf-llama", "--size", "ci",
                                               "--steps", "4"])
    assert [trace["step_cut"] for trace in document["traces"]] == ["Optimizer.step#AdamW.step"]
    assert [step["training_step"] for step in document["steps"]] == [2, 3, 4]
    assert all(step["match"] == "same step" for step in document["steps"])


def test_whole_run_of_an_lstm_puts_cudnn_beside_its_simulation(tmp_path: Path) -> None:
    """The LSTM runs cuDNN's recurrent kernels on both sides: the GPU time a step launches
    agrees within 10% (real 11.6 ms, simulated 11.9 ms when recorded); its host, which cuDNN
    keeps busy enqueueing one step at a time, is what the profiler slows."""
    document = _diff(tmp_path, "torch-lstm", ["--model", "torch-lstm", "--steps", "4"])
    assert [step["training_step"] for step in document["steps"]] == [2, 3, 4]
    mean = document["mean"]
    assert _gpu_ns(mean, "sim") == pytest.approx(_gpu_ns(mean, "real"), rel=0.1)
