"""What this host's CPU pays per host-time mechanism: the measuring behind
``phantora-ns3 host-profile`` (the command and its profile file are the CLI's).

    python3 -m intercept.host_time.mechanisms --out FILE.json [--rounds N]

Run in a fresh process on the host to profile, with a CUDA GPU or without one. Each mechanism is
one or a few *cases*: a call issued back to back, ``calls`` times a round, after a warm-up; a
case costs the median over ``--rounds`` rounds of the wall time per call (its row in ``cases``:
``us_median``, ``us_min``, the rounds kept and the calls per round). Where a case launches GPU
work, the GPU is held busy behind ``torch.cuda._sleep`` while the loop runs, so the host never
waits for it; a round whose GPU had drained before the loop ended is dropped (the host may have
waited), and a case with no round left fails its mechanism. The keys of ``measured``, all ns,
named as ``intercept.host_time.host_cost``'s table names them:

* ``script_call_ns``: a plain Python call of two arguments (what the clock counts of any op).
* ``families_ns``: per family of ``host_cost.family_of``, one representative op on CUDA tensors
  (:func:`_family_ops`), without grad.
* ``foreach_per_tensor_ns``: the slope of ``torch._foreach_add_`` from 1 to 128 tensors.
* ``collectives_ns``: c10d's async call of each collective, 1 MiB, on a one-rank NCCL group
  (all_reduce, all_gather, reduce_scatter, broadcast, all_to_all); ``default`` their median.
* ``collective_async_extra_ns``: the async all_reduce less the same call blocking
  (``async_op=False``, which torch 2.8 on runs on the caller's stream).
* ``sync_ns``: with the GPU idle, ``torch.cuda.synchronize()`` (``device``), the current
  stream's ``synchronize()`` (``stream``), an already complete event's ``synchronize()``
  (``event``) and ``query()`` (``query``); with the GPU busy, ``Event.record()``
  (``record_event``).
* ``autograd_record_ns``: ``x * 2.0`` (bf16, 1M) where ``x`` requires grad, less the same where
  it does not.
* ``autograd_node_ns``: a chain of :data:`NODE_CHAIN` ``mul`` forward and backward, less the
  forward alone, per node, less one ``mul`` without grad (the node's own op).
* ``tensor_subclass_ns``: DTensor on a one-rank mesh over the plain op: a product
  (``Shard(0) @ Replicate()``) and an add; the median of the two extras.
* ``python_line_ns``, ``python_call_ns`` (floats): the hot weights of the script's counted
  Python (``intercept.host_time.python_work``: ns per line event and per call event of a trace
  function, fitted by ``scripts/measure/measure_python_work.py`` on training-like Python).
  Here, self-contained: two training-like workloads, an optimizer's bookkeeping over state dicts
  (lines, no Python call beyond its own) and a tree of ``nn.Module`` calls with forward hooks
  (mostly the module call path's calls), each counted once with ``sys.settrace`` as the shim
  counts (every line started; every function entered, generator resumes included), then timed
  untraced; the two weights solve ``ns = line_ns * lines + call_ns * calls`` for the two. The
  counts are this Python's and torch's, which the simulator's may count differently. Where noise
  tips the solve to a weight at or below zero, the reference's ratio of the two is kept and only
  its scale fitted to both cases.

Without CUDA only ``script_call_ns`` and the Python weights are measured; stderr names what was
skipped and why, as it does for a mechanism that fails (its keys are then absent).

``probe_ns``: the host-speed benchmark (``intercept.host_time.host_benchmark``) per component,
the median of :data:`PROBE_MEASUREMENTS` measurements in this process (``probe_rounds``), half
taken before the cases and half after: the host's speed while the mechanisms were measured.
"""

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from intercept.host_time import host_benchmark
from intercept.host_time.python_work import load_weights

ROUNDS = 7
"""Timed rounds per case (``--rounds``)."""
PROBE_MEASUREMENTS = 6
"""Host-speed benchmark measurements, half before the cases and half after."""
SLEEP_CYCLES = 100_000_000
"""GPU cycles the stream sleeps before a round (~50 ms at full clock): longer than any round."""
NODE_CHAIN = 50
"""``mul`` ops in the chain whose backward ``autograd_node_ns`` times."""
COLLECTIVE_BYTES = 2**20
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}
"""NVLink multicast stays off: on a shared host it can take the GPUs out of service."""
CUDA = "cuda"


class Timer:
    """Times cases as the module doc says and keeps their rows."""

    def __init__(self, rounds: int, cuda: bool) -> None:
        self.rounds = rounds
        self.cuda = cuda
        self.rows: list[dict[str, Any]] = []

    def ns(self, mechanism: str, case: str, op: Callable[[], object], calls: int, *,
           gpu_busy: bool = True) -> float:
        """Wall ns per call of ``op``: the median of the rounds kept. ``gpu_busy``: hold the GPU
        busy during each round and keep the rounds it outlasted (else the GPU starts idle)."""
        hold = gpu_busy and self.cuda
        for _ in range(max(3, calls // 10)):
            op()
        self._drain()
        per_call = []
        for _ in range(self.rounds):
            if hold:
                torch.cuda._sleep(SLEEP_CYCLES)
            start = time.perf_counter_ns()
            for _ in range(calls):
                op()
            elapsed = time.perf_counter_ns() - start
            if not (hold and torch.cuda.current_stream().query()):
                per_call.append(elapsed / calls)
            self._drain()
        if not per_call:
            raise RuntimeError(f"{mechanism} {case}: the GPU drained before the loop ended in "
                               f"every round (raise SLEEP_CYCLES or lower calls from {calls})")
        median = statistics.median(per_call)
        self.rows.append({"mechanism": mechanism, "case": case,
                          "us_median": round(median / 1000, 3),
                          "us_min": round(min(per_call) / 1000, 3), "rounds": len(per_call),
                          "calls": calls})
        print(f"{mechanism} {case}: {median / 1000:.1f} us", file=sys.stderr, flush=True)
        return median

    def _drain(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def _plain(a: object, b: object) -> object:
    return a


def script_call(timer: Timer) -> dict[str, Any]:
    """``script_call_ns``: a plain Python call of two arguments."""
    a, b = 1, 2
    return {"script_call_ns": round(timer.ns("script_call_ns", "plain call (2 args)",
                                             lambda: _plain(a, b), calls=1000, gpu_busy=False))}


def _optimizer_bookkeeping(groups: int = 4, params: int = 32) -> Callable[[], None]:
    """Lines and no Python call: an optimizer's per-parameter state updates."""
    state = [[{"step": 0, "lr": 1e-3} for _ in range(params)] for _ in range(groups)]

    def step() -> None:
        for group in state:
            for entry in group:
                entry["step"] += 1
                correction = 1.0 - 0.999 ** entry["step"]
                entry["lr"] = 1e-3 * correction ** 0.5 / (1.0 - 0.9 ** entry["step"])
    return step


class _Block(nn.Module):
    """Three small modules called one after another, as a transformer block calls its layers."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.mix, self.out = nn.Identity(), nn.Identity(), nn.Identity()

    def forward(self, x: float) -> float:
        return x + self.out(self.mix(self.norm(x)))


def _module_tree(blocks: int = 8) -> Callable[[], object]:
    """Mostly calls: ``nn.Module``'s call path through blocks of small modules, a forward pre-
    and post-hook on each block."""
    model = nn.Sequential(*(_Block() for _ in range(blocks)))
    for block in model:
        block.register_forward_pre_hook(lambda module, args: None)
        block.register_forward_hook(lambda module, args, out: None)
    return lambda: model(1.0)


def _trace_counts(op: Callable[[], object]) -> tuple[int, int]:
    """Line and call events of one call of ``op``, as the shim's trace function counts them."""
    events: Counter[str] = Counter()

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        events[event] += 1
        return trace

    sys.settrace(trace)
    try:
        op()
    finally:
        sys.settrace(None)
    return events["line"], events["call"]


def python_weights(timer: Timer) -> dict[str, Any]:
    """``python_line_ns`` and ``python_call_ns`` (see the module doc)."""
    rows = []
    for case, op in (("optimizer bookkeeping", _optimizer_bookkeeping()),
                     ("module tree with hooks", _module_tree())):
        lines, calls = _trace_counts(op)
        ns = timer.ns("python_work", f"{case} ({lines} lines, {calls} calls)", op, calls=50,
                      gpu_busy=False)
        rows.append((lines, calls, ns))
    (l1, c1, t1), (l2, c2, t2) = rows
    det = l1 * c2 - l2 * c1
    line_ns, call_ns = (t1 * c2 - t2 * c1) / det, (l1 * t2 - l2 * t1) / det
    if line_ns <= 0 or call_ns <= 0:
        # A noisy host can tip the two-case solve below zero: keep the reference's ratio of
        # call to line and fit only its scale to both cases' time.
        reference = load_weights()
        ratio = reference.call_ns / reference.line_ns
        line_ns = (t1 + t2) / (l1 + l2 + ratio * (c1 + c2))
        call_ns = ratio * line_ns
    return {"python_line_ns": round(line_ns, 2), "python_call_ns": round(call_ns, 2)}


def _family_ops() -> dict[str, Callable[[], object]]:
    """One call per family of ``intercept.host_time.host_cost.family_of``."""
    x = torch.randn(1024, 1024, device=CUDA, dtype=torch.bfloat16)
    y = torch.randn_like(x)
    bias = torch.randn(1024, device=CUDA, dtype=torch.bfloat16)
    small = torch.ones(16, device=CUDA)
    q = torch.randn(4, 12, 256, 64, device=CUDA, dtype=torch.bfloat16)
    ids = torch.randint(0, 1000, (4, 256), device=CUDA)
    table = torch.randn(1000, 768, device=CUDA, dtype=torch.bfloat16)
    rows = torch.randint(0, 1024, (64,), device=CUDA)
    one = [torch.ones(4096, device=CUDA)]
    return {
        "view": lambda: x.view(-1),
        "alloc": lambda: torch.empty(1024, 1024, device=CUDA),
        "elementwise": lambda: x + y,
        "elementwise_inplace": lambda: small.add_(1),
        "factory": lambda: torch.zeros(1024, 1024, device=CUDA),
        "reduction": lambda: x.sum(),
        "matmul": lambda: x @ y,
        "matmul_bias": lambda: F.linear(x, y, bias),
        "norm": lambda: F.layer_norm(x, (1024,)),
        "softmax": lambda: torch.softmax(x, -1),
        "attention": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "embedding": lambda: F.embedding(ids, table),
        "cat": lambda: torch.cat([x, y]),
        "index": lambda: x.index_select(0, rows),
        "foreach": lambda: torch._foreach_add_(one, one),
    }


def families(timer: Timer) -> dict[str, Any]:
    """``families_ns``: each op of :func:`_family_ops` without grad, the GPU busy."""
    with torch.no_grad():
        return {"families_ns": {family: round(timer.ns("families_ns", family, op, calls=200))
                                for family, op in _family_ops().items()}}


def foreach_per_tensor(timer: Timer) -> dict[str, Any]:
    """``foreach_per_tensor_ns``: ``_foreach_add_``'s cost per tensor from 1 to 128."""
    ns = {}
    with torch.no_grad():
        for count in (1, 128):
            tensors = [torch.ones(4096, device=CUDA) for _ in range(count)]
            ns[count] = timer.ns("foreach_per_tensor_ns", f"_foreach_add_ x{count}",
                                 lambda t=tensors: torch._foreach_add_(t, t), calls=20)
    return {"foreach_per_tensor_ns": round((ns[128] - ns[1]) / 127)}


def _one_rank_group() -> None:
    """Start a one-rank NCCL default group, unless one is already started."""
    if not dist.is_initialized():
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("nccl", rank=0, world_size=1)


def collectives(timer: Timer) -> dict[str, Any]:
    """``collectives_ns``: an async call of each collective on a one-rank NCCL group;
    ``collective_async_extra_ns``: the async all_reduce less a blocking one."""
    _one_rank_group()
    src = torch.ones(COLLECTIVE_BYTES // 4, device=CUDA)
    dst = torch.empty_like(src)
    calls: dict[str, Callable[[], object]] = {
        "all_reduce": lambda: dist.all_reduce(src, async_op=True),
        "all_gather": lambda: dist.all_gather_into_tensor(dst, src, async_op=True),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(dst, src, async_op=True),
        "broadcast": lambda: dist.broadcast(src, 0, async_op=True),
        "all_to_all": lambda: dist.all_to_all_single(dst, src, async_op=True),
    }
    ns = {op: round(timer.ns("collectives_ns", op, call, calls=100)) for op, call in calls.items()}
    ns["default"] = round(statistics.median(ns.values()))
    blocking = timer.ns("collective_async_extra_ns", "all_reduce blocking",
                        lambda: dist.all_reduce(src), calls=100)
    return {"collectives_ns": ns, "collective_async_extra_ns": round(ns["all_reduce"] - blocking)}


def sync(timer: Timer) -> dict[str, Any]:
    """``sync_ns``: the host's waits on the GPU and its event calls (see the module doc)."""
    done = torch.cuda.Event()
    done.record()
    torch.cuda.synchronize()
    marker = torch.cuda.Event()
    cases: dict[str, tuple[Callable[[], object], bool]] = {
        "device": (torch.cuda.synchronize, False),
        "stream": (torch.cuda.current_stream().synchronize, False),
        "event": (done.synchronize, False),
        "record_event": (marker.record, True),
        "query": (done.query, False),
    }
    return {"sync_ns": {name: round(timer.ns("sync_ns", name, op, calls=100, gpu_busy=busy))
                        for name, (op, busy) in cases.items()}}


def autograd_record(timer: Timer) -> dict[str, Any]:
    """``autograd_record_ns``: what recording an op for backward adds to it."""
    x = torch.randn(1024, 1024, device=CUDA, dtype=torch.bfloat16)
    xg = x.clone().requires_grad_()
    plain = timer.ns("autograd_record_ns", "mul", lambda: x * 2.0, calls=200)
    recorded = timer.ns("autograd_record_ns", "mul requires grad", lambda: xg * 2.0, calls=200)
    return {"autograd_record_ns": round(recorded - plain)}


def autograd_node(timer: Timer) -> dict[str, Any]:
    """``autograd_node_ns``: the backward engine's work per node beyond the node's op."""
    x = torch.randn(256, 256, device=CUDA, requires_grad=True)

    def forward() -> torch.Tensor:
        y = x
        for _ in range(NODE_CHAIN):
            y = y * 1.0001
        return y.sum()

    name = f"chain of {NODE_CHAIN} mul"
    ahead = timer.ns("autograd_node_ns", f"forward {name}", forward, calls=4)
    both = timer.ns("autograd_node_ns", f"forward+backward {name}",
                    lambda: forward().backward(), calls=4)
    with torch.no_grad():
        op = timer.ns("autograd_node_ns", "mul", lambda: x * 1.0001, calls=200)
    return {"autograd_node_ns": round((both - ahead) / NODE_CHAIN - op)}


def tensor_subclass(timer: Timer) -> dict[str, Any]:
    """``tensor_subclass_ns``: what DTensor's dispatch adds to an op on a one-rank mesh."""
    _one_rank_group()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(CUDA, (1,))
    a = torch.randn(1024, 1024, device=CUDA, dtype=torch.bfloat16)
    b = torch.randn_like(a)
    da, db = distribute_tensor(a, mesh, [Shard(0)]), distribute_tensor(b, mesh, [Replicate()])
    extras = []
    with torch.no_grad():
        for case, plain, wrapped in (("a @ b", lambda: a @ b, lambda: da @ db),
                                     ("a + a", lambda: a + a, lambda: da + da)):
            extras.append(timer.ns("tensor_subclass_ns", f"DTensor {case}", wrapped, calls=50)
                          - timer.ns("tensor_subclass_ns", case, plain, calls=50))
    return {"tensor_subclass_ns": round(statistics.median(extras))}


@dataclass(frozen=True)
class Mechanism:
    """A mechanism's measuring: the keys of ``measured`` it returns, and whether it needs CUDA."""

    keys: tuple[str, ...]
    measure: Callable[[Timer], dict[str, Any]]
    needs_cuda: bool


MECHANISMS = (
    Mechanism(("script_call_ns",), script_call, needs_cuda=False),
    Mechanism(("python_line_ns", "python_call_ns"), python_weights, needs_cuda=False),
    Mechanism(("families_ns",), families, needs_cuda=True),
    Mechanism(("foreach_per_tensor_ns",), foreach_per_tensor, needs_cuda=True),
    Mechanism(("collectives_ns", "collective_async_extra_ns"), collectives, needs_cuda=True),
    Mechanism(("sync_ns",), sync, needs_cuda=True),
    Mechanism(("autograd_record_ns",), autograd_record, needs_cuda=True),
    Mechanism(("autograd_node_ns",), autograd_node, needs_cuda=True),
    Mechanism(("tensor_subclass_ns",), tensor_subclass, needs_cuda=True),
)


def _cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``platform`` has none portable)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    names = [line.partition(":")[2].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or "unknown"


def profile(rounds: int = ROUNDS) -> dict[str, Any]:
    """The module doc's JSON object, measured in this process."""
    cuda = torch.cuda.is_available()
    timer = Timer(rounds, cuda)
    probes = [host_benchmark.measure() for _ in range(PROBE_MEASUREMENTS // 2)]
    measured: dict[str, Any] = {}
    for mechanism in MECHANISMS:
        keys = ", ".join(mechanism.keys)
        if mechanism.needs_cuda and not cuda:
            print(f"skipped {keys}: no CUDA GPU (torch.cuda.is_available() is False)",
                  file=sys.stderr)
            continue
        try:
            measured.update(mechanism.measure(timer))
        except Exception as exc:  # one failing mechanism must not lose the others
            print(f"skipped {keys}: {type(exc).__name__}: {exc}", file=sys.stderr)
    probes += [host_benchmark.measure() for _ in range(PROBE_MEASUREMENTS // 2)]
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    return {
        "probe_ns": {name: round(statistics.median(p[name] for p in probes))
                     for name in probes[0]},
        "probe_rounds": probes,
        "cuda": cuda,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "measured": measured,
        "cases": timer.rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m intercept.host_time.mechanisms",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="timed rounds per case")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds is {args.rounds}; at least 1")
    os.environ.update(NVLS_OFF)
    args.out.write_text(json.dumps(profile(args.rounds), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
