"""The compute model: measured tables, interpolation, fitted fallback, coverage."""

import json
from typing import Any

import numpy as np
import pytest

from hwmodel.measured.gpu import HOST_LINK_GBS
from hwmodel.catalogue import lookup_gpu
from hwmodel.compute import ComputeModel, CostSource, Coverage, KernelSpec
from hwmodel.compute.inductor import generated_kernel
from hwmodel.compute.model import HOST_COPY_LATENCY_NS, table_path
from hwmodel.compute.ops import base_name, is_memory_bound
from hwmodel.compute.spec import MEMCPY_HTOD, STRIDED, Family, rnn_flops
from hwmodel.compute.table import (ALIGNED_BYTES, TRITON_ROWS, Estimate, KernelTable,
                                   MeasuredRow, matmul_alignment)

H100 = lookup_gpu("h100")
H200 = lookup_gpu("h200")
A100 = lookup_gpu("a100-80g")


@pytest.fixture(scope="module")
def h100() -> ComputeModel:
    return ComputeModel.for_gpu(H100)


def mm(m: int, n: int, k: int, dtype: str = "bf16", layout: str = "nt") -> KernelSpec:
    return KernelSpec("aten::mm", 2 * m * n * k, 2 * (m * k + k * n + m * n), dtype,
                      (1, m, n, k), layout)


def test_a_measured_shape_costs_its_measured_time(h100: ComputeModel) -> None:
    row = next(r for r in h100.table.rows  # type: ignore[union-attr]
               if r.aten_ops == "mm" and r.dtype == "bf16" and r.cold)
    _, m, n, k = row.dims
    cost = h100.cost(mm(m, n, k, layout=row.variant))
    assert cost.source is CostSource.MEASURED
    assert cost.duration_ns == round(row.time_ns)


def test_off_grid_matmuls_are_interpolated_and_grow_with_work(h100: ComputeModel) -> None:
    small, large = h100.cost(mm(3000, 3000, 3000)), h100.cost(mm(6000, 3000, 3000))
    assert small.source is large.source is CostSource.INTERPOLATED
    assert 1.6 < large.duration_ns / small.duration_ns < 2.4
    # 5.4e10 FLOP at 40-90% of the 989 TFLOP/s peak
    assert 54e9 / 890e3 < small.duration_ns < 54e9 / 395e3


def test_interpolation_predicts_the_measured_holdout_matmuls() -> None:
    """The random off-grid shapes of the H100 table, predicted from the rest of it."""
    path = table_path("h100")
    assert path is not None
    rest = KernelTable.load(path, holdout=False)
    model = ComputeModel(H100, rest, ComputeModel.for_gpu(H100).curves)
    errors = []
    for row in KernelTable.load(path).rows:
        if row.holdout and row.aten_ops == "mm" and row.dtype == "bf16":
            _, m, n, k = row.dims
            predicted = model.cost(mm(m, n, k, layout=row.variant))
            assert predicted.source is CostSource.INTERPOLATED
            errors.append(predicted.duration_ns / row.time_ns - 1)
    assert len(errors) > 100
    assert np.median(np.abs(errors)) < 0.12


def test_fp32_without_tf32_runs_far_slower_than_tf32_and_bf16(h100: ComputeModel) -> None:
    times = {dtype: h100.cost(mm(4096, 4096, 4096, dtype)).duration_ns
             for dtype in ("bf16", "tf32", "fp32")}
    assert times["bf16"] < times["tf32"] < times["fp32"]
    assert times["fp32"] > 5 * times["tf32"]


def test_attention_is_costed_from_the_default_backend_rows(h100: ComputeModel) -> None:
    dims = (8, 12, 12, 1024, 1024, 64)
    forward = h100.cost(KernelSpec("aten::_scaled_dot_product_flash_attention", 1, 1,
                                   "bf16", dims, "causal"))
    backward = h100.cost(KernelSpec("aten::_scaled_dot_product_flash_attention_backward", 1,
                                    1, "bf16", dims, "causal"))
    full = h100.cost(KernelSpec("aten::_scaled_dot_product_flash_attention", 1, 1, "bf16",
                                dims, "full"))
    assert forward.source is CostSource.INTERPOLATED
    assert forward.duration_ns < full.duration_ns < 3 * forward.duration_ns
    assert 1.5 < backward.duration_ns / forward.duration_ns < 5


def test_memory_bound_ops_follow_their_measured_bandwidth(h100: ComputeModel) -> None:
    big = h100.cost(KernelSpec("aten::add.Tensor", 0, 3 * 2**30, "bf16"))
    assert big.source in (CostSource.INTERPOLATED, CostSource.MEASURED)
    assert 0.6 < (3 * 2**30 / big.duration_ns) / H100.hbm_gbs < 1.0  # of the HBM peak
    tiny = h100.cost(KernelSpec("aten::add.Tensor", 0, 12, "bf16"))
    assert h100.curves.floor_ns <= tiny.duration_ns < 5_000  # launch-bound, not free


def test_strided_elementwise_ops_take_their_own_measured_rows(h100: ComputeModel) -> None:
    """A rotary embedding's ``x[..., :32] * cos`` runs PyTorch's non-vectorised kernel; only
    ops measured in that layout get its rows, the others stay costed as contiguous."""
    nbytes = 64 * 2**20
    contiguous = h100.cost(KernelSpec("aten::mul", 0, nbytes, "bf16")).duration_ns
    strided = h100.cost(KernelSpec("aten::mul", 0, nbytes, "bf16", variant=STRIDED))
    assert strided.source.from_table and strided.duration_ns > 1.5 * contiguous
    div = KernelSpec("aten::div", 0, nbytes, "bf16")
    assert h100.cost(KernelSpec("aten::div", 0, nbytes, "bf16", variant=STRIDED)) == h100.cost(div)


def test_a_gpu_without_tables_gets_fitted_curves_at_its_own_peaks() -> None:
    a100 = ComputeModel.for_gpu(A100)
    assert a100.table is None and a100.curves.source == "h100"
    gemm = mm(8192, 8192, 8192)
    cost = a100.cost(gemm)
    assert cost.source is CostSource.FITTED
    h100_ns = ComputeModel.for_gpu(H100).cost(gemm).duration_ns
    assert cost.duration_ns / h100_ns == pytest.approx(H100.bf16_tflops / A100.bf16_tflops,
                                                       rel=0.15)


def test_a_power_capped_gpu_gets_the_tensor_rate_its_cap_feeds() -> None:
    """B200 (1000 W) and the 500 W H100 run tensor work at the H100 SXM's TFLOP/s per watt;
    the H100 and the A100 (not power-bound in the model) at their datasheet peaks."""
    b200, grand_teton = lookup_gpu("b200"), lookup_gpu("h100-hbm2e-96g")
    assert H100.tensor_tflops == H100.bf16_tflops and A100.tensor_tflops == A100.bf16_tflops
    assert b200.tensor_tflops == pytest.approx(1000 * 989 / 700)
    assert grand_teton.tensor_tflops == pytest.approx(500 * 989 / 700)
    gemm = mm(8192, 8192, 8192)
    ratio = (ComputeModel.for_gpu(b200).cost(gemm).duration_ns
             / ComputeModel.for_gpu(H100).cost(gemm).duration_ns)
    assert ratio == pytest.approx(H100.bf16_tflops / b200.tensor_tflops, rel=0.15)


def test_unknown_ops_are_costed_by_their_bytes_and_flagged(h100: ComputeModel) -> None:
    unknown = h100.cost(KernelSpec("aten::mystery_op", 0, 1 << 30))
    assert unknown.source is CostSource.UNKNOWN
    assert unknown.duration_ns == h100.curves.memory_ns(1 << 30, H100)
    assert h100.cost(KernelSpec("aten::mystery_op")).duration_ns == h100.curves.floor_ns
    # A known memory-bound op outside the tables is a fitted estimate, not an unknown one.
    assert h100.cost(KernelSpec("aten::flip", 0, 1 << 30)).source is CostSource.FITTED


def test_host_copies_cross_pcie(h100: ComputeModel) -> None:
    cost = h100.cost(KernelSpec(MEMCPY_HTOD, bytes=1 << 30))
    assert cost.source is CostSource.HOST_TRANSFER
    assert cost.duration_ns == HOST_COPY_LATENCY_NS + round((1 << 30) / HOST_LINK_GBS.value)


def test_negative_work_is_rejected(h100: ComputeModel) -> None:
    with pytest.raises(ValueError, match="aten::mm: flops"):
        h100.cost(KernelSpec("aten::mm", -1))


def test_a_spec_names_its_family() -> None:
    assert mm(8, 8, 8).family is Family.MATMUL
    assert KernelSpec("aten::mm").family is Family.OTHER  # no shape: cannot use the tables
    assert KernelSpec("aten::_scaled_dot_product_cudnn_attention_backward",
                      dims=(1, 1, 1, 1, 1, 1)).family is Family.ATTENTION_BWD
    assert KernelSpec(MEMCPY_HTOD).family is Family.HOST_TRANSFER


@pytest.mark.parametrize(("name", "base", "memory_bound"), [
    ("aten::add_.Tensor", "add", True),
    ("aten::rsub.Scalar", "rsub", True),  # 1 - x (Megatron's masks)
    ("aten::_foreach_mul_.Scalar", "_foreach_mul", True),
    ("aten::_fused_adamw_", "_fused_adamw", True),
    ("aten::native_layer_norm_backward", "native_layer_norm_backward", True),
    ("aten::mm", "mm", False),
    ("aten::__and__.Tensor", "__and__", True),  # a dunder keeps its trailing underscores
    ("aten::_safe_softmax", "_safe_softmax", True),  # SDPA's math path in fp32 (TorchTitan PP)
    ("mystery", "mystery", False),
])
def test_op_names_are_normalised_before_lookup(name: str, base: str, memory_bound: bool) -> None:
    assert base_name(name) == base
    assert is_memory_bound(name) is memory_bound


def test_coverage_accounts_time_by_source_and_names_fallback_ops() -> None:
    coverage = Coverage(H100)
    for _ in range(3):
        coverage.record("aten::mm", "measured", 200_000)
    coverage.record("aten::add.Tensor", "interpolated", 400_000)
    coverage.record("aten::mystery_op", "unknown-op", 5_000)
    coverage.record("aten::flip", "fitted-roofline", 1_900)
    summary = coverage.to_dict(top=2)
    assert summary["kernels"] == 6 and summary["time_ns"] == 1_006_900
    assert summary["from_tables_share"] == round(1_000_000 / 1_006_900, 4)
    by_source = summary["by_source"]
    assert list(by_source) == ["measured", "interpolated", "fitted-roofline", "unknown-op"]
    assert by_source["measured"] == {"kernels": 3, "time_ns": 600_000,
                                     "share": round(600_000 / 1_006_900, 4)}
    assert [(op["name"], op["source"], op["kernels"]) for op in summary["top_ops"]] == [
        ("aten::mm", "measured", 3), ("aten::add.Tensor", "interpolated", 1)]
    assert [op["name"] for op in summary["fallback_ops"]] == ["aten::mystery_op", "aten::flip"]
    assert summary["unknown_ops"] == ["aten::mystery_op"]
    with pytest.raises(ValueError):
        coverage.record("aten::mm", "a guess", 1)


def test_the_console_line_names_the_table_share_and_the_largest_fallback() -> None:
    from phantora.report.console import coverage_line
    coverage = Coverage(H100)
    coverage.record("aten::mm", "measured", 900)
    coverage.record("aten::mystery_op", "unknown-op", 100)
    line = coverage_line(coverage.to_dict())
    assert "90% of GPU time from measured tables" in line
    assert "aten::mystery_op 10% (unknown-op)" in line


def test_fallback_share_is_reported_and_warned_about_above_five_percent() -> None:
    coverage = Coverage(H100)
    coverage.record("aten::mm", "measured", 940_000)
    coverage.record("aten::relu_", "fitted-roofline", 40_000)
    coverage.record("aten::mystery_op", "unknown-op", 20_000)
    coverage.record("Memcpy HtoD", "host-transfer", 1_000_000)  # not a fallback: PCIe model
    summary = coverage.to_dict()
    assert summary["fallback_share"] == 0.03
    assert summary["fallback_by_op"] == {"aten::relu_": 0.02, "aten::mystery_op": 0.01}
    assert not summary["fallback_warning"]
    coverage.record("aten::relu_", "fitted-roofline", 100_000)
    assert coverage.to_dict()["fallback_warning"]


def conv(batch: int, cin: int, cout: int, size: int, kernel: int, stride: int,
         backward: bool = False, layout: str = "nhwc") -> KernelSpec:
    out = size // stride
    flops = 2 * batch * out * out * cin * cout * kernel * kernel * (2 if backward else 1)
    name = "aten::convolution_backward" if backward else "aten::convolution"
    return KernelSpec(name, flops, 2 * batch * cin * size * size, "bf16",
                      (batch, cin, cout, size, kernel, stride), layout)


def test_grouped_convolutions_take_only_their_own_rows() -> None:
    """A depthwise conv is costed by bytes from rows timed in the grouped variant; where none
    were, from the fitted roofline (reported), never from a dense or 1-D convolution's rows."""
    dense = {"section": "zoo", "op": "convolution", "aten_ops": "convolution",
             "dtype": "bf16", "cache": "cold", "shape": "{}", "bytes": 2**20, "time_us": 5.0,
             "flops": 0}
    grouped = {**dense, "shape": '{"layout": "grouped"}', "bytes": 2**24, "time_us": 20.0}
    spec = KernelSpec("aten::convolution", 0, 2**24, "bf16", variant="grouped")
    assert KernelTable([MeasuredRow.parse(dense)]).estimate(spec) is None
    table = KernelTable([MeasuredRow.parse(dense), MeasuredRow.parse(grouped)])
    assert table.estimate(spec).duration_ns == 20_000


def _rnn_row(seq: int, direction: str, time_us: float) -> dict[str, Any]:
    dims = (seq, 64, 1024, 1024, 1, 1)
    shape = {"cell": "lstm", "seq": seq, "batch": 64, "input": 1024, "hidden": 1024,
             "layers": 1, "directions": 1, "pass": direction}
    return {"section": "rnn", "op": f"lstm_{direction}", "aten_ops": "_cudnn_rnn",
            "dtype": "fp16", "cache": "cold", "shape": json.dumps(shape), "bytes": 2**24,
            "time_us": time_us, "flops": rnn_flops("lstm", dims, seq * 64, direction == "bwd")}


def test_recurrent_layers_are_costed_by_rate_from_their_own_pass() -> None:
    """cuDNN's LSTM: a measured shape gets its row; a sequence between two measured ones runs
    at their rate (time between theirs); the backward is never costed from forward rows."""
    table = KernelTable([MeasuredRow.parse(_rnn_row(seq, "fwd", seq * 10.0))
                         for seq in (32, 128)])

    def spec(seq: int, name: str = "aten::_cudnn_rnn") -> KernelSpec:
        dims = (seq, 64, 1024, 1024, 1, 1)
        return KernelSpec(name, rnn_flops("lstm", dims, seq * 64, name.endswith("backward")),
                          2**24, "fp16", dims, "lstm")

    assert spec(32).family is Family.RNN
    assert table.estimate(spec(128)) == Estimate(1_280_000, True)
    middle = table.estimate(spec(64))
    assert middle is not None and not middle.exact
    assert 320_000 < middle.duration_ns < 1_280_000
    assert table.estimate(spec(64, "aten::_cudnn_rnn_backward")) is None


def _matmul_row(m: int, n: int, k: int, time_us: float) -> dict[str, Any]:
    return {"section": "matmul", "op": "mm", "aten_ops": "mm", "dtype": "bf16",
            "cache": "cold", "shape": json.dumps({"m": m, "n": n, "k": k, "layout": "nt"}),
            "bytes": 2 * (m * k + k * n + m * n), "time_us": time_us, "flops": 2 * m * n * k}


def test_unaligned_matmuls_are_costed_only_from_rows_of_their_alignment() -> None:
    """A product with a dimension no multiple of 16 bytes (BERT's vocabulary of 30522) runs
    slower kernels: its own rows cost it and its unaligned neighbours; aligned products never
    take the unaligned rows' rate; without unaligned rows, the aligned ones still answer."""
    aligned = [_matmul_row(m, 30528, 768, m / 16.0) for m in (2048, 4096, 8192, 16384)]
    slow = _matmul_row(8192, 30522, 768, 1600.0)

    def spec(m: int, n: int) -> KernelSpec:
        return KernelSpec("aten::mm", 2 * m * n * 768, 0, "bf16", (1, m, n, 768), "nt")

    assert matmul_alignment((1, 8192, 30522, 768), "bf16") == 4
    assert matmul_alignment((1, 8192, 51865, 512), "bf16") == 2
    assert matmul_alignment((1, 8192, 30522, 768), "fp32") == 8
    assert matmul_alignment((1, 8192, 30528, 768), "bf16") == ALIGNED_BYTES
    only_aligned = KernelTable([MeasuredRow.parse(r) for r in aligned])
    table = KernelTable([MeasuredRow.parse(r) for r in (*aligned, slow)])
    assert table.estimate(spec(8192, 30522)) == Estimate(1_600_000, True)
    near = table.estimate(spec(4096, 30522)).duration_ns
    assert near > 2 * only_aligned.estimate(spec(4096, 30522)).duration_ns
    assert table.estimate(spec(4096, 30528)) == only_aligned.estimate(spec(4096, 30528))
    assert only_aligned.estimate(spec(4096, 30522)) is not None


def test_a_launch_bound_row_says_nothing_of_a_far_larger_kernel() -> None:
    """One tiny measured row (2 us for 64 bytes): a kernel 2^20 times larger is not charged that
    row's "bandwidth" (seconds), it is left to the fitted roofline."""
    tiny = {"section": "zoo", "op": "cumsum", "aten_ops": "cumsum", "dtype": "int32",
            "cache": "cold", "shape": "{}", "bytes": 64, "time_us": 2.0, "flops": 0}
    table = KernelTable([MeasuredRow.parse(tiny)])
    assert table.estimate(KernelSpec("aten::cumsum", 0, 128, "int32")) is not None
    assert table.estimate(KernelSpec("aten::cumsum", 0, 64 * 2**20, "int32")) is None


def test_convolutions_are_costed_from_their_rows_and_interpolated_between_batches(
        h100: ComputeModel) -> None:
    """ResNet-50's 3x3 conv of layer 1 was measured at batch 32 and 96 (channels_last bf16)
    and left out at 64: that one is interpolated, between the two measured times."""
    measured = [h100.cost(conv(b, 64, 64, 56, 3, 1)) for b in (32, 96)]
    assert all(c.source is CostSource.MEASURED for c in measured)
    middle = h100.cost(conv(64, 64, 64, 56, 3, 1))
    assert middle.source is CostSource.INTERPOLATED
    assert measured[0].duration_ns < middle.duration_ns < measured[1].duration_ns
    backward = h100.cost(conv(64, 64, 64, 56, 3, 1, backward=True))
    assert backward.source is CostSource.INTERPOLATED
    assert 1.3 < backward.duration_ns / middle.duration_ns < 4


def test_grouped_gemms_and_triton_kernels_come_from_their_rows(h100: ComputeModel) -> None:
    rows, k, n, groups = 65536, 2048, 1024, 64  # between the measured 32768 and 131072 rows
    spec = KernelSpec("aten::_grouped_mm", 2 * rows * n * k, 2 * (rows * k + groups * n * k
                                                                 + rows * n), "bf16",
                      (groups, rows, n, k), "fwd")
    assert spec.family is Family.GROUPED_MATMUL
    cost = h100.cost(spec)
    assert cost.source is CostSource.INTERPOLATED
    assert 300e3 < spec.flops / cost.duration_ns < 800e3  # FLOP/ns: 300-800 TFLOP/s
    small, large = (h100.cost(KernelSpec("inductor::triton_pointwise", 0, nbytes, "bf16"))
                    for nbytes in (5 * 2**21, 5 * 2**29))  # between the 2- and 4-input rows
    assert small.source is large.source is CostSource.INTERPOLATED
    assert small.duration_ns < large.duration_ns / 100
    assert 2.5e3 < 5 * 2**29 / large.duration_ns < 3.4e3  # GB/s of a large fused kernel


@pytest.mark.parametrize(("numel", "rnumel", "dtype", "name", "costed_as"), [
    (4096, 1, "bf16", "inductor::triton_pointwise", "bf16"),
    (4096, 1024, "fp32", "inductor::triton_persistent_reduction", "fp32"),
    (1024, 4096, "fp16", "inductor::triton_reduction", "bf16"),
])
def test_generated_kernels_are_costed_by_their_kind_from_the_triton_rows(
        h100: ComputeModel, numel: int, rnumel: int, dtype: str, name: str,
        costed_as: str) -> None:
    """A kernel Inductor generates is named by its iteration space, and every kind has measured
    Triton rows (``hwmodel.compute.inductor``, the rank side plans only which ops it fuses)."""
    spec = generated_kernel(2**24, numel, rnumel, dtype)
    assert (spec.name, spec.dtype, spec.flops, spec.bytes) == (name, costed_as, 0, 2**24)
    assert base_name(spec.name) in TRITON_ROWS.values()
    assert h100.cost(spec).source is CostSource.INTERPOLATED


def test_an_op_only_the_reference_measured_is_moved_to_the_h200_by_its_spec_sheet(
        h100: ComputeModel) -> None:
    """Group norm has H100 rows (the zoo's) and none on the H200: the H200 gets the H100's time
    with its roofline bound moved to the H200's HBM, reported as such, not as a table of its
    own and not as the fitted fallback."""
    h200 = ComputeModel.for_gpu(lookup_gpu("h200"))
    spec = KernelSpec("aten::native_group_norm", 0, 2**24, "fp32")
    on_h100, on_h200 = h100.cost(spec), h200.cost(spec)
    assert on_h200.source is CostSource.MOVED and not CostSource.MOVED.from_table
    bound_h100, bound_h200 = (2**24 / gpu.hbm_gbs for gpu in (h100.gpu, h200.gpu))
    assert on_h200.duration_ns == round(on_h100.duration_ns - bound_h100 + bound_h200)
