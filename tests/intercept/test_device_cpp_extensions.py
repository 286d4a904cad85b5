"""CUDA extensions a script JIT-builds on a simulated rank (``intercept.dispatch.cpp_extensions``):
the stand-in toolkit, DeepSpeed's fused Adam served as PyTorch's fused kernel (same values as
its CUDA code, one measured kernel), and a clear stop for extensions without a stand-in."""

import importlib.util
from typing import Any

import pytest

from tests.intercept.device_harness import run_snippet

EXTENSIONS = """
import subprocess
import torch.utils.cpp_extension as cpp_extension
from hwmodel.errors import SimulationError

nvcc = cpp_extension.CUDA_HOME + "/bin/nvcc"
version = subprocess.run([nvcc, "-V"], capture_output=True, text=True)
compile_ = subprocess.run([nvcc, "-c", "kernel.cu"], capture_output=True, text=True)
result["nvcc"] = {"version": [version.returncode, version.stdout],
                  "compile": [compile_.returncode, compile_.stderr]}

# DeepSpeed's multi_tensor_adam on tensors small enough to carry values, against its CUDA
# kernel's arithmetic (csrc/adam/multi_tensor_adam.cu) on the host
fused_adam = cpp_extension.load(name="fused_adam", sources=["multi_tensor_adam.cu"])
def host_reference(g, p, m, v, lr, beta1, beta2, eps, step, mode, bias_correction, decay):
    c1 = 1 - beta1 ** step if bias_correction else 1.0
    c2 = 1 - beta2 ** step if bias_correction else 1.0
    if mode == 0:
        g = g + decay * p
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    update = (m / c1) / ((v / c2).sqrt() + eps)
    if mode == 1:
        update = update + decay * p
    return [p - lr * update, m, v]

noop_flag = torch.zeros(1, dtype=torch.int, device="cuda")
generator = torch.Generator().manual_seed(0)
host = [torch.rand(40, generator=generator) + 0.1 for _ in range(4)]  # g, p, m, v
cases = {}
for mode, bias_correction in [(1, 1), (0, 1), (1, 0)]:
    lists = [[t.to("cuda")] for t in host]
    mark = len(runtime.kernels)
    fused_adam.multi_tensor_adam(2048 * 32, noop_flag, lists, 1e-2, 0.9, 0.95, 1e-8, 3, mode,
                                 bias_correction, 0.1)
    expected = host_reference(*host, 1e-2, 0.9, 0.95, 1e-8, 3, mode, bias_correction, 0.1)
    cases[f"mode{mode}-bias{bias_correction}"] = {
        "kernels": [k[0] for k in runtime.kernels[mark:]],
        "error": max((got[0].cpu() - want).abs().max().item()
                     for got, want in zip(lists[1:], expected)),
    }
result["adam"] = cases

# a large bf16 list: one fused kernel moving what the CUDA kernel moves
params = [torch.empty(4096, 1024, dtype=torch.bfloat16, device="cuda") for _ in range(3)]
lists = [[torch.empty_like(p) for p in params], params,
         [torch.empty_like(p) for p in params], [torch.empty_like(p) for p in params]]
mark = len(runtime.kernels)
fused_adam.multi_tensor_adam(2048 * 32, noop_flag, lists, 1e-3, 0.9, 0.95, 1e-8, 1, 1, 1, 0.0)
result["large"] = {"kernels": runtime.kernels[mark:],
                   "param_bytes": sum(p.numel() * p.element_size() for p in params)}

errors = {}
calls = {"load": lambda: cpp_extension.load("fused_lamb", ["lamb.cu"]),
         "load_inline": lambda: cpp_extension.load_inline("mine", "int f();")}
for function, call in calls.items():
    try:
        call()
    except SimulationError as error:
        errors[function] = str(error)
result["errors"] = errors
"""

DEEPSPEED = """
from deepspeed.ops.adam import FusedAdam
from deepspeed.ops.op_builder import FusedAdamBuilder

params = [torch.nn.Parameter(torch.empty(1024, 1024, device="cuda")),
          torch.nn.Parameter(torch.empty(1024, device="cuda"))]
for p in params:
    p.grad = torch.empty_like(p)
optimizer = FusedAdam(params, lr=1e-3, weight_decay=0.1)
mark = len(runtime.kernels)
optimizer.step()
result["module"] = FusedAdamBuilder().load().__doc__
result["kernels"] = [k[0] for k in runtime.kernels[mark:]]
"""


@pytest.fixture(scope="module")
def extensions() -> dict[str, Any]:
    return run_snippet(EXTENSIONS, device_count=1)["result"]


def test_the_stand_in_nvcc_reports_a_version_and_compiles_nothing(
        extensions: dict[str, Any]) -> None:
    code, stdout = extensions["nvcc"]["version"]
    assert code == 0 and "release 12.8," in stdout  # what DeepSpeed's installed_cuda_version parses
    code, stderr = extensions["nvcc"]["compile"]
    assert code != 0 and "phantora-ns3" in stderr and "kernel.cu" in stderr


def test_multi_tensor_adam_computes_what_deepspeeds_kernel_does(
        extensions: dict[str, Any]) -> None:
    kernels = {"mode1-bias1": "aten::_fused_adamw_", "mode0-bias1": "aten::_fused_adam_",
               "mode1-bias0": "aten::_fused_adamw_"}
    for case, fused in kernels.items():
        result = extensions["adam"][case]
        assert result["kernels"] == ["aten::full", fused], case  # step counts, then the update
        assert result["error"] < 1e-6, case


def test_multi_tensor_adam_is_one_kernel_moving_seven_passes(extensions: dict[str, Any]) -> None:
    (fill, _, _, _), (name, flops, nbytes, _) = extensions["large"]["kernels"]
    assert fill == "aten::full" and name == "aten::_fused_adamw_"
    # reads gradient, parameter and both moments, writes the last three (bf16 throughout)
    assert nbytes >= 7 * extensions["large"]["param_bytes"]
    assert nbytes < 7.01 * extensions["large"]["param_bytes"]


def test_an_extension_without_a_stand_in_stops_the_run_naming_it(
        extensions: dict[str, Any]) -> None:
    errors = extensions["errors"]
    assert "torch.utils.cpp_extension.load(name='fused_lamb')" in errors["load"]
    assert "torch.utils.cpp_extension.load_inline(name='mine')" in errors["load_inline"]
    for message in errors.values():
        assert "no stand-in" in message and "fused_adam" in message
        assert '"torch_adam": true' in message  # the DeepSpeed workaround


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                    reason="deepspeed is not installed (the frameworks extra)")
def test_deepspeeds_fused_adam_builds_and_steps_through_the_stand_in() -> None:
    result = run_snippet(DEEPSPEED, device_count=1)["result"]
    assert "stand-in" in result["module"]
    # its zeros_like state on the first step, then one fused update for both parameters
    assert result["kernels"][-2:] == ["aten::full", "aten::_fused_adamw_"]
