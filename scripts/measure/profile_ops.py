"""GPU time per aten op of a real training run vs the simulator's: where the compute model errs.

  # on a GPU machine: run a script under torch.profiler, write per-op device time per step
  python3 scripts/measure/profile_ops.py run --steps 6 --out "$OUT/ops.json" -- \
      scenarios/examples/gpt_single.py --model gpt2-124m --batch-size 8 --seq-len 1024 --steps 6

  # several ranks: under torchrun, "{rank}" in --out becomes each rank's RANK
  torchrun --nproc_per_node 2 scripts/measure/profile_ops.py run --steps 6 --out "$OUT/tp_{rank}.json" \
      -- scenarios/examples/gpt_tp.py --model gpt2-124m --batch-size 8 --seq-len 1024 --steps 6

  # here: compare with a simulated run of the same script (its summary.json)
  python3 scripts/measure/profile_ops.py compare scripts/measure/data/ops/h100_gpt2_124m_b8.json OUT/summary.json

``run`` profiles the whole script and divides each op's *self* device time (and its self
CPU time, which the profiler inflates) (the kernels the op
launched itself, not its children's) by ``--steps``: kernel work per step is the same every
step, so warm-up does not distort it (the first step's one-off kernels, e.g. cuBLAS workspace
set-up, are spread over all steps). ``compare`` divides the simulator's per-op time the same
way (its ``compute_coverage.top_ops``) and prints both side by side.
"""

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from measurements import read_text  # noqa: E402
from scripts import common  # noqa: E402


def run(script: str, script_args: list[str], steps: int, out: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        common.run_as_main(script, script_args)
        torch.cuda.synchronize()
    ops = {}
    for event in prof.key_averages():
        device_us = event.self_device_time_total
        if device_us > 0 or event.self_cpu_time_total > 0:
            ops[event.key] = {"us_per_step": device_us / steps, "calls": event.count,
                              "cpu_us_per_step": event.self_cpu_time_total / steps}
    result = {"script": script, "args": script_args, "steps": steps,
              "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "ops": ops}
    out = Path(str(out).replace("{rank}", os.environ.get("RANK", "0")))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True))
    total = sum(op["us_per_step"] for op in ops.values())
    print(f"{len(ops)} ops with device time, {total / 1e3:.2f} ms per step; wrote {out}")


SAME_OP_ON_THE_GPU = {
    "aten::_to_copy": "aten::copy_",
    "aten::_scaled_dot_product_flash_attention": "aten::_cudnn_attention_forward",
    "aten::_scaled_dot_product_flash_attention_backward": "aten::_cudnn_attention_backward",
    "aten::zeros_like": "aten::fill_", "aten::zeros": "aten::fill_", "aten::zero_": "aten::fill_",
    "aten::ones_like": "aten::fill_", "aten::clone": "aten::copy_", "Memcpy HtoD": "aten::copy_",
    "aten::slice_backward": "aten::copy_", "aten::embedding": "aten::gather",
    "aten::stack": "aten::cat", "aten::nll_loss_backward": "aten::fill_",
}
"""Simulated op -> the op whose self time holds the same kernels on a real CUDA build (casts
and clones run ``copy_``, factories ``fill_``, ``nll_loss_backward`` mostly the ``fill_`` that
zeroes its gradient; the CPU build's SDPA names the flash kernels, the GPU ran cuDNN's; see
``tests/intercept/data/cuda_reference.json``)."""


def compare(measured_path: Path, summary_path: Path, steps: int) -> None:
    measured = json.loads(read_text(measured_path))
    measured["ops"] = {n: o for n, o in measured["ops"].items()
                       if n.startswith("aten::") and o["us_per_step"] > 0}
    coverage = json.loads(summary_path.read_text())["compute_coverage"]
    simulated: dict[str, float] = {}
    for op in coverage["top_ops"]:
        name = SAME_OP_ON_THE_GPU.get(op["name"], op["name"])
        simulated[name] = simulated.get(name, 0.0) + op["time_ns"] / 1e3 / steps
    names = sorted(set(simulated) | {n for n, o in measured["ops"].items()
                                     if o["us_per_step"] > 50},
                   key=lambda n: -measured["ops"].get(n, {}).get("us_per_step", 0))
    table = Table(title=f"device time per step: {measured_path.name} vs {summary_path}")
    for column in ("op", "measured us", "simulated us", "error"):
        table.add_column(column, justify="left" if column == "op" else "right")
    for name in names:
        real = measured["ops"].get(name, {}).get("us_per_step")
        sim = simulated.get(name)
        error = f"{sim / real - 1:+.0%}" if real and sim else ""
        table.add_row(name, f"{real:.0f}" if real else "-", f"{sim:.0f}" if sim else "-", error)
    real_total = sum(o["us_per_step"] for o in measured["ops"].values())
    table.add_row("total (all aten ops)", f"{real_total:.0f}",
                  f"{coverage['time_ns'] / 1e3 / steps:.0f}", "")
    Console(width=120).print(table)


def main() -> None:
    parser = common.parser(__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    run_verb = verbs.add_parser("run")
    run_verb.add_argument("--steps", type=int, required=True, help="steps the script runs")
    run_verb.add_argument("--out", type=Path, required=True)
    run_verb.add_argument("script")
    run_verb.add_argument("script_args", nargs=argparse.REMAINDER)
    compare_verb = verbs.add_parser("compare")
    compare_verb.add_argument("measured", type=Path)
    compare_verb.add_argument("summary", type=Path)
    compare_verb.add_argument("--steps", type=int, default=None,
                              help="steps of the simulated run (default: the measured run's)")
    args = parser.parse_args()
    if args.verb == "run":
        run(args.script, [a for a in args.script_args if a != "--"], args.steps, args.out)
    else:
        steps = args.steps or json.loads(read_text(args.measured))["steps"]
        compare(args.measured, args.summary, steps)


if __name__ == "__main__":
    main()
