"""Recurrent layers on the fake GPU take cuDNN's path, as a CUDA build does
(``intercept.dispatch.cudnn_rnn``); the op-by-op comparison with a real CUDA build is in
``test_device_cuda_ops`` (cases ``lstm*`` and ``gru_*``)."""

from typing import Any

import pytest

from hwmodel.compute.spec import Family, KernelSpec, rnn_flops
from tests.intercept.device_harness import run_snippet

SNIPPET = """
import warnings
from collections import Counter
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

specs = []
record = runtime.kernel
def kernel(spec, *args, **kwargs):
    specs.append(spec)
    record(spec, *args, **kwargs)
runtime.kernel = kernel

def launched(code):
    mark = len(specs)
    exec(code, globals())
    return dict(Counter(s.name for s in specs[mark:]))

def rnn_specs():
    return [[s.name, list(s.dims), s.variant, s.dtype, s.flops] for s in specs
            if "cudnn_rnn" in s.name]

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    lstm = torch.nn.LSTM(256, 512, num_layers=2, batch_first=True).cuda()
result["warnings"] = [str(w.message) for w in caught]
x = torch.randn(8, 32, 256, device="cuda", requires_grad=True)
result["forward"] = launched("out, (h, c) = lstm(x)")
result["shapes"] = [list(t.shape) for t in (out, h, c)]
result["backward"] = launched("out.sum().backward()")
result["grads"] = [list(p.grad.shape) == list(p.shape) for p in lstm.parameters()]
result["x_grad"] = list(x.grad.shape)
result["specs"] = rnn_specs()

del specs[:]
with torch.autocast("cuda", dtype=torch.bfloat16):
    result["autocast_forward"] = launched("out, _ = lstm(x)")
result["autocast_dtype"] = str(out.dtype)
result["autocast_specs"] = rnn_specs()

del specs[:]
gru = torch.nn.GRU(64, 128, bidirectional=True).cuda()
y = torch.randn(10, 4, 64, device="cuda", requires_grad=True)
result["packed"] = launched(
    "o, hn = gru(pack_padded_sequence(y, [10, 8, 5, 3]));"
    "padded, lengths = pad_packed_sequence(o); padded.sum().backward()")
result["packed_shapes"] = [list(padded.shape), lengths.tolist(), list(hn.shape), list(y.grad.shape)]
result["packed_specs"] = rnn_specs()

cells = torch.nn.LSTM(32, 32).cuda().bfloat16()
result["bf16"] = launched("cells(torch.randn(5, 2, 32, device='cuda', dtype=torch.bfloat16))")
torch.backends.cudnn.enabled = False
result["disabled"] = launched("lstm(x)")
"""


@pytest.fixture(scope="module")
def fake() -> dict[str, Any]:
    return run_snippet(SNIPPET, timeout_s=300)["result"]


def test_lstm_is_one_cudnn_launch_each_way(fake: dict[str, Any]) -> None:
    assert fake["forward"] == {"aten::zeros": 2, "aten::_cudnn_rnn": 1}
    # batch-first: the input's gradient comes sequence-first and is copied into x.grad
    assert fake["backward"] == {"aten::sum": 1, "aten::ones_like": 1,
                                "aten::_cudnn_rnn_backward": 1, "aten::copy_": 1}
    assert fake["shapes"] == [[8, 32, 512], [2, 8, 512], [2, 8, 512]]
    assert all(fake["grads"]) and fake["x_grad"] == [8, 32, 256]
    assert fake["warnings"] == []  # no "compiled without cuDNN" from flatten_parameters()


def test_recurrent_launch_carries_its_shape_and_gate_flops(fake: dict[str, Any]) -> None:
    dims = (32, 8, 256, 512, 2, 1)  # batch_first input: sequence 32 of batch 8
    forward = rnn_flops("lstm", dims, 32 * 8, backward=False)
    # two layers of 4 gates: 2 x tokens x 4*512 x (256 + 512), then x (512 + 512)
    assert forward == 2 * 256 * 2048 * (768 + 1024)
    assert fake["specs"] == [["aten::_cudnn_rnn", list(dims), "lstm", "fp32", forward],
                             ["aten::_cudnn_rnn_backward", list(dims), "lstm", "fp32",
                              2 * forward]]
    assert KernelSpec("aten::_cudnn_rnn", forward, 1, "fp32", dims, "lstm").family is Family.RNN


def test_autocast_runs_cudnn_in_fp16_on_cast_weights(fake: dict[str, Any]) -> None:
    # as the CUDA build's autocast wrapper: a new fp16 buffer, the 8 weights copied into it,
    # input, h0 and c0 cast
    assert fake["autocast_forward"] == {"aten::zeros": 3, "aten::copy_": 8, "aten::_to_copy": 3,
                                        "aten::_cudnn_rnn": 1}
    assert fake["autocast_dtype"] == "torch.float16"
    assert [spec[3] for spec in fake["autocast_specs"]] == ["fp16"]


def test_packed_bidirectional_gru_counts_only_its_tokens(fake: dict[str, Any]) -> None:
    assert fake["packed"]["aten::_pack_padded_sequence"] == 1
    assert fake["packed"]["aten::_cudnn_rnn"] == fake["packed"]["aten::_cudnn_rnn_backward"] == 1
    assert fake["packed_shapes"] == [[10, 4, 256], [10, 8, 5, 3], [2, 4, 128], [10, 4, 64]]
    name, dims, cell, _, flops = fake["packed_specs"][0]
    assert (name, dims, cell) == ("aten::_cudnn_rnn", [10, 4, 64, 128, 1, 2], "gru")
    assert flops == rnn_flops("gru", tuple(dims), 26, backward=False)  # 10 + 8 + 5 + 3 tokens


def test_bf16_takes_cudnn_and_disabled_cudnn_takes_the_cell_path(fake: dict[str, Any]) -> None:
    assert fake["bf16"]["aten::_cudnn_rnn"] == 1  # as torch 2.11 on an H100
    assert fake["disabled"]["aten::_thnn_fused_lstm_cell"] == 64  # 32 steps x 2 layers
