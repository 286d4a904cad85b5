"""FLOPs and bytes of single ops, checked against closed forms (meta tensors: no data needed)."""

import torch

from intercept import op_costs

aten = torch.ops.aten


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_matmul_flops_and_bytes() -> None:
    m, k, n = 64, 128, 32
    a, b = meta(m, k, dtype=torch.bfloat16), meta(k, n, dtype=torch.bfloat16)
    out = aten.mm.default(a, b)
    flops, nbytes = op_costs.op_cost(aten.mm.default, (a, b), {}, out)
    assert flops == 2 * m * n * k
    assert nbytes == 2 * (m * k + k * n + m * n)


def test_elementwise_op_is_costed_by_bytes() -> None:
    x = meta(1000)
    out = aten.relu.default(x)
    assert op_costs.op_cost(aten.relu.default, (x,), {}, out) == (0, 2 * 4000)


def test_broadcast_input_counts_once() -> None:
    x, bias = meta(256, 1024), meta(1024).expand(256, 1024)
    out = aten.add.Tensor(x, bias)
    _, nbytes = op_costs.op_cost(aten.add.Tensor, (x, bias), {}, out)
    assert nbytes == 4 * (256 * 1024 + 1024 + 256 * 1024)


def test_copy_does_not_read_its_destination() -> None:
    dst, src = meta(100), meta(100)
    _, copy_bytes = op_costs.op_cost(aten.copy_.default, (dst, src), {}, dst)
    _, add_bytes = op_costs.op_cost(aten.add_.Tensor, (dst, src), {}, dst)
    assert copy_bytes == 2 * 400
    assert add_bytes == 3 * 400


def test_causal_attention_counts_half_the_score_matrix() -> None:
    q = meta(2, 4, 128, 64, dtype=torch.bfloat16)
    func = aten._scaled_dot_product_flash_attention.default
    full = func(q, q, q, 0.0, False)
    causal = func(q, q, q, 0.0, True)
    full_flops, _ = op_costs.op_cost(func, (q, q, q, 0.0, False), {}, full)
    causal_flops, _ = op_costs.op_cost(func, (q, q, q, 0.0, True), {}, causal)
    # two matmuls of [128 x 64] @ [64 x 128] per batch and head
    assert full_flops == 2 * (2 * 4) * (2 * 128 * 128 * 64)
    assert causal_flops == full_flops // 2


def test_flat_tensors_finds_nested_tensors_in_order() -> None:
    a, b, c = meta(1), meta(2), meta(3)
    found = op_costs.flat_tensors(([a, (b, 5)], {"x": c, "y": None}))
    assert [t.shape[0] for t in found] == [1, 2, 3]
