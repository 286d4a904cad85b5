"""DeepSpeed ZeRO 1, 2 and 3 train unmodified on the simulator through ``deepspeed.initialize``
(``scenarios/examples/deepspeed_gpt.py``), with DeepSpeed's default FusedAdam, whose
JIT-built CUDA extension the simulator serves as PyTorch's fused Adam kernel, and each stage
shows in the trace as the collectives DeepSpeed 0.19 issues: stages 1 and 2 all-reduce the
gradients and all-gather the updated parameter partitions after the step; stage 3
reduce-scatters the gradients and all-gathers parameters again in every step's forward and
backward. Skipped where deepspeed is not installed (the ``frameworks`` extra)."""

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.integration.live_examples import ROOT, needs_framework, parse_steps, trace_spans

pytestmark = needs_framework("deepspeed")

EXAMPLES = ROOT / "scenarios" / "examples"
sys.path.insert(0, str(EXAMPLES))

from model import PRESETS, build_model  # noqa: E402

BF16_BYTES = 2


def _gradient_bytes(args: list[str]) -> int:
    """Bytes of the bf16 gradients (and parameters) of the scenario's model."""
    preset = args[args.index("--model") + 1] if "--model" in args else "tiny"
    with torch.device("meta"):
        return build_model(PRESETS[preset]).num_params() * BF16_BYTES


def _collectives(run: Path, rank: int) -> list[dict[str, Any]]:
    """Rank ``rank``'s collectives that moved bytes, in the order it issued them."""
    return sorted((e for e in trace_spans(run, "collective")
                   if e["pid"] == rank and e["args"]["bytes"] > 0
                   and e["args"]["algorithm"] != "none"), key=lambda e: e["ts"])


def _kernel_names(run: Path, rank: int) -> list[str]:
    return [e["name"] for e in trace_spans(run, "kernel") if e["pid"] == rank]


def _check_zero_1_2(collectives: list[dict[str, Any]], steps: int, grad_bytes: int) -> None:
    """Each step all-reduces every gradient (a bucket: the bf16 gradients flattened), then
    all-gathers the updated partitions: no reduce-scatter."""
    def total(op: str) -> int:
        return sum(e["args"]["bytes"] for e in collectives if e["name"] == op)

    assert total("reduce_scatter") == 0
    # small all-reduces besides: the overflow check and the gradient norm
    gradients = [e for e in collectives if e["name"] == "all_reduce"
                 and e["args"]["bytes"] >= grad_bytes]
    assert len(gradients) == steps
    assert total("all_gather") >= steps * grad_bytes


def _check_zero_3(collectives: list[dict[str, Any]], steps: int, grad_bytes: int) -> None:
    """Each step ends with one reduce-scatter of the gradients; between two of them, the
    partitioned parameters are all-gathered for forward and again for backward."""
    ends = [i for i, e in enumerate(collectives) if e["name"] == "reduce_scatter"]
    assert len(ends) == steps
    assert all(collectives[i]["args"]["bytes"] >= grad_bytes for i in ends)
    for start, end in zip(ends, ends[1:]):
        gathers = [e for e in collectives[start:end] if e["name"] == "all_gather"]
        assert len(gathers) >= 2, f"step without parameter all-gathers: {gathers}"


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_zero_trains_with_fused_adam_and_its_collectives(
        stage: int, tmp_path: Path, run_cli: Callable[[list[str]], None]) -> None:
    scenario = EXAMPLES / f"h100x2-deepspeed-zero{stage}.yaml"
    spec = yaml.safe_load(scenario.read_text())
    args = [str(a) for a in spec["workload"]["args"]]
    assert args[args.index("--zero-stage") + 1] == str(stage)
    steps = int(args[args.index("--steps") + 1])
    world = spec["cluster"]["gpus_per_host"]
    run_cli([str(scenario), "--out", str(tmp_path)])

    parsed = parse_steps((tmp_path / "ranks" / "rank0.log").read_text())
    assert [s.step for s in parsed] == list(range(1, steps + 1))
    assert all(s.wall_ms > 0 and s.gpu_ms is not None and s.gpu_ms > 0 for s in parsed)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert sum(s.wall_ms for s in parsed) * 1e6 <= summary["simulated_ns"]
    coverage = summary["compute_coverage"]
    assert coverage["unknown_ops"] == [] and "unknown-op" not in coverage["by_source"]

    grad_bytes = _gradient_bytes(args)
    for rank in range(world):
        log = (tmp_path / "ranks" / f"rank{rank}.log").read_text()
        assert "data pointer of FakeTensor" not in log
        kernels = _kernel_names(tmp_path, rank)
        # FusedAdam's stand-in: one fused kernel per parameter group and step, no foreach
        assert kernels.count("aten::_fused_adamw_") >= steps
        assert not [k for k in kernels if k.startswith("aten::_foreach_")]
        check = _check_zero_3 if stage == 3 else _check_zero_1_2
        check(_collectives(tmp_path, rank), steps, grad_bytes)
