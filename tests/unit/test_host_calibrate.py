"""``phantora-ns3 calibrate --host-out``: a host profile fitted from the CPU side of a stored
real H100 trace (GPT-2 124M, one training step, ``scripts/data/traces/h100x1/``) loads as a
``cluster.host`` profile, holds what the trace timed and says what came from its reference."""

import gzip
import json
from pathlib import Path

import pytest

from hwmodel.measured.host_profile import load_profile
from hwmodel.measured.host_references import references
from intercept.host_time.host_profile_costs import table_for_profile
from phantora.cli import main
from phantora.profiles.kineto import PROFILER_NS_PER_EVENT

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "scripts" / "data" / "traces" / "h100x1" / "h100x1_gpt2-124m-b8" / "rank0.json.gz"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not TRACE.is_file():
        pytest.skip(f"{TRACE} not stored in this checkout")
    out = tmp_path_factory.mktemp("host") / "h100-traced.json"
    assert main(["calibrate", str(TRACE), "--host-out", str(out)]) == 0
    return out


def test_the_profile_holds_the_traces_op_families_and_their_calls(fitted: Path) -> None:
    profile = load_profile(fitted)
    assert profile.name == "h100-traced" and profile.reference == "h100-host"
    families = profile.measured["families_ns"]
    # one launch per op, a few us each as recorded; an op costs the host 5-60 us, a view 0.5-5
    assert {"matmul", "matmul_bias", "elementwise", "view"} <= set(families)
    assert 5_000 < families["matmul"] < 60_000 and 500 < families["view"] < 5_000
    fitted_rows = profile.provenance["fitted"]
    assert fitted_rows["families_ns.matmul"]["calls"] > 100  # 12 layers x mm forward, backward
    # the profiler's estimate is taken off per runtime call inside the op (one launch)
    assert fitted_rows["families_ns.matmul"]["profiler_ns"] == PROFILER_NS_PER_EVENT
    launch = profile.provenance["launch"]
    assert launch["calls"] > 500 and 2_000 < launch["median_recorded_ns"] < 30_000
    assert profile.provenance["python_gaps"]["gaps"] > 100
    # too few calls in one step, the optimizer's tensor-list ops and the Python: the reference's
    sources = profile.sources()
    assert "fewer than 5" in sources["families_ns.softmax"]
    assert "tensor-list" in sources["families_ns.foreach"]
    assert sources["python"].startswith("h100-host's")
    # no probe in a trace: the reference's, said so
    assert profile.probe_ns == references().hosts["h100-host"].components_ns
    assert "not measured" in sources["host-speed probe"]


def test_a_scenario_charges_the_fitted_families(fitted: Path) -> None:
    from phantora.scenario import load_scenario

    scenario = fitted.parent / "run.yaml"
    scenario.write_text(f"cluster: {{gpu: h100, gpus_per_host: 1, host: {fitted.name}}}\n"
                        "workload: {script: train.py}\n")
    (fitted.parent / "train.py").write_text("")
    assert load_scenario(scenario).cluster.host == str(fitted.resolve())
    profile = load_profile(fitted)
    table = table_for_profile(profile)
    for family, ns in profile.measured["families_ns"].items():
        assert table.families_ns[family] == ns
    assert table.provenance["host_profile"] == str(fitted.resolve())


def test_a_trace_without_cpu_ops_is_refused_naming_the_file(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    if not TRACE.is_file():
        pytest.skip(f"{TRACE} not stored in this checkout")
    with gzip.open(TRACE, "rt") as handle:
        document = json.load(handle)
    document["traceEvents"] = [e for e in document["traceEvents"] if e.get("cat") != "cpu_op"]
    gpu_only = tmp_path / "gpu-only.json"
    gpu_only.write_text(json.dumps(document))
    assert main(["calibrate", str(gpu_only), "--host-out", str(tmp_path / "h.json")]) == 1
    err = capsys.readouterr()
    assert "gpu-only.json: no CPU ops recorded" in err.out + err.err
    assert not (tmp_path / "h.json").exists()


def test_calibrate_needs_an_output_and_a_gpu_for_the_kernel_table(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_code:
        main(["calibrate", str(TRACE)])
    assert exit_code.value.code == 2
    assert "--host-out FILE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["calibrate", str(TRACE), "--out", "x.json"])
    assert "--out needs --gpu NAME" in capsys.readouterr().err
