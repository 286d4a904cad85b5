"""Where an MoE training step's host time goes: the host's time per phase of the step, on real
GPUs or in the simulator, to compare them phase by phase.

The step is ``moe_ep.py``'s (``scenarios/examples/``), in one process or under torchrun with
the experts split over the ranks: batch to the GPU, forward, backward, the dense gradients'
all-reduce (several ranks), gradient clipping over experts and dense parameters, optimizer
step, ``zero_grad``, and the wait for the GPU at the end. A phase's time is
``time.perf_counter`` around it with no synchronisation, so where the step is host-bound it is
the host's time for that phase; under the simulator the script's clock is the virtual one, and
each step also reports the Python lines and calls the simulator counted per phase
(``intercept.process.shim``). Step 1 also reports the autograd graph's node count. Rank 0 prints one
JSON line per step, ``PHASES {...}`` (``--all-ranks``: every rank); ``--profile`` adds
``torch.profiler``'s per-op table of its last two steps, ``--host-speed`` each rank's host-speed
benchmark before and after its steps (``SPEED {...}``), ``--call-times`` each step's wall time
inside the calls that may wait for the GPU or the other ranks (:data:`TIMED_CALLS`).

    M="--model moe-600m --seq-len 2048 --steps 10 --num-workers 0 --batch-size 4"
    # on the GPU machine (records under scripts/measure/data/host_phases/)
    python3 scripts/measure/measure_moe_phases.py $M --routing balanced
    torchrun --nproc_per_node 2 scripts/measure/measure_moe_phases.py $M --routing balanced
    # here: the same under the simulator (H100 hosts)
    python3 scripts/measure/measure_moe_phases.py $M --routing balanced --simulate h100
    python3 scripts/measure/measure_moe_phases.py $M --routing balanced --simulate h100 --nproc 2
    # a table of phase medians (steps 4..) per run of each record
    python3 scripts/measure/measure_moe_phases.py --table scripts/measure/data/host_phases/*.txt
"""

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts.common import REPO  # noqa: E402

EXAMPLES = REPO / "scenarios" / "examples"
PHASES = ("data", "fwd", "bwd", "grads", "clip", "opt", "zero", "sync")
"""``grads``: the dense gradients' all-reduce over the ranks (expert parallel only)."""
PROFILED_STEPS = 2
PHASES_LINE = re.compile(r"PHASES (\{[^{}]*\})")
FIRST_STEADY_STEP = 3
"""Steps before this one (0-based) warm up and are left out of ``--table``."""


TIMED_CALLS = ("tolist", "bincount", "all_to_all", "exchange", "experts", "moe")
"""``--call-times`` keys, ms per step: ``Tensor.tolist`` (a host read: waits for the GPU, and
for the other ranks where it reads a collective's result), ``torch.bincount`` (syncs to learn
its length), every ``dist.all_to_all_single`` (the exchange's own in forward and backward
included), ``ExpertParallel.exchange`` (forward), ``MoE._run_experts`` and ``MoE.forward``."""


def time_calls() -> dict[str, float]:
    """Wrap the calls of :data:`TIMED_CALLS` with wall-time accumulators (seconds); the caller
    reads and clears the returned dict per step."""
    import torch
    import torch.distributed as dist
    import moe_model

    spent: dict[str, float] = dict.fromkeys(TIMED_CALLS, 0.0)

    def timed(key: str, call: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - start
        return wrapper

    torch.Tensor.tolist = timed("tolist", torch.Tensor.tolist)  # type: ignore[method-assign]
    torch.bincount = timed("bincount", torch.bincount)  # type: ignore[assignment]
    dist.all_to_all_single = timed(  # type: ignore[assignment]  # moe_model's dist too
        "all_to_all", dist.all_to_all_single)
    moe_model.ExpertParallel.exchange = timed(  # type: ignore[method-assign]
        "exchange", moe_model.ExpertParallel.exchange)
    moe_model.MoE._run_experts = timed(  # type: ignore[method-assign]
        "experts", moe_model.MoE._run_experts)
    moe_model.MoE.forward = timed("moe", moe_model.MoE.forward)  # type: ignore[method-assign]
    return spent


def node_count(loss: object) -> int:
    """Backward nodes in the autograd graph behind ``loss``."""
    seen, stack = set(), [loss.grad_fn]  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


def work_counter() -> Callable[[], tuple[int, int]]:
    """The simulator's count of the script's Python (lines, calls; hot walks included), or
    zeros on a real GPU."""
    try:
        from intercept.process import shim
    except ImportError:
        return lambda: (0, 0)
    if shim.native_exclusion() is None:
        return lambda: (0, 0)

    def counts() -> tuple[int, int]:
        work = shim.work_counts()
        return work.lines + work.hot_lines, work.calls + work.hot_calls

    return counts


def run_steps(args: argparse.Namespace) -> None:
    """Train ``args.steps`` steps (one process, or every rank under torchrun: experts split over
    the ranks), rank 0 printing each step's phases (``main`` put the examples on the path)."""
    import torch
    from moe_ep import average_dense_gradients, moe_config
    from moe_model import ExpertParallel, MoELlama
    from train_utils import (clip_grad_norm_across, close_distributed, compute_dtype,
                             init_launch, make_loader, make_optimizer)

    launch = init_launch()
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    config = moe_config(args)
    model = MoELlama(config, ExpertParallel(launch.rank, launch.world_size),
                     args.routing).to(launch.device)
    optimizer = make_optimizer(model, args)
    batches = iter(make_loader(args, config, launch, dp_rank=launch.rank,
                               dp_size=launch.world_size))
    dtype = compute_dtype(args, launch.device)
    counts = work_counter()
    spent = time_calls() if args.call_times else None
    if args.host_speed:
        print_host_speed(launch.rank, "before")
    profiled = LastStepsProfiler(args.profile if launch.is_main else None, args.steps)
    marks: list[tuple[float, tuple[int, int]]] = []

    def mark() -> None:
        marks.append((time.perf_counter(), counts()))

    for step in range(args.steps):
        profiled.step(step)
        marks.clear()
        mark()
        inputs, targets = (t.to(launch.device, non_blocking=True) for t in next(batches))
        mark()
        with torch.autocast(launch.device.type, dtype=dtype):
            _, loss = model(inputs, targets)
        mark()
        nodes = node_count(loss) if step == 0 else None
        marks[-1] = (time.perf_counter(), counts())  # the count is not the step's
        loss.backward()
        mark()
        if launch.world_size > 1:
            average_dense_gradients(model, launch.world_size)
        mark()
        clip_grad_norm_across(model.expert_parameters(), model.dense_parameters(), args.grad_clip)
        mark()
        optimizer.step()
        mark()
        optimizer.zero_grad(set_to_none=True)
        mark()
        if launch.device.type == "cuda":
            torch.cuda.synchronize()
        mark()
        record: dict[str, object] = {"step": step}
        for name, (start, end) in zip(PHASES, zip(marks, marks[1:])):
            record[name] = round((end[0] - start[0]) * 1e3, 3)
        record["lines"] = [end[1][0] - start[1][0] for start, end in zip(marks, marks[1:])]
        record["calls"] = [end[1][1] - start[1][1] for start, end in zip(marks, marks[1:])]
        if nodes is not None:
            record["nodes"] = nodes
        if spent is not None:
            record.update({key: round(secs * 1e3, 3) for key, secs in spent.items()})
            spent.update(dict.fromkeys(spent, 0.0))
        if launch.is_main or args.all_ranks:
            emit("PHASES", {"rank": launch.rank, **record})
    profiled.step(args.steps)
    if args.host_speed:
        print_host_speed(launch.rank, "after")
    if launch.world_size > 1:
        close_distributed()


def print_host_speed(rank: int, when: str) -> None:
    """The host-speed benchmark's total on this rank's thread
    (``intercept.host_time.host_benchmark``; the ``h100-host`` reference reads 5.13 ms),
    ``SPEED {...}``."""
    from intercept.host_time import host_benchmark

    total_ns = sum(host_benchmark.measure().values())
    emit("SPEED", {"rank": rank, "when": when, "ms": round(total_ns / 1e6, 3)})


def emit(tag: str, record: dict[str, object]) -> None:
    """One line ``TAG {json}``, written whole (ranks share the output)."""
    sys.stdout.write(f"{tag} {json.dumps(record)}\n")
    sys.stdout.flush()


class LastStepsProfiler:
    """``torch.profiler`` over the last :data:`PROFILED_STEPS` steps, its per-op table written to
    ``path`` as JSON and its timeline beside it (``<stem>.trace.json.gz``, Chrome trace format);
    nothing where ``path`` is None."""

    def __init__(self, path: Path | None, steps: int) -> None:
        self.path, self.first = path, steps - PROFILED_STEPS
        self.active: object = None

    def step(self, step: int) -> None:
        """Called before each step, and once after the last."""
        if self.path is None:
            return
        from torch.profiler import ProfilerActivity, profile

        if step == self.first:
            self.active = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            self.active.__enter__()  # type: ignore[attr-defined]
        elif step == self.first + PROFILED_STEPS and self.active is not None:
            self.active.__exit__(None, None, None)  # type: ignore[attr-defined]
            rows = [{"name": e.key, "count": e.count, "cpu_us": e.cpu_time_total,
                     "self_cpu_us": e.self_cpu_time_total,
                     "self_device_us": e.self_device_time_total}
                    for e in self.active.key_averages()]  # type: ignore[attr-defined]
            self.path.write_text(json.dumps({"steps": PROFILED_STEPS, "ops": rows}) + "\n")
            trace = self.path.with_suffix(".trace.json")
            self.active.export_chrome_trace(str(trace))  # type: ignore[attr-defined]
            with trace.open("rb") as raw, gzip.open(f"{trace}.gz", "wb") as packed:
                shutil.copyfileobj(raw, packed)
            trace.unlink()


def simulate(argv: list[str], gpu: str, nproc: int) -> None:
    """Run this script with ``argv`` under the simulator on ``nproc`` GPUs of ``gpu`` (one
    host); print rank 0's lines."""
    import yaml
    from rich.console import Console

    from phantora.run import run_scenario
    from phantora.scenario import parse_scenario

    out = REPO / "out" / "moe_phases"
    out.mkdir(parents=True, exist_ok=True)
    spec = {"name": "moe-phases", "cluster": {"gpu": gpu, "hosts": 1, "gpus_per_host": nproc},
            "workload": {"script": str(Path(__file__).resolve()), "args": argv,
                         "nproc_per_node": nproc, "env": {"OMP_NUM_THREADS": "1"}}}
    path = out / "scenario.yaml"
    path.write_text(yaml.safe_dump(spec))
    run_scenario(parse_scenario(spec, str(path)), out / "run", Console(stderr=True, quiet=True))
    for line in (out / "run" / "ranks" / "rank0.log").read_text().splitlines():
        if line.startswith("PHASES "):
            print(line, flush=True)


def runs_of(path: Path) -> dict[str, list[dict[str, float]]]:
    """A record's steps per run and rank: a line ``# run NAME: ...`` starts run NAME (steps
    before any such line are the run named after the file); a rank other than 0 is its own
    entry, ``NAME rankR``."""
    runs: dict[str, list[dict[str, float]]] = {}
    name = path.stem
    for line in path.read_text().splitlines():
        if line.startswith("# run "):
            name = f"{path.stem} {line[len('# run '):].split(':')[0]}"
        for match in PHASES_LINE.finditer(line):  # ranks' lines may run together
            step = json.loads(match[1])
            rank = int(step.get("rank", 0))
            runs.setdefault(f"{name} rank{rank}" if rank else name, []).append(step)
    return runs


def table(paths: list[Path]) -> None:
    """Per run, the median of each phase over its steady steps (ms)."""
    print(f"{'run':44s} " + " ".join(f"{p:>6s}" for p in PHASES) + f" {'step':>7s}")
    for path in paths:
        for name, steps in runs_of(path).items():
            steady = [s for s in steps if s["step"] >= FIRST_STEADY_STEP]
            if not steady:
                raise SystemExit(f"{path}, {name}: no step {FIRST_STEADY_STEP + 1} or later")
            medians = [statistics.median(s.get(p, 0.0) for s in steady) for p in PHASES]
            total = statistics.median(sum(s.get(p, 0.0) for p in PHASES) for s in steady)
            print(f"{name:44s} " + " ".join(f"{m:6.2f}" for m in medians) + f" {total:7.2f}")


def main() -> None:
    sys.path.insert(0, str(EXAMPLES))
    from moe_model import MOE_PRESETS, ROUTINGS
    from train_utils import build_parser

    parser = build_parser(__doc__.splitlines()[0], MOE_PRESETS)
    parser.add_argument("--routing", choices=ROUTINGS, default="balanced")
    parser.add_argument("--n-experts", type=int, help="experts per layer (preset: 8)")
    parser.add_argument("--top-k", type=int, help="experts per token (preset: 2)")
    parser.add_argument("--simulate", metavar="GPU", help="run under the simulator (h100, h200)")
    parser.add_argument("--nproc", type=int, default=1,
                        help="with --simulate: ranks (GPUs of one host), experts split over them")
    parser.add_argument("--all-ranks", action="store_true", help="every rank prints its phases")
    parser.add_argument("--host-speed", action="store_true",
                        help="every rank runs the host-speed benchmark before and after its steps")
    parser.add_argument("--call-times", action="store_true",
                        help="each step's wall time inside host reads, bincount, all_to_all, "
                             "the exchange and the experts (ms)")
    parser.add_argument("--profile", type=Path, metavar="JSON",
                        help="rank 0: torch.profiler's per-op table of the last two steps")
    parser.add_argument("--table", type=Path, nargs="+", metavar="RECORD",
                        help="summarise records of PHASES lines instead of running")
    argv = sys.argv[1:]
    args = parser.parse_args(argv)
    if args.table:
        table(args.table)
    elif args.simulate:
        own = ("--simulate", "--nproc")
        without = [a for i, a in enumerate(argv)
                   if a not in own and (i == 0 or argv[i - 1] not in own)]
        simulate(without, args.simulate, args.nproc)
    else:
        run_steps(args)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
