"""Megatron-core GPT trains unmodified on the simulator through Megatron's own helpers
(``scenarios/examples/megatron_gpt.py``: its model, process groups, DDP, distributed optimizer
and 1F1B schedule), and its parallelism shows in the trace as the collectives Megatron issues:
sequence parallel's all-gathers and reduce-scatters, tensor parallel's all-reduces, pipeline
send/recv between the stages. Skipped where megatron-core is not installed (the
``frameworks`` extra)."""

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.integration.live_examples import ROOT, needs_framework, parse_steps, trace_spans

pytestmark = needs_framework("megatron.core")

EXAMPLES = ROOT / "scenarios" / "examples"


@dataclass(frozen=True)
class Layout:
    """What a scenario's ``megatron_gpt.py`` arguments ask for, and the rank groups Megatron
    builds from them (its default order: tensor-parallel peers are consecutive ranks,
    pipeline stages ``world / pp`` ranks apart)."""

    world: int
    tp: int
    pp: int
    sequence_parallel: bool
    steps: int
    micro_batches: int
    layers_per_stage: int

    @classmethod
    def of(cls, scenario: Path) -> "Layout":
        spec = yaml.safe_load(scenario.read_text())
        args = [str(a) for a in spec["workload"]["args"]]

        def flag(name: str, default: int) -> int:
            return int(args[args.index(name) + 1]) if name in args else default

        pp = flag("--pp", 1)
        return cls(world=spec["cluster"]["gpus_per_host"], tp=flag("--tp", 1), pp=pp,
                   sequence_parallel="--sequence-parallel" in args, steps=flag("--steps", 5),
                   micro_batches=flag("--micro-batches", 1),
                   layers_per_stage=flag("--num-layers", 2) // pp)

    def tp_groups(self) -> list[tuple[int, ...]]:
        return [tuple(range(first, first + self.tp)) for first in range(0, self.world, self.tp)]

    def pp_groups(self) -> list[tuple[int, ...]]:
        stride = self.world // self.pp
        return [tuple(range(first, self.world, stride)) for first in range(stride)]


@pytest.mark.parametrize("name", [
    "h100x2-megatron-gpt-tp2",
    pytest.param("h100x4-megatron-gpt-tp2-pp2", marks=pytest.mark.slow),  # ~30 s here
])
def test_megatron_gpt_trains_with_its_parallelism_on_the_wire(
        name: str, tmp_path: Path, run_cli: Callable[[list[str]], None]) -> None:
    scenario = EXAMPLES / f"{name}.yaml"
    layout = Layout.of(scenario)
    run_cli([str(scenario), "--out", str(tmp_path)])

    steps = parse_steps((tmp_path / "ranks" / "rank0.log").read_text())
    assert [s.step for s in steps] == list(range(1, layout.steps + 1))
    assert all(s.wall_ms > 0 and s.gpu_ms is not None and s.gpu_ms > 0 for s in steps)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert sum(s.wall_ms for s in steps) * 1e6 <= summary["simulated_ns"]
    assert all(rank["kernels"] > 0 for rank in summary["ranks"])
    coverage = summary["compute_coverage"]
    assert coverage["unknown_ops"] == [] and "unknown-op" not in coverage["by_source"]

    collectives = trace_spans(tmp_path, "collective")
    # per rank, op and group of ranks: collectives that moved bytes between GPUs
    issued = Counter((e["pid"], e["name"], tuple(sorted(e["args"]["ranks"])))
                     for e in collectives if e["args"]["bytes"] > 0
                     and e["args"]["algorithm"] != "none")
    # at least one per attention and one per MLP block, each micro-batch's forward
    per_layer_ops = 2 * layout.layers_per_stage * layout.micro_batches * layout.steps
    tp_ops = (("all_gather", "reduce_scatter") if layout.sequence_parallel
              else ("all_reduce",))
    for group in layout.tp_groups():
        for rank in group:
            for op in tp_ops:
                assert issued[rank, op, group] >= per_layer_ops, (rank, op, group, issued)

    # 1F1B: each micro-batch's activations go down the pipeline, its gradients back up
    for stages in layout.pp_groups() if layout.pp > 1 else []:
        first, last = stages[0], stages[-1]
        assert issued[first, "send", (first, last)] == layout.micro_batches * layout.steps
        assert issued[last, "send", (first, last)] == layout.micro_batches * layout.steps
        # the tied input and output embeddings' gradients are summed across the two ends
        assert issued[first, "all_reduce", (first, last)] >= layout.steps
