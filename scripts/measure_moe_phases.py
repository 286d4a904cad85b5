"""Where a single-GPU MoE step's host time goes: the host's time per phase of the step, on a real
GPU or in the simulator, to compare them phase by phase.

The step is ``moe_ep.py``'s (``scenarios/examples/``) on one process: batch to the GPU,
forward, backward, gradient clipping over experts and dense parameters, optimizer step,
``zero_grad``, and the wait for the GPU at the end. A phase's time is ``time.perf_counter``
around it with no synchronisation, so where the step is host-bound it is the host's time for
that phase; under the simulator the script's clock is the virtual one, and each step also
reports the Python lines and calls the simulator counted per phase (``intercept.shim``).
Step 1 also reports the autograd graph's node count. One JSON line per step, ``PHASES {...}``.

    M="--model moe-600m --seq-len 2048 --steps 10 --num-workers 0 --batch-size 4"
    # on the GPU machine (records under scripts/data/host_phases/)
    python3 scripts/measure_moe_phases.py $M --routing balanced
    # here: the same under the simulator (an H100 host of one GPU)
    python3 scripts/measure_moe_phases.py $M --routing balanced --simulate h100
    # a table of phase medians (steps 4..) per run of each record
    python3 scripts/measure_moe_phases.py --table scripts/data/host_phases/*.txt
"""

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "scenarios" / "examples"
PHASES = ("data", "fwd", "bwd", "clip", "opt", "zero", "sync")
FIRST_STEADY_STEP = 3
"""Steps before this one (0-based) warm up and are left out of ``--table``."""


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
    """The simulator's count of the script's Python (lines, calls), or zeros on a real GPU."""
    try:
        from intercept import shim
    except ImportError:
        return lambda: (0, 0)
    if shim.native_exclusion() is None:
        return lambda: (0, 0)
    return lambda: tuple(shim.work_counts())  # type: ignore[return-value]


def run_steps(args: argparse.Namespace) -> None:
    """Train ``args.steps`` steps, printing each one's phases."""
    sys.path.insert(0, str(EXAMPLES))
    import torch
    from moe_ep import moe_config
    from moe_model import ExpertParallel, MoELlama
    from train_utils import (clip_grad_norm_across, compute_dtype, init_single, make_loader,
                             make_optimizer)

    launch = init_single()
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    config = moe_config(args)
    model = MoELlama(config, ExpertParallel(), args.routing).to(launch.device)
    optimizer = make_optimizer(model, args)
    batches = iter(make_loader(args, config, launch, dp_rank=0, dp_size=1))
    dtype = compute_dtype(args, launch.device)
    counts = work_counter()
    for step in range(args.steps):
        marks = [(time.perf_counter(), counts())]

        def mark() -> None:
            marks.append((time.perf_counter(), counts()))

        inputs, targets = (t.to(launch.device, non_blocking=True) for t in next(batches))
        mark()
        with torch.autocast(launch.device.type, dtype=dtype):
            _, loss = model(inputs, targets)
        mark()
        nodes = node_count(loss) if step == 0 else None
        marks[-1] = (time.perf_counter(), counts())  # the count is not the step's
        loss.backward()
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
        print("PHASES " + json.dumps(record), flush=True)


def simulate(argv: list[str], gpu: str) -> None:
    """Run this script with ``argv`` under the simulator, one GPU of ``gpu``; print its lines."""
    import yaml
    from rich.console import Console

    from phantora.cli import run_scenario
    from phantora.scenario import parse_scenario

    out = REPO / "out" / "moe_phases"
    out.mkdir(parents=True, exist_ok=True)
    spec = {"name": "moe-phases", "cluster": {"gpu": gpu, "hosts": 1, "gpus_per_host": 1},
            "workload": {"script": str(Path(__file__).resolve()), "args": argv,
                         "nproc_per_node": 1, "env": {"OMP_NUM_THREADS": "1"}}}
    path = out / "scenario.yaml"
    path.write_text(yaml.safe_dump(spec))
    run_scenario(parse_scenario(spec, str(path)), out / "run", Console(stderr=True, quiet=True))
    for line in (out / "run" / "ranks" / "rank0.log").read_text().splitlines():
        if line.startswith("PHASES "):
            print(line, flush=True)


def runs_of(path: Path) -> dict[str, list[dict[str, float]]]:
    """A record's steps per run: a line ``# run NAME: ...`` starts run NAME (steps before any
    such line are the run named after the file)."""
    runs: dict[str, list[dict[str, float]]] = {}
    name = path.stem
    for line in path.read_text().splitlines():
        if line.startswith("# run "):
            name = f"{path.stem} {line[len('# run '):].split(':')[0]}"
        elif "PHASES " in line:
            runs.setdefault(name, []).append(json.loads(line.split("PHASES ", 1)[1]))
    return runs


def table(paths: list[Path]) -> None:
    """Per run, the median of each phase over its steady steps (ms)."""
    print(f"{'run':32s} " + " ".join(f"{p:>6s}" for p in PHASES) + f" {'step':>7s}")
    for path in paths:
        for name, steps in runs_of(path).items():
            steady = [s for s in steps if s["step"] >= FIRST_STEADY_STEP]
            if not steady:
                raise SystemExit(f"{path}, {name}: no step {FIRST_STEADY_STEP + 1} or later")
            medians = [statistics.median(s[p] for s in steady) for p in PHASES]
            total = statistics.median(sum(s[p] for p in PHASES) for s in steady)
            print(f"{name:32s} " + " ".join(f"{m:6.2f}" for m in medians) + f" {total:7.2f}")


def main() -> None:
    sys.path.insert(0, str(EXAMPLES))
    from moe_model import MOE_PRESETS, ROUTINGS
    from train_utils import build_parser

    parser = build_parser(__doc__.splitlines()[0], MOE_PRESETS)
    parser.add_argument("--routing", choices=ROUTINGS, default="balanced")
    parser.add_argument("--n-experts", type=int, help="experts per layer (preset: 8)")
    parser.add_argument("--top-k", type=int, help="experts per token (preset: 2)")
    parser.add_argument("--simulate", metavar="GPU", help="run under the simulator (h100, h200)")
    parser.add_argument("--table", type=Path, nargs="+", metavar="RECORD",
                        help="summarise records of PHASES lines instead of running")
    argv = sys.argv[1:]
    args = parser.parse_args(argv)
    if args.table:
        table(args.table)
    elif args.simulate:
        without = [a for i, a in enumerate(argv)
                   if a != "--simulate" and (i == 0 or argv[i - 1] != "--simulate")]
        simulate(without, args.simulate)
    else:
        run_steps(args)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
