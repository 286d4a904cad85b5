"""Host CPU time a real GPU host spends per intercepted operation, per op family: the table
``intercept.host_time.host_cost`` charges (``hwmodel/measured/data/host_costs.json``).

  # 1. on a lent GPU machine (one GPU is enough), from the repository root:
  python3 scripts/measure/measure_host_costs.py --json /tmp/host_costs.json
  # 2. here: derive the shipped table from a raw record, its per-op rows from records of the
  #    aten and ops sections (prints the table it derived)
  python3 scripts/measure/measure_host_costs.py --import-raw scripts/measure/data/host_costs/h100x1.json \
      --import-ops scripts/measure/data/host_costs/h100x1-ops?.json \
      --reference h100-host --write hwmodel/measured/data/host_costs.json

Each case issues its operation back to back and reports the host's wall time per call (what a
rank's clock would have advanced on that host), with the GPU held busy behind a
``torch.cuda._sleep`` so that the host never waits for it; a round whose GPU had already drained
when the loop ended is marked invalid (the host may have waited). Per case: the median and the
minimum of ``--rounds`` rounds. Families:

* ``call``: a plain Python call of two arguments (the part of an op the simulator still counts as
  the script's Python).
* ``aten.*``: one op each (binding, dispatcher, autograd record where inputs require grad, the
  CUDA kernel launch).
* ``backward``: the autograd engine per backward node (its kernel launches included).
* ``layers``: training dropout, and a custom autograd ``Function``'s ``apply`` around one op.
* ``foreach``: ``torch._foreach_*`` calls against their list length, optimizer ``step()``s
  against their parameter count.
* ``c10d``: the collective call path (``torch.distributed`` on a one-rank NCCL group: the Python
  wrapper, ProcessGroupNCCL's work, events and stream waits, NCCL's enqueue); and the host side of
  ``synchronize; t0; collective; synchronize; t1`` with its GPU time (CUDA events) beside it.
* ``ddp``, ``fsdp2``, ``dtensor``, ``cuda_graph``: the host time those frameworks add per bucket,
  per parameter group, per op, per replay.
* ``compiled``: ``torch.compile``d graphs' calls against their generated kernels
  (``scripts/measure/compiled_chains.py``; fitted by ``scripts/measure/fit_compiled_host.py``).

Products of shapes new to the process (cuBLAS's heuristic) are
``scripts/measure/measure_gemm_heuristic.py``'s.

Torch and the standard library only, so it runs with the device machines' own Python.
"""

import contextlib
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from measurements import plain_name, read_text  # noqa: E402
from scripts import common  # noqa: E402

SLEEP_CYCLES = 200_000_000
"""GPU cycles the stream sleeps before each round (~0.1 s): longer than any round's host loop."""


class Recorder:
    """Times cases and keeps their rows."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.rows: list[dict[str, Any]] = []

    def case(self, family: str, name: str, op: Callable[[], object], *, calls: int,
             per: float = 1.0, sync: bool = False, **extra: Any) -> None:
        """Host us per call of ``op`` (divided by ``per``: per tensor, per bucket, ...).
        ``sync``: ``op`` waits for the GPU, so each round starts with the GPU idle instead of
        held busy (every round counts as valid)."""
        try:
            for _ in range(max(3, calls // 10)):
                op()
            torch.cuda.synchronize()
            per_round, cpu_round, valid = [], [], 0
            for _ in range(self.rounds):
                if not sync:
                    torch.cuda._sleep(SLEEP_CYCLES)
                cpu0 = time.thread_time()
                start = time.perf_counter()
                for _ in range(calls):
                    op()
                elapsed = time.perf_counter() - start
                cpu = time.thread_time() - cpu0
                valid += sync or not torch.cuda.current_stream().query()
                per_round.append(elapsed / calls / per * 1e6)
                cpu_round.append(cpu / calls / per * 1e6)
                torch.cuda.synchronize()
            row = {"family": family, "case": name, "us_median": round(statistics.median(per_round), 3),
                   "us_min": round(min(per_round), 3),
                   "cpu_us_median": round(statistics.median(cpu_round), 3),
                   "valid_rounds": valid, "rounds": self.rounds, "calls": calls, "per": per,
                   **({"sync": True} if sync else {}), **extra}
        except Exception as exc:  # one broken case must not lose the others
            row = {"family": family, "case": name, "error": f"{type(exc).__name__}: {exc}"}
            torch.cuda.synchronize()
        self.rows.append(row)
        print(json.dumps(row), flush=True)


def _plain(a: object, b: object) -> object:
    return a


def aten_ops(dev: torch.device) -> dict[str, tuple[str, Callable[[], object]]]:
    """The ``aten`` section's cases: name -> (family, a call of the op)."""
    small = torch.ones(16, device=dev)
    x = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    b = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    bx = torch.randn(8, 256, 256, device=dev, dtype=torch.bfloat16)
    q = torch.randn(4, 12, 256, 64, device=dev, dtype=torch.bfloat16)
    ids = torch.randint(0, 1000, (4, 256), device=dev)
    table = torch.randn(1000, 768, device=dev, dtype=torch.bfloat16)
    logits = torch.randn(1024, 1000, device=dev)
    target = torch.randint(0, 1000, (1024,), device=dev)
    xg = x.clone().requires_grad_()
    wg = w.clone().requires_grad_()
    bg = b.clone().requires_grad_()
    return {
        "add_ 16 floats": ("aten.elementwise", lambda: small.add_(small)),
        "add out-of-place bf16 1M": ("aten.elementwise", lambda: x + x),
        "mul bf16 1M": ("aten.elementwise", lambda: x * 2.0),
        "gelu bf16 1M": ("aten.elementwise", lambda: F.gelu(x)),
        "to float32 (_to_copy)": ("aten.elementwise", lambda: x.float()),
        "copy_": ("aten.elementwise", lambda: w.copy_(x)),
        "zeros 1M": ("aten.factory", lambda: torch.zeros(1024, 1024, device=dev)),
        "empty 1M": ("aten.factory", lambda: torch.empty(1024, 1024, device=dev)),
        "view": ("aten.view", lambda: x.view(-1)),
        "transpose": ("aten.view", lambda: x.t()),
        "sum": ("aten.reduction", lambda: x.sum()),
        "mean dim": ("aten.reduction", lambda: x.mean(-1)),
        "mm": ("aten.matmul", lambda: x @ w),
        "linear+bias (addmm)": ("aten.matmul", lambda: F.linear(x, w, b)),
        "bmm": ("aten.matmul", lambda: torch.bmm(bx, bx)),
        "layer_norm": ("aten.norm", lambda: F.layer_norm(x, (1024,))),
        "softmax": ("aten.softmax", lambda: torch.softmax(x, -1)),
        "sdpa causal": ("aten.attention", lambda: F.scaled_dot_product_attention(
            q, q, q, is_causal=True)),
        "embedding": ("aten.embedding", lambda: F.embedding(ids, table)),
        "cat": ("aten.cat", lambda: torch.cat([x, x])),
        "index_select": ("aten.index", lambda: x.index_select(0, target[:64])),
        "cross_entropy": ("aten.composite", lambda: F.cross_entropy(logits, target)),
        "add requires_grad": ("aten.autograd", lambda: xg + xg),
        "linear+bias requires_grad": ("aten.autograd", lambda: F.linear(xg, wg, bg)),
        "gelu requires_grad": ("aten.autograd", lambda: F.gelu(xg)),
        "layer_norm requires_grad": ("aten.autograd", lambda: F.layer_norm(xg, (1024,))),
    }


def aten_cases(rec: Recorder, dev: torch.device) -> None:
    small = torch.ones(16, device=dev)
    n = 200
    rec.case("call", "plain python call (2 args)", lambda: _plain(small, small), calls=n)
    cases = aten_ops(dev)
    with torch.no_grad():
        for name, (family, op) in cases.items():
            if family != "aten.autograd":
                rec.case(family, name, op, calls=n)
    for name, (family, op) in cases.items():
        if family == "aten.autograd":
            rec.case(family, name, op, calls=n)


MIX_PYTHON_DEPTH = 4
"""``nn.Identity`` modules in the ``nn.Sequential`` the ``mix`` section calls between two ops."""


@dataclass(frozen=True)
class MixCalls:
    """The ``mix`` section's calls (see :func:`mix_cases`)."""

    ops: dict[str, Callable[[], object]]
    """The ``aten`` section's no-grad cases, each a call of its op."""
    in_turn: Callable[[], None]
    """Every op once, one after another."""
    module_path: Callable[[], object]
    """A call of an ``nn.Sequential`` of :data:`MIX_PYTHON_DEPTH` ``nn.Identity``: module
    calls that only pass the input on, no op."""
    in_turn_with_module_path: Callable[[], None]
    """The ops in turn with :attr:`module_path` before each."""


def mix_calls(dev: torch.device) -> MixCalls:
    """The ``mix`` section's calls on ``dev`` (``scripts/measure/op_mix.py`` times them too)."""
    ops = {name: op for name, (family, op) in aten_ops(dev).items() if family != "aten.autograd"}
    modules = nn.Sequential(*(nn.Identity() for _ in range(MIX_PYTHON_DEPTH)))
    token = torch.ones(1, device=dev)

    def in_turn() -> None:
        for op in ops.values():
            op()

    def in_turn_with_module_path() -> None:
        for op in ops.values():
            modules(token)
            op()

    return MixCalls(ops, in_turn, lambda: modules(token), in_turn_with_module_path)


def mix_cases(rec: Recorder, dev: torch.device) -> None:
    """The ``aten`` section's no-grad cases in turn, one call each, as a step runs them (each
    op after another op), against their own loops; then with a module call between two ops (a
    model's Python between its ops: ``nn.Module`` call paths that only pass the input on), and
    that call alone. The mix's per-op cost over the loops' mean is what running in turn costs
    the ops; the mix with the module calls over the two alone what interleaving costs both."""
    mix = mix_calls(dev)
    names = list(mix.ops)
    with torch.no_grad():
        rec.case("mix", f"module call path ({MIX_PYTHON_DEPTH} Identity in a Sequential)",
                 mix.module_path, calls=200)
        rec.case("mix", "ops in turn", mix.in_turn, calls=10, per=len(names), ops=names)
        rec.case("mix", "ops in turn, a module call before each", mix.in_turn_with_module_path,
                 calls=10, per=len(names), ops=names)


def ops_cases(rec: Recorder, dev: torch.device) -> None:
    """Ops whose host path departs from their family's: several kernels (a radix sort, top-k,
    an accumulating index_put, the embedding's backward), or a host synchronisation to learn a
    count (``bincount``, ``nonzero``, ``unique``: measured with the GPU idle, so their rounds
    are never marked valid by the GPU-busy check; ``sync=True`` rows). Sizes are an MoE
    layer's: 8,192 tokens of width 1,024 routed to 2 of 8 experts."""
    tokens, top_k, experts, width = 8192, 2, 8, 1024
    ids = torch.randint(0, experts, (tokens * top_k,), device=dev)
    probs = torch.rand(tokens, experts, device=dev)
    src = torch.randn(tokens * top_k, width, device=dev, dtype=torch.bfloat16)
    dst = torch.zeros(tokens, width, device=dev, dtype=torch.bfloat16)
    rows = ids // top_k
    small_ids = ids[:1024].clone()  # at most 4,096 along the dim: ATen's one-kernel sort
    counts = torch.bincount(ids, minlength=experts)
    local = torch.arange(experts // 2, device=dev)
    mask = ids == 0
    vocab_ids = torch.randint(0, 32000, (4, 2048), device=dev)
    grad_out = torch.randn(4, 2048, width, device=dev, dtype=torch.bfloat16)
    n = 100
    few = 10  # a sort launches tens of kernels: more calls would fill the launch queue
    with torch.no_grad():
        rec.case("ops", "sort stable int64 16k", lambda: ids.sort(stable=True), calls=few)
        rec.case("ops", "sort stable int64 1k (one kernel)", lambda: small_ids.sort(stable=True),
                 calls=n)
        rec.case("ops", "topk 2 of 8 (8k rows)", lambda: probs.topk(top_k, dim=-1), calls=n)
        rec.case("ops", "index_put_ accumulate (16k rows)",
                 lambda: dst.index_put_((rows,), src, accumulate=True), calls=few)
        rec.case("ops", "repeat", lambda: local.repeat(2), calls=n)
        rec.case("ops", "repeat_interleave output_size",
                 lambda: torch.repeat_interleave(torch.arange(experts, device=dev), counts,
                                                 output_size=tokens * top_k), calls=n)
        rec.case("ops", "cumsum int64 16k", lambda: ids.cumsum(0), calls=n)
        rec.case("ops", "index_put_ accumulate (1k rows)",
                 lambda: dst.index_put_((rows[:1024],), src[:1024], accumulate=True), calls=few)
        rec.case("ops", "embedding_dense_backward (512 tokens, 1k x 128)",
                 lambda: torch.ops.aten.embedding_dense_backward(
                     grad_out[:1, :512, :128], vocab_ids[:1, :512] % 1024, 1024, -1, False),
                 calls=few)
        rec.case("ops", "embedding_dense_backward (32k x 1024)",
                 lambda: torch.ops.aten.embedding_dense_backward(grad_out, vocab_ids, 32000, -1,
                                                                 False), calls=few)
        rec.case("ops", "bincount 16k (syncs)", lambda: torch.bincount(ids, minlength=experts),
                 calls=n, sync=True)
        rec.case("ops", "nonzero 16k (syncs)", lambda: mask.nonzero(), calls=n, sync=True)
        rec.case("ops", "unique 16k (syncs)", lambda: torch.unique(ids), calls=n, sync=True)
    cudnn_cases(rec, dev)


def cudnn_cases(rec: Recorder, dev: torch.device) -> None:
    """Convolution and batch norm, whose host path is cuDNN's (an execution-plan lookup, kernel
    attribute queries, several launches) or a multi-kernel native one, not one elementwise
    launch. Sizes are a ResNet-50 bottleneck's 3x3 convolution at batch 64, channels_last bf16 as
    under autocast, with fp32 batch-norm parameters as a module keeps them."""
    x = torch.randn(64, 64, 56, 56, device=dev, dtype=torch.bfloat16).to(
        memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device=dev, dtype=torch.bfloat16).to(
        memory_format=torch.channels_last)
    grad = torch.randn_like(x)
    gamma, beta = torch.ones(64, device=dev), torch.zeros(64, device=dev)
    mean, var = torch.zeros(64, device=dev), torch.ones(64, device=dev)
    _, save_mean, save_invstd = torch.ops.aten.native_batch_norm(x, gamma, beta, mean, var, True,
                                                                 0.1, 1e-5)
    n = 50  # each launches up to a few kernels of ~0.1 ms: the GPU sleep outlasts the loop
    with torch.no_grad():
        rec.case("ops", "conv2d 3x3 64ch 56x56 b64 (cudnn)",
                 lambda: F.conv2d(x, w, padding=1), calls=n)
        rec.case("ops", "convolution_backward 3x3 (input and weight grads)",
                 lambda: torch.ops.aten.convolution_backward(
                     grad, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                     [True, True, False]), calls=n)
        rec.case("ops", "batch_norm training 64ch 56x56 b64",
                 lambda: F.batch_norm(x, mean, var, gamma, beta, training=True), calls=n)
        rec.case("ops", "native_batch_norm_backward",
                 lambda: torch.ops.aten.native_batch_norm_backward(
                     grad, x, gamma, mean, var, save_mean, save_invstd, True, 1e-5,
                     [True, True, True]), calls=n)


def backward_cases(rec: Recorder, dev: torch.device) -> None:
    depth = 50
    for kind in ("mul", "linear"):
        x0 = torch.randn(256, 256, device=dev, requires_grad=True)
        w = torch.randn(256, 256, device=dev, requires_grad=True)

        def chain(kind: str = kind, x0: torch.Tensor = x0, w: torch.Tensor = w) -> torch.Tensor:
            y = x0
            for _ in range(depth):
                y = y * 1.0001 if kind == "mul" else F.linear(y, w)
            return y.sum()

        def forward_only(chain: Callable[[], torch.Tensor] = chain) -> object:
            return chain()

        def forward_backward(chain: Callable[[], torch.Tensor] = chain) -> object:
            chain().backward()
            return None

        rec.case("backward", f"forward chain of {depth} {kind}", forward_only, calls=4, per=depth)
        rec.case("backward", f"forward+backward chain of {depth} {kind}", forward_backward,
                 calls=4, per=depth)


class _ScaleFunction(torch.autograd.Function):
    """A custom autograd ``Function`` around one op, as frameworks wrap their layers (Megatron's
    linear layers, its tensor-parallel regions): ``apply``'s own host path against the op's."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2.0


def layers_cases(rec: Recorder, dev: torch.device) -> None:
    """Host paths a step takes above or beside one kernel that the ``aten`` families do not hold:
    training dropout (its philox seed and offset on top of the one kernel) with and without an
    autograd record, and a custom autograd ``Function`` around one op against the same op
    recorded by autograd (what ``Function.apply`` adds: its node, context and output wrapping)."""
    x = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    xg = x.clone().requires_grad_()
    n = 200
    with torch.no_grad():
        rec.case("layers", "dropout p=0.1 training bf16 1M",
                 lambda: F.dropout(x, 0.1, training=True), calls=n)
    rec.case("layers", "dropout p=0.1 training requires_grad",
             lambda: F.dropout(xg, 0.1, training=True), calls=n)
    rec.case("layers", "mul requires_grad", lambda: xg * 2.0, calls=n)
    rec.case("layers", "custom Function.apply (mul) requires_grad",
             lambda: _ScaleFunction.apply(xg), calls=n)


def foreach_cases(rec: Recorder, dev: torch.device) -> None:
    for count in (1, 8, 32, 128, 512):
        tensors = [torch.ones(4096, device=dev) for _ in range(count)]
        rec.case("foreach", f"_foreach_add_ x{count}", lambda t=tensors: torch._foreach_add_(t, t),
                 calls=20, tensors=count)
        rec.case("foreach", f"_foreach_mul_ scalar x{count}",
                 lambda t=tensors: torch._foreach_mul_(t, 0.5), calls=20, tensors=count)
    for count in (8, 32, 128):
        for variant in ("foreach", "fused"):
            params = [torch.nn.Parameter(torch.randn(4096, device=dev)) for _ in range(count)]
            for p in params:
                p.grad = torch.randn_like(p)
            opt = torch.optim.AdamW(params, lr=1e-4, **{variant: True})
            rec.case("foreach", f"AdamW({variant}) step x{count}", opt.step, calls=5,
                     tensors=count)
            opt.zero_grad(set_to_none=False)
            rec.case("foreach", f"zero_grad(set_to_none=False) x{count} ({variant})",
                     lambda o=opt: o.zero_grad(set_to_none=False), calls=5, tensors=count)


def c10d_cases(rec: Recorder, dev: torch.device) -> None:
    import torch.distributed as dist

    mib = 2**20
    grads = torch.ones(4 * mib, device=dev)  # 16 MiB
    out = torch.empty(4 * mib, device=dev)
    n = 100
    rec.case("c10d", "all_reduce async 16 MiB", lambda: dist.all_reduce(grads, async_op=True),
             calls=n)
    rec.case("c10d", "all_reduce sync 16 MiB", lambda: dist.all_reduce(grads), calls=n)
    rec.case("c10d", "all_gather_into_tensor async",
             lambda: dist.all_gather_into_tensor(out, grads, async_op=True), calls=n)
    rec.case("c10d", "reduce_scatter_tensor async",
             lambda: dist.reduce_scatter_tensor(out, grads, async_op=True), calls=n)
    rec.case("c10d", "broadcast async", lambda: dist.broadcast(grads, 0, async_op=True), calls=n)
    rec.case("c10d", "all_to_all_single async",
             lambda: dist.all_to_all_single(out, grads, async_op=True), calls=n)
    rec.case("c10d", "all_reduce async + work.wait()",
             lambda: dist.all_reduce(grads, async_op=True).wait(), calls=n)
    rec.case("sync", "torch.cuda.synchronize() idle GPU", torch.cuda.synchronize, calls=n)
    # The timing loop of issue 14 on one rank: host time from t0 to t1 against the GPU's time.
    for size_mib in (1, 4, 16, 64, 256):
        buf = torch.ones(size_mib * mib // 2, device=dev, dtype=torch.bfloat16)
        for name, op in (("all_reduce", lambda b=buf: dist.all_reduce(b)),
                         ("broadcast", lambda b=buf: dist.broadcast(b, 0)),
                         ("add_", lambda b=buf: b.add_(b))):
            walls, gpus = [], []
            start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            for i in range(12):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                start_ev.record()
                op()
                end_ev.record()
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                if i >= 2:
                    walls.append((t1 - t0) * 1e6)
                    gpus.append(start_ev.elapsed_time(end_ev) * 1e3)
            row = {"family": "sync_loop", "case": f"{name} {size_mib} MiB (1 rank)",
                   "wall_us_median": round(statistics.median(walls), 2),
                   "gpu_us_median": round(statistics.median(gpus), 2),
                   "host_over_gpu_us": round(statistics.median(walls) - statistics.median(gpus), 2)}
            rec.rows.append(row)
            print(json.dumps(row), flush=True)


def framework_cases(rec: Recorder, dev: torch.device) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    layers = 16
    width = 256

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).to(dev)

    x = torch.randn(8, width, device=dev)

    def step(m: nn.Module) -> Callable[[], object]:
        def run() -> object:
            m(x).sum().backward()
            return None
        return run

    plain = model()
    rec.case("ddp", "plain fwd+bwd (16 linear)", step(plain), calls=5)
    # one bucket per layer (each layer ~257 KiB of fp32 grads)
    ddp = DDP(model(), bucket_cap_mb=0.25, device_ids=[dev.index])
    rec.case("ddp", "DDP fwd+bwd (16 linear, ~16 buckets)", step(ddp), calls=5)
    ddp1 = DDP(model(), bucket_cap_mb=1000, device_ids=[dev.index])
    rec.case("ddp", "DDP fwd+bwd (16 linear, 1 bucket)", step(ddp1), calls=5)
    with contextlib.suppress(Exception):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cuda", (1,))
        fsdp = model()
        for layer in fsdp:
            fully_shard(layer, mesh=mesh)
        fully_shard(fsdp, mesh=mesh)
        rec.case("fsdp2", "FSDP2 fwd+bwd (16 linear, 17 groups)", step(fsdp), calls=5,
                 groups=layers + 1)
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        a = distribute_tensor(torch.randn(1024, 1024, device=dev), mesh, [Shard(0)])
        bt = distribute_tensor(torch.randn(1024, 1024, device=dev), mesh, [Replicate()])
        plain_a = torch.randn(1024, 1024, device=dev)
        with torch.no_grad():
            rec.case("dtensor", "plain mm", lambda: plain_a @ plain_a, calls=100)
            rec.case("dtensor", "DTensor mm (Shard(0) x Replicate)", lambda: a @ bt, calls=100)
            rec.case("dtensor", "DTensor add (Shard(0) + Shard(0))", lambda: a + a, calls=100)
            rec.case("dtensor", "plain add", lambda: plain_a + plain_a, calls=100)
    del dist


def graph_cases(rec: Recorder, dev: torch.device) -> None:
    x = torch.randn(1024, 1024, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y = x * 2
    torch.cuda.current_stream().wait_stream(s)
    for kernels in (1, 32):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = x
            for _ in range(kernels):
                y = y * 1.0001
        rec.case("cuda_graph", f"CUDAGraph.replay() ({kernels} kernels)", g.replay, calls=50,
                 kernels=kernels)


def _kernels_per_call(op: Callable[[], object]) -> int:
    """GPU kernels one call of ``op`` runs (the profiler's device events, memcpy and memset
    left out)."""
    from torch.profiler import ProfilerActivity, profile

    op()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        op()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.lower().startswith(("memcpy", "memset")))


def compiled_cases(rec: Recorder, dev: torch.device) -> None:
    """``torch.compile`` (Inductor, no CUDA graphs): compiled graphs' calls against the generated
    kernels they launch, the rows of ``scripts/measure/compiled_chains.py`` (which says why),
    each with its kernels counted."""
    from scripts.measure import compiled_chains

    for name, depth, op in compiled_chains.cases(dev):
        with torch.set_grad_enabled(not name.startswith("inference")):
            kernels = _kernels_per_call(op)
            # calls x kernels well inside the launch queue (the GPU sleeps behind them)
            rec.case("compiled", name, op, calls=max(8, 400 // kernels), kernels=kernels,
                     depth=depth)


SECTIONS = (aten_cases, ops_cases, backward_cases, layers_cases, foreach_cases, c10d_cases,
            framework_cases, graph_cases, compiled_cases, mix_cases)
"""Every measuring section, in the order they run (``--sections`` picks by name)."""


FAMILY_CASES: dict[str, tuple[str, ...]] = {
    "view": ("view", "transpose"),
    "alloc": ("empty 1M",),
    "elementwise": ("add out-of-place bf16 1M", "mul bf16 1M", "gelu bf16 1M",
                    "to float32 (_to_copy)", "copy_"),
    "elementwise_inplace": ("add_ 16 floats",),
    "factory": ("zeros 1M",),
    "reduction": ("sum", "mean dim"),
    "matmul": ("mm", "bmm"),
    "matmul_bias": ("linear+bias (addmm)",),
    "norm": ("layer_norm",),
    "softmax": ("softmax",),
    "attention": ("sdpa causal",),
    "embedding": ("embedding",),
    "cat": ("cat",),
    "index": ("index_select",),
    "foreach": ("_foreach_add_ x1", "_foreach_mul_ scalar x1"),
}
"""Which measured cases stand for each family of ``intercept.host_time.host_cost.family_of``: the
family's cost is the median of their medians."""
COLLECTIVE_CASES: dict[str, tuple[str, ...]] = {
    "all_reduce": ("all_reduce async 16 MiB",),
    "all_gather": ("all_gather_into_tensor async",),
    "reduce_scatter": ("reduce_scatter_tensor async",),
    "broadcast": ("broadcast async",),
}
"""The ``collectives_ns`` rows (``default``: their median)."""
OPTIONAL_COLLECTIVE_CASES = {"all_to_all": "all_to_all_single async"}
"""Rows a record of an earlier version of the section lacks (the op is then charged
``default``)."""
BLOCKING_CASES = ("all_reduce async 16 MiB", "all_reduce sync 16 MiB")
"""``collective_async_extra_ns``: the first case less the second (a blocking call runs on the
caller's stream since torch 2.8)."""


def _case_us(raw: dict[str, Any], source: str) -> Callable[[str], float]:
    """Host us per call of a case of ``raw``; raises where it is missing or had no valid round
    (``source`` names the record in the message)."""
    rows = {row["case"]: row for row in raw["rows"]}

    def us(case: str) -> float:
        row = rows.get(case)
        if row is None or "us_median" not in row or not row.get("valid_rounds"):
            raise SystemExit(f"{source}: case {case!r} is missing or has no valid round")
        return float(row["us_median"])

    return us


OP_CASES: dict[str, tuple[str, str | None]] = {
    "sort": ("sort stable int64 16k", None),
    "sort_small": ("sort stable int64 1k (one kernel)", None),  # host_cost's keys
    "topk": ("topk 2 of 8 (8k rows)", None),
    "index_put_accumulate": ("index_put_ accumulate (16k rows)", None),  # host_cost's key
    "repeat": ("repeat", None),
    # the measured call is the composite, whose index_select the simulator charges on its own
    "repeat_interleave": ("repeat_interleave output_size", "index_select"),
    "cumsum": ("cumsum int64 16k", None),
    "embedding_dense_backward": ("embedding_dense_backward (32k x 1024)", None),
    "embedding_dense_backward_small": ("embedding_dense_backward (512 tokens, 1k x 128)", None),
    "bincount": ("bincount 16k (syncs)", None),
    "nonzero": ("nonzero 16k (syncs)", None),
    "_unique2": ("unique 16k (syncs)", None),
    "convolution": ("conv2d 3x3 64ch 56x56 b64 (cudnn)", None),
    "convolution_backward": ("convolution_backward 3x3 (input and weight grads)", None),
    "native_batch_norm": ("batch_norm training 64ch 56x56 b64", None),
    "native_batch_norm_backward": ("native_batch_norm_backward", None),
}
"""The ``ops_ns`` rows of the table (``intercept.host_time.host_cost``): per aten name, its ``ops``
case and the case to subtract, if any."""


def anchor_scale(base: dict[str, Any], other: dict[str, Any]) -> float:
    """How much slower ``base``'s host ran than ``other``'s: the median ratio of their ``aten.*``
    cases (both valid), to put rows measured on another host on ``base``'s footing."""
    rows = {row["case"]: row for row in other["rows"]}
    ratios = [row["us_median"] / rows[row["case"]]["us_median"] for row in base["rows"]
              if row.get("family", "").startswith("aten.") and row.get("valid_rounds")
              and rows.get(row["case"], {}).get("valid_rounds")]
    if not ratios:
        raise SystemExit("--import-ops: a record shares no valid aten case with --import-raw")
    return statistics.median(ratios)


def ops_ns(base: dict[str, Any], records: list[dict[str, Any]]) -> tuple[dict[str, int],
                                                                          list[float]]:
    """The table's ``ops_ns`` (:data:`OP_CASES`) from ``records`` (each with its own ``aten``
    and ``ops`` sections), each put on ``base``'s footing (:func:`anchor_scale`): per op the
    median over the records that have its case. Also the scales."""
    scales = [anchor_scale(base, record) for record in records]
    per_op: dict[str, list[float]] = {op: [] for op in OP_CASES}
    for record, scale in zip(records, scales, strict=True):
        us = _case_us(record, "--import-ops")
        cases = {row["case"] for row in record["rows"]}
        for op, (case, minus) in OP_CASES.items():
            if case in cases:  # a record of an earlier version of the section may lack it
                per_op[op].append((us(case) - (us(minus) if minus else 0.0)) * scale)
    missing = [OP_CASES[op][0] for op, values in per_op.items() if not values]
    if missing:
        raise SystemExit(f"--import-ops: no record has the case(s) {missing}")
    return {op: round(statistics.median(v) * 1000) for op, v in per_op.items()}, scales


AUTOGRAD_CASES = {"add requires_grad": "add out-of-place bf16 1M",
                  "linear+bias requires_grad": "linear+bias (addmm)",
                  "gelu requires_grad": "gelu bf16 1M", "layer_norm requires_grad": "layer_norm"}
"""Each op with inputs that require grad, and the same op under ``no_grad``."""


def layers_ns(us: Callable[[str], float]) -> dict[str, int]:
    """The table's ``layers_ns`` (``intercept.host_time.host_cost``): ``autograd_record``, the
    median extra cost of an op recorded for backward (:data:`AUTOGRAD_CASES`). The engine's work per
    backward node and a DTensor op's dispatch are fitted on real steps instead
    (``scripts/measure/fit_host_time.py``): the ``backward`` rows (a chain of ``mul``: 28 us per
    node with its op) and the ``dtensor`` rows (one op repeated on a one-device mesh: +19 us) are
    their starting points."""
    record = statistics.median(us(grad) - us(plain) for grad, plain in AUTOGRAD_CASES.items())
    return {"autograd_record": round(record * 1000)}


def derive_table(raw: dict[str, Any], reference: str,
                 op_records: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``hwmodel/measured/data/host_costs.json`` form of a raw record (see
    ``intercept.host_time.host_cost``), its ``ops_ns`` from ``op_records`` (:func:`ops_ns`); raises
    where a case it needs is missing or had no valid round."""
    us = _case_us(raw, "--import-raw")
    ops, scales = ops_ns(raw, op_records)

    def ns(cases: tuple[str, ...]) -> int:
        return round(statistics.median(us(c) for c in cases) * 1000)

    # per tensor beyond the first: the slope of the foreach rows from 1 to 512 tensors
    slopes = [(us(f"{op} x512") - us(f"{op} x1")) / 511
              for op in ("_foreach_add_", "_foreach_mul_ scalar")]
    collectives = {op: ns(cases) for op, cases in COLLECTIVE_CASES.items()}
    collectives["default"] = round(statistics.median(collectives.values()))
    present = {row["case"] for row in raw["rows"] if row.get("valid_rounds")}
    collectives |= {op: ns((case,)) for op, case in OPTIONAL_COLLECTIVE_CASES.items()
                    if case in present}
    families = {family: ns(cases) for family, cases in FAMILY_CASES.items()}
    return {
        "version": 6,
        "reference": reference,
        "script_call_ns": ns(("plain python call (2 args)",)),
        "families_ns": families,
        "foreach_per_tensor_ns": round(statistics.median(slopes) * 1000),
        "ops_ns": ops,
        "collectives_ns": collectives,
        "collective_async_extra_ns": ns(BLOCKING_CASES[:1]) - ns(BLOCKING_CASES[1:]),
        "layers_ns": layers_ns(us),
        "provenance": {**raw["provenance"], "derived_by": "scripts/measure/measure_host_costs.py "
                       "--import-raw", "statistic": "median of rounds; family: median of cases",
                       "ops_records": [r["provenance"].get("record", "?") for r in op_records],
                       "ops_anchor_scales": [round(x, 3) for x in scales],
                       "ops_statistic": "median over the records of the case's median, times "
                                        "the record's anchor scale"},
    }


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--json", help="measure here (a GPU machine) and write the raw record")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--import-raw", help="derive the shipped table from this raw record")
    parser.add_argument("--reference", default="h100-host",
                        help="the simulation.host_cpu reference host the record was taken on")
    parser.add_argument("--import-ops", nargs="+", default=[], metavar="RECORD",
                        help="with --import-raw: records of the aten and ops sections, for "
                             "the table's ops_ns")
    parser.add_argument("--write", help="with --import-raw: write the table here")
    parser.add_argument("--sections", nargs="+", metavar="NAME",
                        help="measure only these sections (aten, ops, backward, layers, foreach, "
                             "c10d, framework, graph, compiled, mix); default all")
    args = parser.parse_args()
    if args.import_raw:
        raw = json.loads(read_text(Path(args.import_raw)))
        records = []
        for path in args.import_ops:
            record = json.loads(read_text(Path(path)))
            record["provenance"]["record"] = plain_name(Path(path))
            records.append(record)
        if not records:
            parser.error("--import-raw needs --import-ops (records with the ops section)")
        table = derive_table(raw, args.reference, records)
        print(json.dumps(table, indent=1))
        if args.write:
            with open(args.write, "w") as f:
                json.dump(table, f, indent=1)
                f.write("\n")
        return
    if not args.json:
        parser.error("give --json (measure) or --import-raw (derive the table)")
    os.environ.update(common.SAFETY_ENV)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    import torch.distributed as dist

    dist.init_process_group("nccl", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    rec = Recorder(args.rounds)
    started = time.time()
    for section in SECTIONS:
        if args.sections and section.__name__.removesuffix("_cases") not in args.sections:
            continue
        section(rec, dev)
        print(f"# {section.__name__} done at {time.time() - started:.0f} s", flush=True)
    record = {
        "provenance": {
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "gpu": torch.cuda.get_device_name(),
            "host_cpu": common.cpu_model(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "script": "scripts/measure/measure_host_costs.py", "rounds": args.rounds,
        },
        "rows": rec.rows,
    }
    with open(args.json, "w") as f:
        json.dump(record, f, indent=1)
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()
