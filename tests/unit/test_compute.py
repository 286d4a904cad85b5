"""The roofline kernel model and its coverage record."""

from math import ceil

import pytest

from phantora.cluster.catalogue import lookup_gpu
from phantora.compute import (
    COMPUTE_EFFICIENCY,
    KERNEL_FLOOR_NS,
    MEMORY_EFFICIENCY,
    CostSource,
    Coverage,
    kernel_cost,
    kernel_duration_ns,
)
from phantora.compute.ops import base_name, is_memory_bound

H100 = lookup_gpu("h100")
H200 = lookup_gpu("h200")


def test_a_large_gemm_runs_at_the_measured_share_of_peak() -> None:
    flops = 2 * 8192**3
    cost = kernel_cost("aten::mm", flops, 3 * 8192 * 8192 * 2, H100)
    assert cost.source is CostSource.COMPUTE
    achieved_tflops = flops / cost.duration_ns / 1e3
    # Measured 788-800 TFLOP/s on the lent H100/H200 (80% of the 989 dense peak).
    assert 780 <= achieved_tflops <= 800
    assert achieved_tflops == pytest.approx(H100.bf16_tflops * COMPUTE_EFFICIENCY, rel=0.01)


def test_a_streaming_op_moves_bytes_at_the_sustained_hbm_rate() -> None:
    nbytes = 12 * 2**28  # fp32 add of 2^28 elements: two reads, one write
    for gpu in (H100, H200):
        cost = kernel_cost("aten::add.Tensor", 0, nbytes, gpu)
        assert cost.source is CostSource.MEMORY
        assert cost.duration_ns == KERNEL_FLOOR_NS + ceil(nbytes / (gpu.hbm_gbs
                                                                     * MEMORY_EFFICIENCY))
    h100_ns = kernel_duration_ns("aten::add.Tensor", 0, nbytes, H100)
    assert nbytes / h100_ns == pytest.approx(3000, rel=0.03)  # GB/s; 3.0 TB/s measured


def test_flop_counted_ops_can_be_memory_bound() -> None:
    # A skinny matmul: 2 * 8 * 8192 * 8192 FLOPs over a 128 MiB weight read.
    cost = kernel_cost("aten::mm", 2 * 8 * 8192 * 8192, 8192 * 8192 * 2, H100)
    assert cost.source is CostSource.MEMORY


def test_no_kernel_is_free_and_tiny_ones_cost_the_floor() -> None:
    assert kernel_duration_ns("aten::fill_.Scalar", 0, 0, H100) == KERNEL_FLOOR_NS
    cost = kernel_cost("aten::add_.Tensor", 0, 12, H100)
    assert cost == kernel_cost("aten::add_.Tensor", 0, 12, H200)
    assert cost.source is CostSource.FLOOR and cost.duration_ns == KERNEL_FLOOR_NS + 1


def test_unknown_ops_are_costed_by_their_bytes_and_flagged() -> None:
    unknown = kernel_cost("aten::mystery_op", 0, 1 << 30, H100)
    known = kernel_cost("aten::clone", 0, 1 << 30, H100)
    assert unknown.source is CostSource.UNKNOWN and known.source is CostSource.MEMORY
    assert unknown.duration_ns == known.duration_ns
    assert kernel_cost("aten::mystery_op", 0, 0, H100).duration_ns == KERNEL_FLOOR_NS
    # A matrix product without a FLOP count is not silently treated as memory-bound.
    assert kernel_cost("aten::mm", 0, 1 << 20, H100).source is CostSource.UNKNOWN


def test_negative_work_is_rejected() -> None:
    with pytest.raises(ValueError, match="aten::mm: flops"):
        kernel_cost("aten::mm", -1, 0, H100)


@pytest.mark.parametrize(("name", "base", "memory_bound"), [
    ("aten::add_.Tensor", "add", True),
    ("aten::_foreach_mul_.Scalar", "_foreach_mul", True),
    ("aten::_fused_adamw_", "_fused_adamw", True),
    ("aten::native_layer_norm_backward", "native_layer_norm_backward", True),
    ("aten::mm", "mm", False),
    ("aten::__and__.Tensor", "__and__", False),
    ("mystery", "mystery", False),
])
def test_op_names_are_normalised_before_lookup(name: str, base: str, memory_bound: bool) -> None:
    assert base_name(name) == base
    assert is_memory_bound(name) is memory_bound


def test_coverage_accounts_time_by_source_and_names_unknown_ops() -> None:
    coverage = Coverage(H100)
    gemm = 2 * 4096**3
    for _ in range(3):
        coverage.record("aten::mm", gemm, 3 * 4096 * 4096 * 2, 200_000)
    coverage.record("aten::add.Tensor", 0, 1 << 30, 400_000)
    coverage.record("aten::mystery_op", 0, 1 << 20, 5_000)
    coverage.record("aten::zero_", 0, 4, 1_901)
    summary = coverage.to_dict(top=2)
    assert summary["kernels"] == 6 and summary["time_ns"] == 1_006_901
    by_source = summary["by_source"]
    assert list(by_source) == ["roofline-compute", "roofline-memory", "kernel-floor",
                               "unknown-op"]
    assert by_source["roofline-compute"] == {"kernels": 3, "time_ns": 600_000,
                                             "share": round(600_000 / 1_006_901, 4)}
    assert by_source["unknown-op"]["time_ns"] == 5_000
    assert sum(s["time_ns"] for s in by_source.values()) == summary["time_ns"]
    assert [(op["name"], op["source"], op["kernels"]) for op in summary["top_ops"]] == [
        ("aten::mm", "roofline-compute", 3), ("aten::add.Tensor", "roofline-memory", 1)]
    assert summary["unknown_ops"] == ["aten::mystery_op"]
