"""Measure what a host's CPU pays per line and per call of Python: the weights that turn a rank's
counted Python work into the reference host's time (``intercept.host_time.python_work``).

Run on a lent GPU host (its CPU is the reference), with the device machines' own Python and torch:

    python3 scripts/measure/measure_python_work.py --json $OUT/python_work.json

Each workload is plain Python of the kinds a training script runs between two GPU ops: an
``nn.Module`` tree called as a transformer calls it (with and without forward hooks), an
optimizer-like loop over parameter groups, logging, small helper calls, arithmetic loops. None
touches a tensor, so the time is all interpreter. Per workload: its lines and calls as a trace
function counts them (``sys.settrace``, one traced run), and its untraced CPU time (the thread's,
the fastest of ``--rounds`` rounds after a warm-up). With ``--after-launch`` (a CUDA GPU), also
the training-like workloads at growing sizes right after one kernel launch against hot
(``after_launch`` in the record): whether a launch leaves the Python after it cold.

Then, here (the simulator's Python and torch, whose counts the weights apply to):

    python3 scripts/measure/measure_python_work.py --fit scripts/measure/data/python_work/python_work_h100_*.json \
        --write hwmodel/measured/data/python_work.json

takes each workload's median time over the records, counts its lines and calls *here* (torch's
``nn.Module`` code differs between versions), and fits ``ns = line_ns * lines + call_ns * calls``
by least squares (relative error) over the workloads a training step is made of
(:data:`TRAINING_LIKE`); it prints every workload's error, the others' too.
"""

import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402

Workload = Callable[[], object]


def _module_tree(hooks: bool, blocks: int = 12) -> Workload:
    import torch.nn as nn

    class Leaf(nn.Module):
        def __init__(self, scale: float) -> None:
            super().__init__()
            self.scale = scale

        def forward(self, x: float) -> float:
            return x * self.scale

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.proj = Leaf(1.0), Leaf(1.0), Leaf(1.0), Leaf(0.5)
            self.heads = 12

        def forward(self, x: float) -> float:
            q, k, v = self.q(x), self.k(x), self.v(x)
            head_dim = 768 // self.heads
            return self.proj(q + k + v / head_dim)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.attn, self.ln2 = Leaf(1.0), Attention(), Leaf(1.0)
            self.fc, self.act, self.out = Leaf(2.0), Leaf(1.0), Leaf(0.5)

        def forward(self, x: float) -> float:
            x = x + self.attn(self.ln1(x))
            return x + self.out(self.act(self.fc(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(blocks))
            self.head = Leaf(1.0)

        def forward(self, x: float) -> float:
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    model = Model()
    if hooks:
        def pre(module: nn.Module, args: tuple[object, ...]) -> None:
            return None

        def post(module: nn.Module, args: tuple[object, ...], out: object) -> None:
            return None

        for block in model.blocks:
            block.register_forward_pre_hook(pre)
            block.register_forward_hook(post)
    return lambda: model(1.0)


def _optimizer_loop(params: int = 16, group_count: int = 8) -> Workload:
    groups = [{"params": [{"step": 0, "lr": 1e-3} for _ in range(params)], "lr": 1e-3,
               "betas": (0.9, 0.95), "weight_decay": 0.1} for _ in range(group_count)]

    def step() -> None:
        for group in groups:
            beta1, beta2 = group["betas"]
            for state in group["params"]:
                state["step"] += 1
                bias1 = 1 - beta1 ** state["step"]
                bias2 = 1 - beta2 ** state["step"]
                state["lr"] = group["lr"] * math.sqrt(bias2) / bias1
    return step


def _logging() -> Workload:
    def log(step: int, loss: float, ms: float) -> str:
        tokens = 8 * 1024 / (ms / 1000)
        return f"step {step:4d} | loss {loss:.4f} | {ms:.2f} ms | {tokens:,.0f} tok/s"

    return lambda: [log(i, 2.5 / (i + 1), 10.0 + i) for i in range(50)]


def _small_calls() -> Workload:
    def clamp(x: float, low: float, high: float) -> float:
        return low if x < low else high if x > high else x

    def scale(x: float) -> float:
        return clamp(x * 1.5, 0.0, 100.0)

    return lambda: sum(scale(float(i)) for i in range(500))


def _arithmetic() -> Workload:
    def run() -> float:
        total = 0.0
        for i in range(2000):
            total += i * 0.5
            if total > 1e6:
                total -= 1e6
        return total
    return run


def _attribute_access() -> Workload:
    class Config:
        def __init__(self) -> None:
            self.n_layer, self.n_head, self.n_embd, self.vocab = 12, 12, 768, 50304

    config = Config()

    def run() -> int:
        total = 0
        for _ in range(300):
            total += config.n_layer * config.n_head + config.n_embd // config.n_head
            total += len(str(config.vocab))
        return total
    return run


WORKLOADS: dict[str, Callable[[], Workload]] = {
    "module_tree": lambda: _module_tree(hooks=False),
    "module_tree_hooks": lambda: _module_tree(hooks=True),
    "optimizer_loop": _optimizer_loop,
    "logging": _logging,
    "small_calls": _small_calls,
    "arithmetic": _arithmetic,
    "attribute_access": _attribute_access,
}


TRAINING_LIKE = ("module_tree", "module_tree_hooks", "optimizer_loop")
"""What a training script runs between GPU ops: module calls, hooks, optimizer loops. Logging,
arithmetic loops and tiny helpers cost far more or less per line; they are reported, not fitted."""


def count(workload: Workload) -> tuple[int, int]:
    """Lines and calls of one run, as a trace function sees them (``PyTrace_LINE``,
    ``PyTrace_CALL``), the calling frame's own line events left out."""
    lines = calls = 0
    caller = sys._getframe()

    def trace(frame: Any, event: str, arg: object) -> Any:
        nonlocal lines, calls
        if frame is caller:
            return trace
        if event == "line":
            lines += 1
        elif event == "call":
            calls += 1
        return trace

    sys.settrace(trace)
    try:
        workload()
    finally:
        sys.settrace(None)
    return lines, calls - 1  # the workload's own entry is the caller's call


def time_ns(workload: Workload, rounds: int, repeats: int,
            before_round: Callable[[], object] = lambda: None,
            after_round: Callable[[], object] = lambda: None) -> float:
    """Thread CPU ns per run: the fastest of ``rounds`` rounds of ``repeats`` runs, each round
    between ``before_round`` and ``after_round`` (untimed)."""
    for _ in range(repeats):
        workload()
    best = math.inf
    for _ in range(rounds):
        before_round()
        start = time.thread_time_ns()
        for _ in range(repeats):
            workload()
        best = min(best, (time.thread_time_ns() - start) / repeats)
        after_round()
    return best


def measure(rounds: int, repeats: int) -> dict[str, Any]:
    rows = []
    for name, make in WORKLOADS.items():
        workload = make()
        lines, calls = count(workload)
        ns = time_ns(workload, rounds, repeats)
        rows.append({"workload": name, "lines": lines, "calls": calls, "ns": round(ns)})
        print(f"{name:20s} {lines:7d} lines {calls:6d} calls {ns / 1000:9.1f} us", flush=True)
    return {"provenance": {"python": platform.python_version(), "machine": platform.node(),
                           "cpu": common.cpu_model(), "rounds": rounds, "repeats": repeats,
                           "date": time.strftime("%Y-%m-%d", time.gmtime())},
            "rows": rows}


AFTER_LAUNCH_SIZES: dict[str, tuple[Callable[[int], Workload], tuple[int, ...]]] = {
    "optimizer_loop": (lambda n: _optimizer_loop(params=n, group_count=1),
                       (1, 2, 4, 8, 16, 32, 64, 128, 512)),
    "module_tree": (lambda n: _module_tree(hooks=False, blocks=n), (1, 2, 4, 12, 48)),
}
"""Training-like workloads at growing sizes (parameters of one group, transformer blocks), for
:func:`measure_after_launch`."""


def measure_after_launch(rounds: int, repeats: int) -> list[dict[str, Any]]:
    """What Python costs right after a kernel launch against run hot, by how much of it runs
    before the next launch: each workload of :data:`AFTER_LAUNCH_SIZES` timed alone (hot) and
    each run after one launch (an ``add_`` of 16 floats, the GPU held busy behind a sleep so that
    no launch waits; a round whose sleep had ended is an error), less the launch alone. Needs a
    CUDA GPU."""
    import torch

    x = torch.ones(16, device="cuda")
    torch.cuda.synchronize()

    def busy() -> None:
        torch.cuda._sleep(100_000_000)  # ~50 ms: longer than any round

    def drained() -> None:
        if torch.cuda.current_stream().query():
            raise RuntimeError("the GPU drained during a round: the launches may have waited")
        torch.cuda.synchronize()

    def launch() -> None:
        x.add_(1.0)

    launch_ns = time_ns(launch, rounds, repeats, busy, drained)
    rows = []
    for name, (make, sizes) in AFTER_LAUNCH_SIZES.items():
        for size in sizes:
            workload = make(size)
            lines, calls = count(workload)
            hot = time_ns(workload, rounds, repeats)
            after = time_ns(lambda w=workload: (launch(), w()), rounds, repeats, busy,
                            drained) - launch_ns
            rows.append({"workload": name, "size": size, "lines": lines, "calls": calls,
                         "hot_ns": round(hot), "after_launch_ns": round(after),
                         "launch_ns": round(launch_ns)})
            print(f"{name:16s} x{size:<4d} {lines:6d} lines {calls:5d} calls: hot "
                  f"{hot / 1000:8.2f} us, after a launch {after / 1000:8.2f} us "
                  f"({after / hot:.2f}x)", flush=True)
    torch.cuda.synchronize()
    return rows


def fit(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Least-squares ``(line_ns, call_ns)`` of ``ns = line_ns * lines + call_ns * calls``, each
    row weighted by 1/ns (relative error), both kept >= 0."""
    a11 = a12 = a22 = b1 = b2 = 0.0
    for row in rows:
        w = 1.0 / row["ns"] ** 2
        x1, x2, y = row["lines"], row["calls"], row["ns"]
        a11, a12, a22 = a11 + w * x1 * x1, a12 + w * x1 * x2, a22 + w * x2 * x2
        b1, b2 = b1 + w * x1 * y, b2 + w * x2 * y
    det = a11 * a22 - a12 * a12
    line_ns, call_ns = (b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det
    if call_ns < 0:
        return b1 / a11, 0.0
    if line_ns < 0:
        return 0.0, b2 / a22
    return line_ns, call_ns


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, help="write the raw record here")
    parser.add_argument("--after-launch", action="store_true",
                        help="also time the training-like workloads right after a kernel "
                             "launch, by size (needs a CUDA GPU; the record's after_launch)")
    parser.add_argument("--fit", type=Path, nargs="+", metavar="RECORD",
                        help="fit the weights to these raw records, counting here")
    parser.add_argument("--write", type=Path, help="with --fit: write the weights here")
    args = parser.parse_args()
    if not args.fit:
        record = measure(args.rounds, args.repeats)
        if args.after_launch:
            record["after_launch"] = measure_after_launch(args.rounds, args.repeats)
        if args.json:
            args.json.write_text(json.dumps(record, indent=1) + "\n")
        return
    records = [json.loads(path.read_text()) for path in args.fit]
    rows = []
    for name, make in WORKLOADS.items():
        lines, calls = count(make())
        ns = statistics.median(row["ns"] for record in records for row in record["rows"]
                               if row["workload"] == name)
        rows.append({"workload": name, "lines": lines, "calls": calls, "ns": ns})
    line_ns, call_ns = fit([row for row in rows if row["workload"] in TRAINING_LIKE])
    print(f"fit over {', '.join(TRAINING_LIKE)}: {line_ns:.2f} ns per line + {call_ns:.2f} ns "
          "per call")
    for row in rows:
        model = line_ns * row["lines"] + call_ns * row["calls"]
        print(f"  {row['workload']:20s} {row['lines']:6d} lines {row['calls']:5d} calls, measured "
              f"{row['ns'] / 1000:8.1f} us, model {model / 1000:8.1f} us "
              f"({100 * (model / row['ns'] - 1):+.1f}%)")
    if args.write:
        provenance = records[0]["provenance"]
        weights = {"line_ns": round(line_ns, 2), "call_ns": round(call_ns, 2),
                   "provenance": {**provenance, "records": [str(p) for p in args.fit],
                                  "counted_with": f"python {platform.python_version()}",
                                  "fitted_on": list(TRAINING_LIKE),
                                  "statistic": "median over records of each workload's fastest "
                                               "round; least squares of relative error"}}
        args.write.write_text(json.dumps(weights, indent=1) + "\n")


if __name__ == "__main__":
    main()
