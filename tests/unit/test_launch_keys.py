"""A traced op call keyed as the rank side keys the same launch: each op below runs on meta
tensors under the PyTorch profiler (``record_shapes=True``, as ``scripts/measure/
profile_run.py`` records), a GPU kernel is placed inside each call of the exported trace, and the
Kineto reader with :mod:`phantora.profiles.launch_keys` must give the
:class:`~hwmodel.compute.spec.KernelSpec` that ``intercept.dispatch.op_costs.kernel_spec``
gives for the same call: op, FLOPs, bytes, dtype, dims, variant."""

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from hwmodel.compute.ops import base_name
from hwmodel.compute.spec import Family, KernelSpec
from intercept.dispatch.op_costs import kernel_spec
from phantora.profiles.kineto import OpCall, read_trace
from phantora.profiles.launch_keys import dispatched_call, launch_spec

aten = torch.ops.aten
BF16, FP32 = torch.bfloat16, torch.float32


def meta(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def channels_last(*shape: int) -> torch.Tensor:
    return meta(*shape).to(memory_format=torch.channels_last)


Call = tuple[Any, tuple[Any, ...], dict[str, Any]]


def _calls() -> dict[str, Call]:
    """Name -> (aten overload, positional and keyword arguments): every output rule and
    compute family."""
    x, w = meta(512, 256), meta(384, 256)
    logits, target = meta(512, 1000, dtype=FP32), torch.empty(512, dtype=torch.long,
                                                              device="meta")
    q, k = meta(2, 8, 256, 64), meta(2, 2, 256, 64)
    image, kernel = channels_last(8, 64, 28, 28), channels_last(128, 64, 3, 3)
    grad_image, depthwise = channels_last(8, 128, 14, 14), channels_last(64, 1, 3, 3)
    mean_rstd = aten.native_layer_norm.default(x, [256], meta(256), meta(256), 1e-5)
    bn = aten.native_batch_norm.default(image, meta(64, dtype=FP32), meta(64, dtype=FP32),
                                        meta(64, dtype=FP32), meta(64, dtype=FP32), True, 0.1,
                                        1e-5)
    pooled, indices = aten.max_pool2d_with_indices.default(image, [3, 3], [2, 2], [1, 1])
    return {
        "mm nt": (aten.mm.default, (x, w.t()), {}),
        "addmm": (aten.addmm.default, (meta(384), x, w.t()), {}),
        "bmm": (aten.bmm.default, (meta(4, 64, 32), meta(4, 32, 16)), {}),
        "sdpa causal gqa": (aten._scaled_dot_product_cudnn_attention.default,
                            (q, k, k, None, True, 0.0, True), {}),
        "conv nhwc": (aten.convolution.default,
                      (image, kernel, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1), {}),
        "conv backward": (aten.convolution_backward.default,
                          (grad_image, image, kernel, None, [2, 2], [1, 1], [1, 1], False,
                           [0, 0], 1, [True, True, False]), {}),
        "depthwise conv": (aten.convolution.default,
                           (image, depthwise, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 64),
                           {}),
        "depthwise conv backward": (aten.convolution_backward.default,
                                    (image, image, depthwise, None, [1, 1], [1, 1], [1, 1],
                                     False, [0, 0], 64, [True, True, False]), {}),
        "add broadcast": (aten.add.Tensor, (x, meta(256)), {}),
        "add_ in place": (aten.add_.Tensor, (x, x), {}),
        "mul by a number": (aten.mul.Tensor, (x, 0.5), {}),
        "eq": (aten.eq.Tensor, (x, x), {}),
        "cast": (aten._to_copy.default, (x,), {"dtype": FP32}),
        "copy_": (aten.copy_.default, (meta(512, 256, dtype=FP32), x), {}),
        "fill_": (aten.fill_.Scalar, (x, 0.0), {}),
        "zeros": (aten.zeros.default, ([64, 32],), {"dtype": BF16}),
        "zeros_like": (aten.zeros_like.default, (x,), {}),
        "new_zeros": (aten.new_zeros.default, (x, [7, 9]), {}),
        "clone transposed": (aten.clone.default, (x.t(),), {}),
        "sum dim keepdim": (aten.sum.dim_IntList, (x, [0], True), {}),
        "sum all": (aten.sum.default, (x,), {}),
        "mean dims": (aten.mean.dim, (meta(4, 8, 16), [-1, -2]), {}),
        "amax": (aten.amax.default, (x, [1]), {}),
        "vector norm": (aten.linalg_vector_norm.default, (x, 2.0, [1]), {}),
        "layer norm": (aten.native_layer_norm.default, (x, [256], meta(256), meta(256), 1e-5), {}),
        "layer norm backward": (aten.native_layer_norm_backward.default,
                                (x, x, [256], mean_rstd[1], mean_rstd[2], meta(256), meta(256),
                                 [True, True, True]), {}),
        "rms norm": (aten._fused_rms_norm.default, (x, [256], meta(256), 1e-6), {}),
        "softmax": (aten._softmax.default, (x, -1, False), {}),
        "log_softmax backward": (aten._log_softmax_backward_data.default,
                                 (logits, logits, 1, FP32), {}),
        "nll_loss": (aten.nll_loss_forward.default, (logits, target, None, 1, -100), {}),
        "nll_loss backward": (aten.nll_loss_backward.default,
                              (meta(dtype=FP32), logits, target, None, 1, -100,
                               meta(dtype=FP32)), {}),
        "embedding": (aten.embedding.default, (meta(1000, 64), target), {}),
        "embedding backward": (aten.embedding_dense_backward.default,
                               (meta(512, 64), target, 1000, -1, False), {}),
        "gelu backward": (aten.gelu_backward.default, (x, x), {}),
        "where": (aten.where.self, (meta(512, 256, dtype=torch.bool), x, x), {}),
        "slice backward": (aten.slice_backward.default, (meta(512, 128), [512, 256], 1, 0, 128,
                                                          1), {}),
        "batch norm": (aten.native_batch_norm.default,
                       (image, meta(64, dtype=FP32), meta(64, dtype=FP32), meta(64, dtype=FP32),
                        meta(64, dtype=FP32), True, 0.1, 1e-5), {}),
        "batch norm backward": (aten.native_batch_norm_backward.default,
                                (image, image, meta(64, dtype=FP32), meta(64, dtype=FP32),
                                 meta(64, dtype=FP32), bn[1], bn[2], True, 1e-5,
                                 [True, True, True]), {}),
        "max pool": (aten.max_pool2d_with_indices.default, (image, [3, 3], [2, 2], [1, 1]), {}),
        "max pool backward": (aten.max_pool2d_with_indices_backward.default,
                              (pooled, image, [3, 3], [2, 2], [1, 1], [1, 1], False, indices), {}),
        "index_select": (aten.index_select.default, (x, 0, target[:64]), {}),
        "topk": (aten.topk.default, (x, 4, -1), {}),
    }


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[KernelSpec, OpCall]]:
    """Name -> (the rank side's spec, the traced call the calibration dispatches)."""
    calls = _calls()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        outputs = {name: func(*args, **kwargs) for name, (func, args, kwargs) in calls.items()}
    path = tmp_path_factory.mktemp("trace") / "ops.json"
    prof.export_chrome_trace(str(path))
    traced = _with_a_kernel_in_each_call(path, [base(func) for func, _, _ in calls.values()])
    found = {}
    for (name, (func, args, kwargs)), kernel in zip(calls.items(), traced, strict=True):
        call = dispatched_call(kernel.calls)
        assert call is not None
        found[name] = (kernel_spec(f"aten::{base(func)}", func, args, kwargs, outputs[name]),
                       call)
    return found


def base(func: Any) -> str:
    return func.overloadpacket.__name__


def _with_a_kernel_in_each_call(path: Path, ops: list[str]) -> list[Any]:
    """Kernels launched in the middle of each op's call (one per entry of ``ops``, in order):
    the trace a GPU would have given."""
    document = json.loads(path.read_text())
    calls = sorted((e for e in document["traceEvents"]
                    if e.get("cat") == "cpu_op" and e.get("name") in {f"aten::{op}" for op in ops}),
                   key=lambda e: float(e["ts"]))
    outermost: list[dict[str, Any]] = []
    for event in calls:  # the op's own call, not one it made of itself inside
        if outermost and float(event["ts"]) < float(outermost[-1]["ts"]) + float(
                outermost[-1]["dur"]):
            continue
        outermost.append(event)
    assert [e["name"] for e in outermost] == [f"aten::{op}" for op in ops]
    for correlation, event in enumerate(outermost, start=1):
        at = float(event["ts"]) + float(event["dur"]) / 2
        document["traceEvents"] += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": event["pid"],
             "tid": event["tid"], "ts": at, "dur": 0.001, "args": {"correlation": correlation}},
            {"ph": "X", "cat": "kernel", "name": "kernel", "pid": 0, "tid": 7, "ts": at,
             "dur": 1.0, "args": {"correlation": correlation, "stream": 7}}]
    path.write_text(json.dumps(document))
    return sorted(read_trace(path).kernels, key=lambda k: k.correlation)


@pytest.mark.parametrize("name", list(_calls()))
def test_a_traced_call_is_keyed_as_the_rank_side_keys_it(
        name: str, keyed: dict[str, tuple[KernelSpec, OpCall]]) -> None:
    expected, call = keyed[name]
    spec = launch_spec(call)
    assert spec is not None, f"{call.name} {call.input_types} left unkeyed"
    assert base_name(spec.name) == base_name(expected.name)
    assert (spec.flops, spec.dtype, spec.dims, spec.variant) == (
        expected.flops, expected.dtype, expected.dims, expected.variant)
    if spec.family in (Family.ATTENTION_FWD, Family.ATTENTION_BWD):
        # not part of attention's key: the kernels' small extra outputs (RNG state) are left out
        assert spec.bytes == pytest.approx(expected.bytes, rel=0.01)
    else:
        assert spec.bytes == expected.bytes


def _chain(*names: str) -> list[OpCall]:
    """Op calls enclosing a launch, innermost first, without their inputs."""
    return [OpCall(name) for name in names]


def test_the_simulator_names_a_kernel_by_the_outermost_op_it_dispatches() -> None:
    assert dispatched_call(_chain("aten::copy_", "aten::_to_copy", "aten::to")) == \
        OpCall("aten::_to_copy")
    assert dispatched_call(_chain("aten::mm", "aten::matmul", "aten::linear")) == \
        OpCall("aten::mm")
    assert dispatched_call(_chain("aten::fill_", "aten::zero_", "aten::zeros")) == \
        OpCall("aten::zeros")
    assert dispatched_call(_chain("aten::cudnn_convolution", "aten::_convolution",
                                  "aten::convolution", "aten::conv2d")) == \
        OpCall("aten::convolution")
    assert dispatched_call(_chain("aten::weird_op")) == OpCall("aten::weird_op")
    assert dispatched_call([]) is None


def test_a_tensor_list_leaves_the_call_unkeyed() -> None:
    adamw = OpCall("aten::_fused_adamw_", ((), (), ()), ("TensorList", "TensorList", "Scalar"),
                   ("", "", "0.001"))
    assert launch_spec(adamw) is None
    assert launch_spec(OpCall("aten::no_such_op", ((4,),), ("float",), ("",))) is None
