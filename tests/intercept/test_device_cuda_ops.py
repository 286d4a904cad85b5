"""Fake CUDA tensors dispatch what a CUDA build dispatches (``intercept.dispatch.cuda_ops``)."""

import json
from pathlib import Path
from typing import Any

import pytest
import torchgen
from torchgen.gen import parse_native_yaml
from torchgen.model import DispatchKey, NativeFunction

from intercept.dispatch.cuda_ops import CUDA_BUILD_CHECKED, FUSED_ON_CUDA
from tests.intercept.cuda_reference import CASES, REFERENCE_PATH
from tests.intercept.device_harness import run_snippet

SDPA_PREFIX = "aten._scaled_dot_product_"
"""Attention ops: ``sdpa_choice.sdpa_cuda`` picks flash attention where torch 2.11 on an H100
picks cuDNN attention (see :func:`test_sdpa_picks_the_cuda_builds_backend`)."""

VIEW_REPLAY_CASES = frozenset({"gru_packed_bidirectional"})
VIEW_REPLAY_OPS = frozenset({"aten.slice.Tensor", "aten.as_strided.default"})
"""Backward of ``pad_packed_sequence``: a CUDA build's autograd replays its views as one
``as_strided``, fake tensors as the two ``slice`` calls that made them (views: no kernel)."""

SNIPPET = """
from tests.intercept.cuda_reference import CASES, dispatched

def kernels_of(code):
    mark = len(runtime.kernels)
    exec(code, globals())
    return [k[0] for k in runtime.kernels[mark:]]

x = torch.randn(8, 16, 256, device="cuda", requires_grad=True)
w = torch.randn(256, device="cuda", requires_grad=True)
result["rms_forward"] = kernels_of("y = torch.nn.functional.rms_norm(x, (256,), w, 1e-5)")
result["rms_out"] = [list(y.shape), str(y.dtype), list(y.stride()), type(y.grad_fn).__name__]
loss = y.sum()
result["rms_backward"] = kernels_of("loss.backward()")
result["rms_grads"] = [[list(t.grad.shape), str(t.grad.dtype)] for t in (x, w)]

xb = torch.randn(8, 16, 256, device="cuda", dtype=torch.bfloat16)
wb = torch.randn(256, device="cuda", dtype=torch.bfloat16)
out, rstd = torch.ops.aten._fused_rms_norm(xb, [256], wb, 1e-5)
result["rms_bf16"] = [[list(t.shape), str(t.dtype), list(t.stride())] for t in (out, rstd)]

h = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
result["silu_forward"] = kernels_of("s = torch.nn.functional.silu(h)")
loss = s.sum()
result["silu_backward"] = kernels_of("loss.backward()")
result["silu_grad"] = [list(h.grad.shape), str(h.grad.dtype)]

q = torch.randn(2, 4, 64, 32, device="cuda", dtype=torch.bfloat16)
bias = torch.randn(1, 4, 64, 64, device="cuda", dtype=torch.bfloat16)
result["sdpa_learned_mask"] = kernels_of(
    "torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=bias.requires_grad_())")
result["sdpa_constant_mask"] = kernels_of(
    "torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=bias.detach())")

result["cases"] = {name: dispatched(case) for name, case in CASES.items()}
"""


@pytest.fixture(scope="module")
def fake() -> dict[str, Any]:
    """What the fake GPU records and dispatches for :data:`SNIPPET` (one interpreter)."""
    return run_snippet(SNIPPET, timeout_s=300)["result"]


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """What the CUDA build dispatched (``tests.intercept.cuda_reference``)."""
    recorded = json.loads(REFERENCE_PATH.read_text())
    assert recorded["torch"] == CUDA_BUILD_CHECKED
    return recorded["cases"]


def _compared(case: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ops compared: attention aside, and in :data:`VIEW_REPLAY_CASES` no view ops."""
    views = VIEW_REPLAY_OPS if case in VIEW_REPLAY_CASES else ()
    return [op for op in ops if not op["op"].startswith(SDPA_PREFIX) and op["op"] not in views]


def test_fused_on_cuda_is_every_op_a_cpu_build_decomposes() -> None:
    """The ops with a CUDA kernel and a CompositeImplicitAutograd kernel, from the installed
    torch's own ``native_functions.yaml`` (a torch upgrade that adds one fails here)."""
    native = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native"
    parsed = parse_native_yaml(str(native / "native_functions.yaml"), str(native / "tags.yaml"))
    by_name = {f.func.name: f for f in parsed.native_functions}
    cuda = parsed.backend_indices[DispatchKey.CUDA]
    composite = parsed.backend_indices[DispatchKey.CompositeImplicitAutograd]

    def has_cuda_kernel(f: NativeFunction) -> bool:
        delegate = f.structured_delegate
        return cuda.has_kernel(f) or (delegate is not None and cuda.has_kernel(by_name[delegate]))

    derived = {str(f.func.name) for f in parsed.native_functions
               if has_cuda_kernel(f) and composite.has_kernel(f)}
    assert derived == set(FUSED_ON_CUDA)


def test_rms_norm_records_the_fused_kernels(fake: dict[str, Any]) -> None:
    assert fake["rms_forward"] == ["aten::_fused_rms_norm"]
    assert fake["rms_out"] == [[8, 16, 256], "torch.float32", [4096, 256, 1],
                               "FusedRmsNormBackward0"]
    assert fake["rms_backward"] == ["aten::ones_like", "aten::_fused_rms_norm_backward"]
    assert fake["rms_grads"] == [[[8, 16, 256], "torch.float32"], [[256], "torch.float32"]]
    # a CUDA build keeps the output in the input's dtype and rstd in float32, per row
    assert fake["rms_bf16"] == [[[8, 16, 256], "torch.bfloat16", [4096, 256, 1]],
                                [[8, 16, 1], "torch.float32", [16, 1, 1]]]


def test_silu_backward_is_one_kernel(fake: dict[str, Any]) -> None:
    assert fake["silu_forward"] == ["aten::silu"]
    assert fake["silu_backward"] == ["aten::ones_like", "aten::silu_backward"]
    assert fake["silu_grad"] == [[64, 512], "torch.bfloat16"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_dispatch_matches_the_cuda_build(case: str, fake: dict[str, Any],
                                         reference: dict[str, Any]) -> None:
    """Every op that reaches the dispatch modes, with its outputs' shapes, dtypes and strides,
    is the one a CUDA build dispatches (recorded on an H100, torch 2.11), attention aside."""
    assert (_compared(case, fake["cases"][case])
            == _compared(case, reference[case]["dispatched"]))


def test_sdpa_takes_the_math_path_for_a_mask_that_needs_a_gradient(fake: dict[str, Any]) -> None:
    """T5's learned position bias: an H100 ran the math path (bmm, softmax, bmm), as the profile
    of ``scripts/data/traces/h100x1/h100x1_hf-t5/`` shows; a constant mask goes to a fused
    kernel."""
    math = fake["sdpa_learned_mask"]
    assert {"aten::bmm", "aten::_safe_softmax"} <= set(math), math
    assert not any("efficient" in op for op in math)
    assert fake["sdpa_constant_mask"] == ["aten::_scaled_dot_product_efficient_attention"]


@pytest.mark.xfail(strict=True, reason="sdpa_choice.sdpa_cuda picks flash attention; torch 2.11 "
                                       "on an H100 picks cuDNN attention")
def test_sdpa_picks_the_cuda_builds_backend(fake: dict[str, Any],
                                            reference: dict[str, Any]) -> None:
    assert fake["cases"]["sdpa_causal"] == reference["sdpa_causal"]["dispatched"]
