"""What a CUDA build of PyTorch dispatches for common training ops: the fake GPU's reference.

Each case in :data:`CASES` is a setup and a body. :func:`dispatched` runs the body under a
``TorchDispatchMode`` pushed on top of whatever mode is active and returns every aten op that
reaches it, with its outputs' shapes, dtypes and strides. That is the same point of the
dispatcher on both builds: below autograd and autocast, where ``SimFakeMode`` records kernels.
On a real GPU the mode stack holds only this recorder; on the simulator it sits above
``SimFakeMode``.

Recorded on a real GPU (torch 2.11 CUDA) with::

    python3 -m tests.intercept.cuda_reference --out "$OUT/cuda_reference.json"

which also profiles each body and lists the aten ops that had device time of their own (what a
profile of a real step, ``scripts/measure/data/ops/*.json``, names). ``test_device_cuda_ops``
compares the fake GPU's dispatch with the stored file (``data/cuda_reference.json``).
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

REFERENCE_PATH = Path(__file__).resolve().parent / "data" / "cuda_reference.json"
EXAMPLES = Path(__file__).resolve().parents[2] / "scenarios" / "examples"

_SKIPPED_NAMESPACES = frozenset({"prim"})
"""Metadata queries a FakeTensor answers through the mode stack; a real tensor never does."""


class Case(NamedTuple):
    """Lines of code on 'cuda' tensors: ``setup`` runs unrecorded, then ``body`` recorded.

    Both run with ``torch`` and ``F`` (``torch.nn.functional``) bound and with
    ``scenarios/examples`` importable."""

    setup: tuple[str, ...]
    body: tuple[str, ...]


CASES: dict[str, Case] = {
    "rms_norm": Case(
        setup=(
            "x = torch.randn(4, 16, 256, device='cuda', requires_grad=True)",
            "w = torch.randn(256, device='cuda', requires_grad=True)",
        ),
        body=("F.rms_norm(x, (256,), w, 1e-5).sum().backward()",)),
    "rms_norm_module_autocast": Case(
        setup=(
            "norm = torch.nn.RMSNorm(256, eps=1e-5).cuda()",
            "x = torch.randn(4, 16, 256, device='cuda', requires_grad=True)",
        ),
        body=(
            "with torch.autocast('cuda', dtype=torch.bfloat16):",
            "    y = norm(x)",
            "y.float().sum().backward()",
        )),
    "rms_norm_mixed_dtype": Case(
        setup=(
            "x = torch.randn(4, 16, 256, device='cuda', dtype=torch.bfloat16)",
            "x.requires_grad_()",
            "w = torch.randn(256, device='cuda', requires_grad=True)",
        ),
        body=("F.rms_norm(x, (256,), w, 1e-5).float().sum().backward()",)),
    "silu": Case(
        setup=(
            "x = torch.randn(64, 512, device='cuda', dtype=torch.bfloat16)",
            "x.requires_grad_()",
        ),
        body=("F.silu(x).sum().backward()",)),
    "mish": Case(
        setup=("x = torch.randn(64, 512, device='cuda', requires_grad=True)",),
        body=("F.mish(x).sum().backward()",)),
    "gelu": Case(
        setup=("x = torch.randn(64, 512, device='cuda', requires_grad=True)",),
        body=("(F.gelu(x) + F.gelu(x, approximate='tanh')).sum().backward()",)),
    "layer_norm": Case(
        setup=(
            "ln = torch.nn.LayerNorm(256).cuda()",
            "x = torch.randn(4, 16, 256, device='cuda', requires_grad=True)",
        ),
        body=("ln(x).sum().backward()",)),
    "softmax": Case(
        setup=("x = torch.randn(64, 512, device='cuda', requires_grad=True)",),
        body=("(F.softmax(x, -1) + F.log_softmax(x, -1)).sum().backward()",)),
    "dropout": Case(
        setup=("x = torch.randn(64, 512, device='cuda', requires_grad=True)",),
        body=("F.dropout(x, 0.1, training=True).sum().backward()",)),
    "cross_entropy": Case(
        setup=(
            "logits = torch.randn(64, 1000, device='cuda', requires_grad=True)",
            "targets = torch.randint(0, 1000, (64,), device='cuda')",
        ),
        body=("F.cross_entropy(logits, targets, ignore_index=-1).backward()",)),
    "embedding": Case(
        setup=(
            "table = torch.nn.Embedding(1000, 256).cuda()",
            "idx = torch.randint(0, 1000, (4, 32), device='cuda')",
        ),
        body=("table(idx).sum().backward()",)),
    "mse_loss": Case(
        setup=(
            "x = torch.randn(64, 512, device='cuda', requires_grad=True)",
            "y = torch.randn(64, 512, device='cuda')",
        ),
        body=("F.mse_loss(x, y).backward()",)),
    "linear_3d": Case(
        setup=(
            "x = torch.randn(4, 16, 256, device='cuda', requires_grad=True)",
            "w = torch.randn(512, 256, device='cuda', requires_grad=True)",
            "b = torch.randn(512, device='cuda', requires_grad=True)",
        ),
        body=("(F.linear(x, w, b) + F.linear(x, w)).sum().backward()",)),
    "linear_autocast": Case(
        setup=(
            "x = torch.randn(4, 16, 256, device='cuda', requires_grad=True)",
            "w = torch.randn(512, 256, device='cuda', requires_grad=True)",
        ),
        body=(
            "with torch.autocast('cuda', dtype=torch.bfloat16):",
            "    y = F.linear(x, w)",
            "y.float().sum().backward()",
        )),
    "rope": Case(  # scenarios/examples/llama_model.apply_rotary
        setup=(
            "x = torch.randn(2, 16, 4, 32, device='cuda', dtype=torch.bfloat16)",
            "x.requires_grad_()",
            "cos = torch.randn(16, 1, 16, device='cuda', dtype=torch.bfloat16)",
            "sin = torch.randn(16, 1, 16, device='cuda', dtype=torch.bfloat16)",
        ),
        body=(
            "x1, x2 = x[..., :16], x[..., 16:]",
            "y = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)",
            "y.float().sum().backward()",
        )),
    "repeat_kv": Case(  # grouped-query attention's key/value expansion
        setup=("k = torch.randn(2, 16, 2, 32, device='cuda', requires_grad=True)",),
        body=(
            "k[:, :, :, None, :].expand(-1, -1, -1, 3, -1).reshape(2, 16, 6, 32).sum().backward()",
        )),
    "sdpa_causal": Case(
        setup=(
            "q, k, v = (torch.randn(2, 4, 128, 64, device='cuda', dtype=torch.bfloat16,",
            "                       requires_grad=True) for _ in range(3))",
        ),
        body=(
            "F.scaled_dot_product_attention(q, k, v, is_causal=True).float().sum().backward()",
        )),
    "clip_grad_norm": Case(
        setup=(
            "params = [torch.nn.Parameter(torch.randn(n, device='cuda')) for n in (256, 1000, 64)]",
            "for p in params:",
            "    p.grad = torch.randn_like(p)",
        ),
        body=("torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)",)),
    "adamw_fused": Case(
        setup=(
            "params = [torch.nn.Parameter(torch.randn(n, device='cuda')) for n in (256, 1000, 64)]",
            "for p in params:",
            "    p.grad = torch.randn_like(p)",
            "opt = torch.optim.AdamW(params, lr=1e-3, fused=True)",
            "opt.step()",
        ),
        body=("opt.step()",)),
    "adamw_foreach": Case(
        setup=(
            "params = [torch.nn.Parameter(torch.randn(n, device='cuda')) for n in (256, 1000, 64)]",
            "for p in params:",
            "    p.grad = torch.randn_like(p)",
            "opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)",
            "opt.step()",
        ),
        body=("opt.step()",)),
    "lstm": Case(
        setup=(
            "lstm = torch.nn.LSTM(64, 128, num_layers=2, batch_first=True).cuda()",
            "x = torch.randn(4, 16, 64, device='cuda', requires_grad=True)",
        ),
        body=("out, (h, c) = lstm(x)", "out.sum().backward()")),
    "lstm_autocast": Case(  # a CUDA build's autocast runs cuDNN's RNN in fp16
        setup=(
            "lstm = torch.nn.LSTM(64, 128, num_layers=2).cuda()",
            "x = torch.randn(16, 4, 64, device='cuda')",
        ),
        body=(
            "with torch.autocast('cuda', dtype=torch.bfloat16):",
            "    out, _ = lstm(x)",
            "out.float().sum().backward()",
        )),
    "lstm_bf16": Case(  # cuDNN takes no bf16 RNN: the fused cell per step, as on a CPU build
        setup=(
            "lstm = torch.nn.LSTM(32, 32).cuda().bfloat16()",
            "x = torch.randn(3, 2, 32, device='cuda', dtype=torch.bfloat16)",
        ),
        body=("lstm(x)[0].float().sum().backward()",)),
    "gru_packed_bidirectional": Case(
        setup=(
            "from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence",
            "gru = torch.nn.GRU(32, 64, bidirectional=True).cuda()",
            "y = torch.randn(10, 4, 32, device='cuda', requires_grad=True)",
        ),
        body=(
            "out, h = gru(pack_padded_sequence(y, [10, 8, 5, 3]))",
            "pad_packed_sequence(out)[0].sum().backward()",
        )),
    "llama_tiny_step": Case(  # a steady-state step of the example Llama, as the scripts run it
        setup=(
            "from llama_model import LLAMA_PRESETS, Llama",
            "model = Llama(LLAMA_PRESETS['llama-tiny']).cuda()",
            "opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)",
            "idx = torch.randint(0, 1024, (2, 128), device='cuda')",
            "def step():",
            "    with torch.autocast('cuda', dtype=torch.bfloat16):",
            "        _, loss = model(idx, idx)",
            "    loss.backward()",
            "    opt.step()",
            "    opt.zero_grad(set_to_none=True)",
            "step()",
        ),
        body=("step()",)),
}


class _Recorder(TorchDispatchMode):
    """Every aten op that reaches this mode, with its outputs' metadata, then runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[dict[str, Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func.namespace not in _SKIPPED_NAMESPACES:
            self.ops.append({"op": str(func), "out": [
                [list(t.shape), str(t.dtype).removeprefix("torch."), list(t.stride())]
                for t in tree_leaves(out) if isinstance(t, torch.Tensor)]})
        return out


def _run(lines: tuple[str, ...], namespace: dict[str, Any]) -> None:
    exec(compile("\n".join(lines), "<case>", "exec"), namespace)  # noqa: S102 (our own cases)


def _set_up(case: Case) -> dict[str, Any]:
    """The namespace ``case.body`` runs in, after ``case.setup`` ran in it."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    namespace: dict[str, Any] = {"torch": torch, "F": torch.nn.functional}
    _run(case.setup, namespace)
    return namespace


def dispatched(case: Case) -> list[dict[str, Any]]:
    """The aten ops ``case.body`` dispatches (see the module docstring)."""
    namespace = _set_up(case)
    recorder = _Recorder()
    with recorder:
        _run(case.body, namespace)
    return recorder.ops


def _profiled(case: Case) -> dict[str, int]:
    """Aten op -> calls, for the ops with device time of their own while ``case.body`` ran."""
    from torch.profiler import ProfilerActivity, profile

    namespace = _set_up(case)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _run(case.body, namespace)
        torch.cuda.synchronize()
    return {event.key: event.count for event in prof.key_averages()
            if event.self_device_time_total > 0 and event.key.startswith("aten::")}


def main() -> None:
    parser = argparse.ArgumentParser(description="Record the reference on a real CUDA GPU.")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if torch.version.cuda is None or not torch.cuda.is_available():
        raise SystemExit("needs a CUDA build of torch and a GPU")
    cases = {name: {"dispatched": dispatched(case), "kernels": _profiled(case)}
             for name, case in CASES.items()}
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "cases": cases}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(cases)} cases on {result['gpu']} (torch {result['torch']}): wrote {args.out}")


if __name__ == "__main__":
    main()
