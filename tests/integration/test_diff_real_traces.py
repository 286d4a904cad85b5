"""``phantora-ns3 diff`` on stored traces of real H200 runs (``scripts/data/traces/``, recorded
by ``scripts/measure/profile_run.py``) against a fresh simulation of the same script: GPT-2
124M, batch 8, on one GPU and with DDP on four. The profiled step itself is slower than the
simulated one (the profiler's host overhead, ``docs/diff.md``); what must agree is the work:
GPU time by kernel family, the collectives launched and how long they move data."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from phantora.cli import main
from tests.integration.live_examples import ROOT, SCENARIO_DIR

TRACES = ROOT / "scripts" / "data" / "traces"
MACHINE = "h200x4"
"""The host the traces were recorded on: four H200s (one of them for the one-GPU case)."""
FAMILY_TOLERANCE = 0.25
"""Largest relative difference of a family's GPU time (those above 1 ms a step)."""


def _traces(case: str) -> list[Path]:
    if not TRACES.is_dir():
        pytest.skip(f"{TRACES} not stored in this checkout")
    found = sorted(TRACES.glob(f"**/{MACHINE}_{case}/rank*.json.gz"))
    assert found, f"no stored trace of {MACHINE}_{case} under {TRACES}"
    return found


def _diff(tmp_path: Path, scenario: dict[str, Any], traces: list[Path]) -> dict[str, Any]:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    run = tmp_path / "run"
    assert main([str(path), "--out", str(run)]) == 0
    assert main(["diff", *map(str, traces), str(run), "--out", str(tmp_path / "diff")]) == 0
    return json.loads((tmp_path / "diff" / "diff.json").read_text())


def _scenario(name: str, gpus: int) -> dict[str, Any]:
    """The accuracy scenario ``name`` on ``gpus`` H200s, its script given by absolute path."""
    scenario = yaml.safe_load((SCENARIO_DIR / "accuracy" / f"{name}.yaml").read_text())
    workload = scenario["workload"]
    workload["script"] = str((SCENARIO_DIR / "accuracy" / workload["script"]).resolve())
    workload["nproc_per_node"] = gpus
    scenario["cluster"]["gpus_per_host"] = gpus
    return scenario


def _families_agree(mean: dict[str, Any]) -> None:
    for row in mean["families"]:
        if row["family"] != "communication" and max(row["real_ns"], row["sim_ns"]) > 1e6:
            assert row["sim_ns"] == pytest.approx(row["real_ns"], rel=FAMILY_TOLERANCE), row


def test_one_gpu_gpt2_against_its_simulation(tmp_path: Path) -> None:
    traces = _traces("gpt2-124m-b8")
    document = _diff(tmp_path, _scenario("h200x1-gpt2-124m-b8", 1), traces)
    (step,) = document["steps"]
    assert (step["training_step"], step["sim_steps"], step["match"]) == (6, [6], "same step")
    mean = document["mean"]
    _families_agree(mean)
    real = sum(r["real_ns"] for r in mean["families"])
    assert sum(r["sim_ns"] for r in mean["families"]) == pytest.approx(real, rel=0.1)
    assert {r["family"] for r in mean["families"]} >= {"gemm", "attention", "norm",
                                                       "elementwise", "optimizer"}


def test_four_gpu_ddp_collectives_match_in_count_and_transfer(tmp_path: Path) -> None:
    traces = _traces("ddp-gpt2-124m-b8")
    assert len(traces) == 4
    document = _diff(tmp_path, _scenario("h200x2-ddp-gpt2-124m-b8", 4), traces)
    assert sorted(row["rank"] for row in document["steps"]) == [0, 1, 2, 3]
    mean = document["mean"]
    _families_agree(mean)
    rows = mean["collectives"]
    assert rows and all(r["real_count"] == r["sim_count"] for r in rows), rows
    large = [r for r in rows if r["bytes"] >= 1 << 20]
    assert large
    for row in large:  # DDP's gradient buckets: waiting aside, NVLink moves them alike
        assert row["sim_mean_transfer_ns"] == pytest.approx(row["real_mean_transfer_ns"],
                                                            rel=0.5), row
