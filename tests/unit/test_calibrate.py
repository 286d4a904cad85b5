"""``phantora-ns3 calibrate``: kernel rows from a trace (per-call sums, medians over repeats,
host copies and unkeyable calls left out), the refusals (another GPU, nothing usable, no
roofline to fit), the file and its errors, and how the compute model costs from it (sources,
reach, another GPU by the spec sheets); ``cluster.calibration`` in a scenario."""

import json
from pathlib import Path
from typing import Any

import pytest

from hwmodel.measured.gpu import KERNEL_GAP_NS
from hwmodel.catalogue import CATALOGUE
from hwmodel.compute.calibrated import Calibration
from hwmodel.compute.model import ComputeModel, CostSource
from hwmodel.compute.spec import KernelSpec
from hwmodel.errors import CalibrationError, ProfileError, ScenarioError
from phantora.cli import main
from phantora.profiles.calibrate import calibrate
from phantora.profiles.kineto import read_trace
from phantora.scenario import parse_scenario
from tests.unit.kineto_traces import TraceBuilder

H100 = CATALOGUE["h100"]
BF16 = "c10::BFloat16"


def _mm(trace: TraceBuilder, at: float, dur: float) -> None:
    trace.host("aten::mm", at, 20.0, **{"Input Dims": [[8192, 768], [768, 2304]],
                                        "Input type": [BF16, BF16],
                                        "Input Strides": [[768, 1], [1, 768]],
                                        "Concrete Inputs": ["", ""], "External id": at})
    trace.kernel("nvjet_sm90_gemm", at + 1.0, at + 30.0, dur)


def _add(trace: TraceBuilder, at: float, durations: tuple[float, ...], numel: int) -> None:
    """An ``add`` of two bf16 vectors whose call launches ``durations`` kernels."""
    trace.host("aten::add", at, 20.0, **{"Input Dims": [[numel], [numel], []],
                                         "Input type": [BF16, BF16, "Scalar"],
                                         "Input Strides": [[1], [1], []],
                                         "Concrete Inputs": ["", "", "1"], "External id": at})
    for index, duration in enumerate(durations):
        trace.kernel("vectorized_elementwise_kernel", at + 1.0 + index, at + 30.0 + 10 * index,
                     duration)


def _training_trace(device: str = H100.marketing_name) -> TraceBuilder:
    trace = TraceBuilder(device_name=device)
    trace.step(6, 0.0, 2000.0)
    _mm(trace, 10.0, 100.0)
    _mm(trace, 200.0, 120.0)
    _mm(trace, 400.0, 400.0)  # the same shape thrice: one row, the median
    _add(trace, 900.0, (100.0, 40.0), 1 << 26)  # one call, two kernels: a row of their sum
    _add(trace, 950.0, (2.0,), 1 << 20)  # the fastest kernel: every kernel's floor
    trace.host("aten::_to_copy", 1000.0, 50.0, **{"Input Dims": [[1024]],
                                                  "Input type": ["long int"]})
    trace.kernel("Memcpy HtoD (Pageable -> Device)", 1001.0, 1100.0, 30.0, cat="gpu_memcpy")
    trace.host("aten::_fused_adamw_", 1200.0, 50.0, **{"Input Dims": [[], []],
                                                       "Input type": ["TensorList",
                                                                      "TensorList"]})
    trace.kernel("multi_tensor_apply_kernel", 1201.0, 1300.0, 500.0)
    return trace


def _calibration(tmp_path: Path, trace: TraceBuilder | None = None) -> Calibration:
    path = (trace or _training_trace()).write(tmp_path / "rank0.json.gz")
    return calibrate([read_trace(path)], H100)


def test_rows_hold_each_calls_kernels_and_the_median_of_repeats(tmp_path: Path) -> None:
    calibration = _calibration(tmp_path)
    rows = {row["aten_ops"]: row for row in calibration.kernels if row["time_us"] > 2}
    # no host copy, no tensor-list optimizer step
    assert sorted(row["aten_ops"] for row in calibration.kernels) == ["add", "add", "mm"]
    mm = rows["mm"]
    assert (mm["section"], mm["shape"], mm["repeats"], mm["time_us"], mm["flops"]) == (
        "matmul", {"m": 8192, "n": 2304, "k": 768, "layout": "nt"}, 3, 120.0,
        2 * 8192 * 2304 * 768)
    add = rows["add"]
    assert add["section"] == "memory" and add["bytes"] == 3 * 2 * (1 << 26)
    assert add["time_us"] == pytest.approx(140.0 + KERNEL_GAP_NS.value / 1e3)
    assert calibration.gpu == "h100"
    trace = calibration.traces[0]
    assert trace["left_to_roofline_ns"] == {"aten::_fused_adamw_": 500_000}
    assert trace["used_share"] == pytest.approx(0.6053, abs=1e-3)  # (620+141.8+2)/(...+500)


def test_a_trace_of_another_gpu_is_refused_naming_the_right_one(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"recorded on NVIDIA H200, not the h100 .*"
                                           r"calibrate it with --gpu h200"):
        _calibration(tmp_path, _training_trace(device="NVIDIA H200"))


def test_traces_without_usable_kernels_are_refused(tmp_path: Path) -> None:
    trace = TraceBuilder(device_name=H100.marketing_name)
    trace.host("aten::_fused_adamw_", 0.0, 50.0, **{"Input type": ["TensorList"]})
    trace.kernel("multi_tensor_apply_kernel", 1.0, 10.0, 500.0)
    trace.kernel("triton_poi_fused_add_0", 100.0, 600.0, 5.0)  # no aten op around its launch
    with pytest.raises(ProfileError, match="no kernel launched by an aten op whose inputs"):
        _calibration(tmp_path, trace)


def test_traces_without_matrix_products_leave_no_roofline_to_fit(tmp_path: Path) -> None:
    trace = TraceBuilder(device_name=H100.marketing_name)
    _add(trace, 0.0, (40.0,), 1 << 20)
    with pytest.raises(ProfileError, match="no matrix products or attention"):
        _calibration(tmp_path, trace)


def test_an_unknown_gpu_lists_the_catalogue(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    trace = _training_trace().write(tmp_path / "rank0.json.gz")
    assert main(["calibrate", str(trace), "--gpu", "h300", "--out", str(tmp_path / "c.json")]) == 1
    assert "unknown GPU 'h300'; the catalogue has: a100-80g, b200, h100" in capsys.readouterr().out
    assert main(["calibrate", str(trace), "--gpu", "H100", "--out", str(tmp_path / "c.json")]) == 0
    assert Calibration.load(tmp_path / "c.json").gpu == "h100"


def test_the_file_round_trips_and_a_bad_one_says_what_is_wrong(tmp_path: Path) -> None:
    calibration = _calibration(tmp_path)
    path = tmp_path / "calibration.json"
    calibration.write(path)
    assert Calibration.load(path).document() == calibration.document()
    document = json.loads(path.read_text())
    for change, message in (({"format": "x"}, "not a kernel calibration file"),
                            ({"version": 99}, "format version 99"),
                            ({"gpu": "h300"}, "gpu 'h300' is not in the catalogue"),
                            ({"kernels": [{"section": "matmul"}]}, "damaged calibration")):
        path.write_text(json.dumps({**document, **change}))
        with pytest.raises(CalibrationError, match=message):
            Calibration.load(path)
    with pytest.raises(CalibrationError, match="no such file"):
        Calibration.load(tmp_path / "missing.json")


def _model(tmp_path: Path, gpu: str) -> ComputeModel:
    path = tmp_path / "calibration.json"
    _calibration(tmp_path).write(path)
    return ComputeModel.for_gpu(CATALOGUE[gpu], path)


MM = KernelSpec("aten::mm", 2 * 8192 * 2304 * 768, 2 * (8192 * 768 + 768 * 2304 + 8192 * 2304),
                "bf16", (1, 8192, 2304, 768), "nt")
ADD = KernelSpec("aten::add", 0, 3 * 2 * (1 << 26), "bf16")


def test_kernels_are_costed_from_the_calibration_first_then_its_roofline(
        tmp_path: Path) -> None:
    model = _model(tmp_path, "h100")
    assert model.cost(MM).duration_ns == 120_000
    assert model.cost(MM).source is CostSource.CALIBRATED
    near = model.cost(KernelSpec("aten::add", 0, 3 * 2 * (3 << 24), "bf16"))
    assert near.source is CostSource.CALIBRATED_INTERPOLATED
    # far below the rows' sizes, the add curve says nothing: the roofline fitted to them
    small = model.cost(KernelSpec("aten::add", 0, 3 * 2 * 1024, "bf16"))
    assert small.source is CostSource.CALIBRATED_ROOFLINE
    assert model.cost(KernelSpec("aten::gelu", 0, 1 << 26, "bf16")).source is \
        CostSource.CALIBRATED_ROOFLINE
    assert CostSource.CALIBRATED.from_table and not CostSource.CALIBRATED_ROOFLINE.from_table
    # Inductor's element-wise kernels (no rows from a trace): at the streaming ops' rate
    generated = KernelSpec("inductor::triton_pointwise", 0, 1 << 26, "bf16")
    assert model.curves.streaming is not None
    assert model.cost(generated).duration_ns == model.curves.memory_ns(1 << 26, H100,
                                                                       streaming=True)


def test_another_gpu_moves_each_kernels_roofline_bound_by_the_spec_sheets(
        tmp_path: Path) -> None:
    h100, h200 = _model(tmp_path, "h100"), _model(tmp_path, "h200")
    # the same tensor peak: a large product takes as long
    assert h200.cost(MM).duration_ns == h100.cost(MM).duration_ns
    # a streaming op: the bound moves with the HBM bandwidth, the rest of its time stays
    bound_h100, bound_h200 = ADD.bytes / H100.hbm_gbs, ADD.bytes / CATALOGUE["h200"].hbm_gbs
    expected = h100.cost(ADD).duration_ns - bound_h100 + bound_h200
    assert h200.cost(ADD).duration_ns == pytest.approx(expected, abs=1)
    assert h200.cost(ADD).source is CostSource.CALIBRATED


def _scenario(calibration: str) -> dict[str, Any]:
    return {"cluster": {"gpu": "h200", "gpus_per_host": 1, "calibration": calibration},
            "workload": {"collectives": {"ops": ["all_reduce"], "sizes": [1 << 20]}}}


def test_a_scenario_names_the_file_relative_to_itself(tmp_path: Path) -> None:
    _calibration(tmp_path).write(tmp_path / "tables" / "h100.json")
    scenario = parse_scenario(_scenario("tables/h100.json"), str(tmp_path / "s.yaml"))
    assert scenario.cluster.calibration == str(tmp_path / "tables" / "h100.json")
    with pytest.raises(ScenarioError, match=r'cluster.calibration: got "nope.json"; .*no such '
                                            r"file.*relative to the scenario file's folder"):
        parse_scenario(_scenario("nope.json"), str(tmp_path / "s.yaml"))
