"""The host-profile measuring (``intercept.host_time.mechanisms``) on a machine without a CUDA GPU:
run as the command runs it, in a fresh process, it writes the probe and the CPU mechanisms and
says which it skipped."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from intercept.host_time.host_benchmark import COMPONENTS
from intercept.host_time.mechanisms import MECHANISMS

ROOT = Path(__file__).resolve().parents[2]
CPU_KEYS = {"script_call_ns", "python_line_ns", "python_call_ns"}


def test_the_cpu_path_writes_the_probe_and_the_cpu_mechanisms(tmp_path: Path) -> None:
    out = tmp_path / "mechanisms.json"
    result = subprocess.run(
        [sys.executable, "-m", "intercept.host_time.mechanisms", "--out", str(out),
         "--rounds", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    profile = json.loads(out.read_text())

    assert set(profile["probe_ns"]) == set(COMPONENTS)
    assert all(isinstance(ns, int) and ns > 0 for ns in profile["probe_ns"].values())
    assert profile["probe_rounds"] and all(set(r) == set(COMPONENTS)
                                           for r in profile["probe_rounds"])
    assert profile["cuda"] is False and profile["gpu"] is None
    assert profile["cpus"] >= 1 and profile["cpu"] and profile["torch"] and profile["python"]

    measured = profile["measured"]
    assert set(measured) == CPU_KEYS
    assert all(value > 0 for value in measured.values()), measured
    assert isinstance(measured["script_call_ns"], int)
    cuda_keys = {key for m in MECHANISMS if m.needs_cuda for key in m.keys}
    assert cuda_keys and not cuda_keys & set(measured)
    for mechanism in MECHANISMS:
        if mechanism.needs_cuda:
            assert f"skipped {', '.join(mechanism.keys)}: no CUDA GPU" in result.stderr, \
                result.stderr

    assert profile["cases"]
    for row in profile["cases"]:
        assert set(row) == {"mechanism", "case", "us_median", "us_min", "rounds", "calls"}
        assert row["rounds"] == 2 and 0 < row["us_min"] <= row["us_median"]
        assert f"{row['mechanism']} {row['case']}: " in result.stderr


class _NoisyTimer:
    """Times the two Python cases so that their two-case solve gives a negative call weight."""

    def __init__(self) -> None:
        self.calls = 0

    def ns(self, *args: object, **kwargs: object) -> float:
        self.calls += 1
        return 1_000_000.0 if self.calls == 1 else 10.0


def test_python_weights_stay_positive_when_noise_tips_the_solve() -> None:
    from intercept.host_time.mechanisms import python_weights
    from intercept.host_time.python_work import load_weights

    weights = python_weights(_NoisyTimer())  # type: ignore[arg-type]
    reference = load_weights()
    assert weights["python_line_ns"] > 0 and weights["python_call_ns"] > 0
    assert weights["python_call_ns"] / weights["python_line_ns"] == pytest.approx(
        reference.call_ns / reference.line_ns, rel=0.01)
