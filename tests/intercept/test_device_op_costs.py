"""FLOPs and bytes of single ops, checked against closed forms (meta tensors: no data needed)."""

from typing import Any

import torch

from intercept.dispatch import op_costs

aten = torch.ops.aten


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def cost(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> tuple[int, int]:
    """``(flops, bytes)`` of the launch."""
    spec = op_costs.kernel_spec(func._schema.name, func, args, kwargs, out)
    return spec.flops, spec.bytes


def test_matmul_flops_and_bytes() -> None:
    m, k, n = 64, 128, 32
    a, b = meta(m, k, dtype=torch.bfloat16), meta(k, n, dtype=torch.bfloat16)
    out = aten.mm.default(a, b)
    flops, nbytes = cost(aten.mm.default, (a, b), {}, out)
    assert flops == 2 * m * n * k
    assert nbytes == 2 * (m * k + k * n + m * n)


def test_elementwise_op_is_costed_by_bytes() -> None:
    x = meta(1000)
    out = aten.relu.default(x)
    assert cost(aten.relu.default, (x,), {}, out) == (0, 2 * 4000)


def test_broadcast_input_counts_once() -> None:
    x, bias = meta(256, 1024), meta(1024).expand(256, 1024)
    out = aten.add.Tensor(x, bias)
    _, nbytes = cost(aten.add.Tensor, (x, bias), {}, out)
    assert nbytes == 4 * (256 * 1024 + 1024 + 256 * 1024)


def test_copy_does_not_read_its_destination() -> None:
    dst, src = meta(100), meta(100)
    _, copy_bytes = cost(aten.copy_.default, (dst, src), {}, dst)
    _, add_bytes = cost(aten.add_.Tensor, (dst, src), {}, dst)
    assert copy_bytes == 2 * 400
    assert add_bytes == 3 * 400


def test_causal_attention_counts_half_the_score_matrix() -> None:
    q = meta(2, 4, 128, 64, dtype=torch.bfloat16)
    func = aten._scaled_dot_product_flash_attention.default
    full = func(q, q, q, 0.0, False)
    causal = func(q, q, q, 0.0, True)
    full_flops, _ = cost(func, (q, q, q, 0.0, False), {}, full)
    causal_flops, _ = cost(func, (q, q, q, 0.0, True), {}, causal)
    # two matmuls of [128 x 64] @ [64 x 128] per batch and head
    assert full_flops == 2 * (2 * 4) * (2 * 128 * 128 * 64)
    assert causal_flops == full_flops // 2


def test_flat_tensors_finds_nested_tensors_in_order() -> None:
    a, b, c = meta(1), meta(2), meta(3)
    found = op_costs.flat_tensors(([a, (b, 5)], {"x": c, "y": None}))
    assert [t.shape[0] for t in found] == [1, 2, 3]


def test_matmul_spec_carries_shape_layout_and_dtype() -> None:
    x, weight = meta(64, 32, dtype=torch.bfloat16), meta(48, 32, dtype=torch.bfloat16)
    bias = meta(48, dtype=torch.bfloat16)
    args = (bias, x, weight.t())
    spec = op_costs.kernel_spec("aten::addmm", aten.addmm.default, args, {},
                                aten.addmm.default(*args))
    assert (spec.dims, spec.variant, spec.dtype) == ((1, 64, 48, 32), "nt", "bf16")
    grad = meta(64, 48, dtype=torch.bfloat16)  # linear's weight gradient: grad.T @ x
    spec = op_costs.kernel_spec("aten::mm", aten.mm.default, (grad.t(), x), {},
                                aten.mm.default(grad.t(), x))
    assert (spec.dims, spec.variant) == ((1, 48, 32, 64), "tn")
    a, b = meta(4, 8, 16), meta(4, 16, 2)
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        for allow, dtype in ((True, "tf32"), (False, "fp32")):
            torch.backends.cuda.matmul.allow_tf32 = allow
            spec = op_costs.kernel_spec("aten::bmm", aten.bmm.default, (a, b), {},
                                        aten.bmm.default(a, b))
            assert (spec.dims, spec.dtype) == ((4, 8, 2, 16), dtype)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def test_attention_spec_carries_heads_sequences_and_causality() -> None:
    q, kv = meta(2, 8, 128, 64, dtype=torch.bfloat16), meta(2, 2, 256, 64, dtype=torch.bfloat16)
    op = aten._scaled_dot_product_flash_attention.default
    spec = op_costs.kernel_spec("aten::_scaled_dot_product_flash_attention", op,
                                (q, kv, kv, 0.0, True), {}, None)
    assert (spec.dims, spec.variant, spec.dtype) == ((2, 8, 2, 128, 256, 64), "causal", "bf16")


def test_a_cast_names_both_dtypes() -> None:
    x = meta(10)
    out = aten._to_copy.default(x, dtype=torch.bfloat16)
    spec = op_costs.kernel_spec("aten::_to_copy", aten._to_copy.default, (x,),
                                {"dtype": torch.bfloat16}, out)
    assert spec.dtype == "fp32->bf16" and spec.dims == ()


def test_gathers_count_the_rows_they_read_not_the_whole_table() -> None:
    weight, tokens = meta(50304, 768), torch.empty(2048, dtype=torch.int64, device="meta")
    out = aten.embedding.default(weight, tokens)
    _, nbytes = cost(aten.embedding.default, (weight, tokens), {}, out)
    assert nbytes == 8 * 2048 + 2 * 4 * 2048 * 768  # indices, gathered rows, output


def test_multi_tensor_in_place_ops_count_their_writes() -> None:
    """They return nothing: the lists they mutate are written as well as read, as the
    measured rows count them (AdamW: read p, g, m, v and write p, m, v = 28 B per fp32 value)."""
    params, grads, exp_avgs, exp_avg_sqs = ([meta(100), meta(300)] for _ in range(4))
    steps = [meta(1), meta(1)]
    _, adamw_bytes = cost(
        aten._fused_adamw_.default, (params, grads, exp_avgs, exp_avg_sqs, [], steps),
        {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.0, "eps": 1e-8,
         "amsgrad": False, "maximize": False}, None)
    assert adamw_bytes == 28 * 400 + 4 * 2
    _, add_bytes = cost(aten._foreach_add_.List, (params, grads), {}, None)
    assert add_bytes == 12 * 400
    _, zero_bytes = cost(aten._foreach_zero_.default, (grads,), {}, None)
    assert zero_bytes == 4 * 400


def test_views_and_broadcasts_make_an_elementwise_launch_strided() -> None:
    x, cos = meta(4, 16, 8, 64), meta(16, 1, 32)
    half = x[..., :32]  # rotary embedding: a half-row view times a broadcast table
    out = aten.mul.Tensor(half, cos)
    assert op_costs.kernel_spec("aten::mul", aten.mul.Tensor, (half, cos), {}, out).variant \
        == "strided"
    y = meta(4, 16, 8, 32)
    out = aten.mul.Tensor(y, y)
    assert op_costs.kernel_spec("aten::mul", aten.mul.Tensor, (y, y), {}, out).variant == ""
    scalar = meta(1)
    out = aten.mul.Tensor(y, scalar)
    assert op_costs.kernel_spec("aten::mul", aten.mul.Tensor, (y, scalar), {}, out).variant == ""


def test_channels_last_operands_of_an_elementwise_op_are_dense() -> None:
    x = meta(8, 64, 14, 14).to(memory_format=torch.channels_last)
    out = aten.relu.default(x)
    assert op_costs.kernel_spec("aten::relu", aten.relu.default, (x,), {}, out).variant == ""
    mixed = aten.add.Tensor(x, meta(8, 64, 14, 14))
    assert op_costs.kernel_spec("aten::add", aten.add.Tensor, (x, meta(8, 64, 14, 14)), {},
                                mixed).variant == "strided"


def test_convolution_launches_carry_shape_layout_and_direction_flops() -> None:
    x = meta(8, 64, 56, 56, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = meta(128, 64, 3, 3, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    args = (x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
    out = aten.convolution.default(*args)
    spec = op_costs.kernel_spec("aten::convolution", aten.convolution.default, args, {}, out)
    assert spec.dims == (8, 64, 128, 56, 3, 2) and spec.variant == "nhwc"
    assert spec.flops == 2 * 8 * 28 * 28 * 64 * 128 * 9
    grad = torch.empty_like(out)
    backward = (grad, x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
    outs = aten.convolution_backward.default(*backward)
    bwd = op_costs.kernel_spec("aten::convolution_backward", aten.convolution_backward.default,
                               backward, {}, outs)
    assert bwd.dims == spec.dims and bwd.flops == 2 * spec.flops


def test_depthwise_convolutions_are_costed_by_bytes_not_as_dense_ones() -> None:
    """ConvNeXt's 7x7 depthwise conv (groups = channels) reads and writes far more than it
    computes: no dense-convolution dims, the grouped variant, both directions."""
    x = meta(8, 96, 56, 56, dtype=torch.bfloat16)
    w = meta(96, 1, 7, 7, dtype=torch.bfloat16)
    args = (x, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 96)
    out = aten.convolution.default(*args)
    spec = op_costs.kernel_spec("aten::convolution", aten.convolution.default, args, {}, out)
    assert spec.dims == () and spec.variant == "grouped" and spec.family.value == "other"
    backward = (torch.empty_like(out), x, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 96,
                [True, True, False])
    outs = aten.convolution_backward.default(*backward)
    bwd = op_costs.kernel_spec("aten::convolution_backward", aten.convolution_backward.default,
                               backward, {}, outs)
    assert bwd.variant == "grouped" and bwd.bytes > spec.bytes


def test_grouped_gemm_passes_are_told_apart() -> None:
    rows, k, n, groups = 256, 64, 32, 4
    offs = torch.empty(groups, dtype=torch.int32, device="meta")
    x, weight = meta(rows, k, dtype=torch.bfloat16), meta(groups, n, k, dtype=torch.bfloat16)
    # forward [rows, k] x [k, n]; input gradient [rows, n] x [n, k]; weight gradient
    # [k, rows] x [rows, n] per group
    for a, b, variant, dims in ((x, weight.transpose(-2, -1), "fwd", (groups, rows, n, k)),
                                (meta(rows, n, dtype=torch.bfloat16), weight, "dgrad",
                                 (groups, rows, k, n)),
                                (x.t(), meta(rows, n, dtype=torch.bfloat16), "wgrad",
                                 (groups, rows, n, k))):
        spec = op_costs.kernel_spec("aten::_grouped_mm", aten._grouped_mm.default, (a, b, offs),
                                    {}, None)
        assert (spec.dims, spec.variant, spec.flops) == (dims, variant, 2 * rows * n * k)


def test_the_rules_tell_a_layout_as_pytorch_does() -> None:
    """The cost rules tell contiguity from the strides (all a trace has), for live tensors too:
    transposed, sliced, broadcast, channels_last, size-1 and empty tensors."""
    image = meta(2, 3, 4, 5)
    for t in (image, image.transpose(1, 2), image[..., ::2], meta(3, 1, 5).expand(3, 4, 5),
              image.to(memory_format=torch.channels_last), meta(1, 3, 1, 1), meta(0, 5).t(),
              meta(4, 1, 6, 1).to(memory_format=torch.channels_last)):
        layout = (op_costs.operand(t).contiguous(), op_costs.operand(t).channels_last())
        assert layout == (t.is_contiguous(), t.is_contiguous(memory_format=torch.channels_last))
