"""The host-time constants fitted on real steps (``intercept.host_time.host_fit``) and the fit
itself (``scripts/measure/fit_host_time.py``)."""

import json
from pathlib import Path

import pytest

from hwmodel.measured.tables import HOST_FIT
from intercept.host_time.host_fit import fit_from_json, load_fit

from scripts.measure import fit_host_time

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_fit_names_its_real_steps() -> None:
    fit = load_fit()
    assert fit.reference == "h100-host"
    assert fit.python_cold_factor > 1  # code in a training step runs colder than in a loop
    assert fit.tensor_subclass_ns > 0
    assert fit.provenance["real_steps"] and fit.provenance["cases"]


def test_a_fit_without_a_key_or_with_a_bad_value_is_refused() -> None:
    data = json.loads(HOST_FIT.path.read_text())
    with pytest.raises(ValueError, match="'python_cold_factor' is missing"):
        fit_from_json({k: v for k, v in data.items() if k != "python_cold_factor"})
    with pytest.raises(ValueError, match="must be > 0"):
        fit_from_json({**data, "python_cold_factor": 0})
    with pytest.raises(ValueError, match="'autograd_node_ns' is missing"):
        fit_from_json({k: v for k, v in data.items() if k != "autograd_node_ns"})


def test_the_fit_recovers_the_multipliers_that_made_the_real_steps() -> None:
    # simulated with the shipped constants; real steps as if Python cost 2.5x, DTensor 4x and
    # an autograd node 0.5x what they were charged
    parts = {"single": (10.0, (1.0, 0.0, 4.0)), "ddp": (12.0, (1.5, 0.0, 3.0)),
             "fsdp2": (15.0, (6.0, 0.5, 2.0)), "tp": (30.0, (5.0, 10.0, 3.5))}
    truth = (2.5, 4.0, 0.5)
    cases = [fit_host_time.FitCase(name, 0.0, sim, scaled) for name, (sim, scaled) in parts.items()]
    cases = [fit_host_time.FitCase(c.script, c.predicted_ms(truth), c.simulated_ms, c.scaled_ms)
             for c in cases]
    assert fit_host_time.fit(cases) == pytest.approx(truth)
    without_dtensor = [c for c in cases if c.scaled_ms[1] == 0]
    cold, subclass, node = fit_host_time.fit(without_dtensor)
    assert (cold, node) == (pytest.approx(2.5), pytest.approx(0.5)) and subclass == 1.0
    # a held constant stays at its value and the free ones absorb the rest; one left out of
    # the fit keeps its multiplier
    assert fit_host_time.fit(cases, held={2: 0.5}) == pytest.approx(truth)
    assert fit_host_time.fit(cases, held={2: 0.8})[2] == 0.8
    assert fit_host_time.fit(cases, free=(0, 1))[2] == 1.0


def test_the_real_steps_record_is_read_with_its_arguments(tmp_path: Path) -> None:
    args, real = fit_host_time.read_real(REPO / HOST_FIT.source.file)
    assert "--n-layer" in args and set(real) == {"gpt_tp", "gpt_fsdp2", "gpt_ddp", "gpt_single"}
    bad = tmp_path / "real.txt"
    bad.write_text("gpt_tp 1.0\n")
    with pytest.raises(SystemExit, match="no '# M="):
        fit_host_time.read_real(bad)

