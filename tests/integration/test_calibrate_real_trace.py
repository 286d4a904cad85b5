"""``phantora-ns3 calibrate`` on a stored real H100 trace (the CI GPT's training step,
``scripts/data/traces/h100x1/``), then the same script simulated with ``cluster.calibration``:
the ranks cost kernels from the calibration (none from the packaged tables), nearly all of
them from its rows exactly, and a steady step's kernels add up to the traced step's."""

import json
from pathlib import Path

import pytest
import yaml

from measurements.step_kernels import simulated_step_kernel_ms, traced_step_kernel_ms
from phantora.cli import main
from tests.integration.live_examples import ROOT, SCENARIO_DIR

TRACE = ROOT / "scripts" / "data" / "traces" / "h100x1" / "h100x1_ci-h100x1-gpt-single" / \
    "rank0.json.gz"
CALIBRATED_SOURCES = {"calibrated", "calibrated-interpolated", "calibrated-roofline",
                      "unknown-op", "host-transfer"}
STEP_TOLERANCE = 0.15
"""Largest relative difference of a steady step's summed kernel time from the traced step's."""


def test_a_script_is_simulated_from_its_own_traces_calibration(tmp_path: Path) -> None:
    if not TRACE.is_file():
        pytest.skip(f"{TRACE} not stored in this checkout")
    calibration = tmp_path / "tables" / "h100-ci.json"
    assert main(["calibrate", str(TRACE), "--gpu", "h100", "--out", str(calibration)]) == 0
    scenario = yaml.safe_load((SCENARIO_DIR / "accuracy" /
                               "h100x1-ci-h100x1-gpt-single.yaml").read_text())
    workload = scenario["workload"]
    workload["script"] = str((SCENARIO_DIR / "accuracy" / workload["script"]).resolve())
    workload["args"] = ["--steps", "3", "--grad-accum", "2", "--num-workers", "0"]
    scenario["cluster"]["calibration"] = "tables/h100-ci.json"
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    run = tmp_path / "run"
    assert main([str(path), "--out", str(run)]) == 0

    coverage = json.loads((run / "summary.json").read_text())["compute_coverage"]
    assert coverage["calibration"] == str(calibration)
    assert set(coverage["by_source"]) <= CALIBRATED_SOURCES  # the packaged tables unused
    device_ns = sum(t["time_ns"] for s, t in coverage["by_source"].items()
                    if s != "host-transfer")
    assert coverage["by_source"]["calibrated"]["time_ns"] / device_ns > 0.8
    assert simulated_step_kernel_ms(run) == pytest.approx(traced_step_kernel_ms(TRACE),
                                                          rel=STEP_TOLERANCE)
