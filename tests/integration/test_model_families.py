"""Beyond eager transformer LMs on the simulator: ``torch.compile`` (Inductor's kernels), a
channels_last CNN, a ViT and a mixture of experts, each a tiny run of a bundled example."""

import json
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from phantora.cli import main
from tests.integration.live_examples import ROOT, trace_spans

EXAMPLES = ROOT / "scenarios" / "examples"


def simulate(tmp_path: Path, name: str, script: str, args: list[str]) -> dict[str, Any]:
    """Run ``script`` with ``args`` on one simulated H100; its summary, kernel names and the
    wall ms of each step it printed."""
    scenario = {"name": name, "cluster": {"gpu": "h100", "hosts": 1, "gpus_per_host": 1},
                "workload": {"script": str(EXAMPLES / script), "args": args,
                             "nproc_per_node": 1, "env": {"OMP_NUM_THREADS": "1"}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    out = tmp_path / name
    assert main([str(path), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    kernels = Counter(e["name"] for e in trace_spans(out, "kernel"))
    log = (out / "ranks" / "rank0.log").read_text()
    steps = [float(line.split(" ms")[0].rsplit("| ", 1)[1]) for line in log.splitlines()
             if line.startswith("step ")]
    return {"summary": summary, "kernels": kernels, "steps": steps}


def test_compiled_model_launches_fused_kernels_and_pays_compile_time_once(
        tmp_path: Path) -> None:
    args = ["--model", "llama-tiny", "--steps", "3", "--num-workers", "0"]
    eager = simulate(tmp_path, "eager", "gpt_single.py", args)
    compiled = simulate(tmp_path, "compiled", "gpt_single.py", [*args, "--compile"])
    fused = {name: count for name, count in compiled["kernels"].items()
             if name.startswith("inductor::triton_")}
    assert fused, "generated Triton kernels are launched"
    assert not any(name.startswith("inductor::") for name in eager["kernels"])
    assert sum(compiled["kernels"].values()) < 0.8 * sum(eager["kernels"].values())
    assert compiled["kernels"]["aten::mm"] == eager["kernels"]["aten::mm"], "matmuls stay"
    first, *rest = compiled["steps"]
    assert first > 10 * max(rest), "the first step compiles"
    coverage = compiled["summary"]["compute_coverage"]
    assert {"fallback_share", "fallback_warning", "fallback_by_op"} <= coverage.keys()


def test_resnet_and_vit_run_with_their_layers_costed_from_tables(tmp_path: Path) -> None:
    resnet = simulate(tmp_path, "resnet", "vision_single.py",
                      ["--model", "resnet50", "--batch-size", "4", "--image-size", "64",
                       "--steps", "2"])
    names = resnet["kernels"]
    assert names["aten::convolution"] == names["aten::convolution_backward"] == 2 * 53
    assert names["aten::native_batch_norm"] == 2 * 53
    assert resnet["steps"] and all(ms > 0 for ms in resnet["steps"])
    by_op = {op["name"]: op["source"] for op in resnet["summary"]["compute_coverage"]["top_ops"]}
    assert by_op["aten::convolution_backward"] in ("measured", "interpolated")
    vit = simulate(tmp_path, "vit", "vision_single.py",
                   ["--model", "vit-b16", "--batch-size", "2", "--image-size", "32",
                    "--steps", "2"])
    assert vit["kernels"]["aten::convolution"] == 2  # the patch embedding
    assert len(vit["steps"]) == 2


def test_mixture_of_experts_runs_grouped_gemms(tmp_path: Path) -> None:
    moe = simulate(tmp_path, "moe", "gpt_single.py",
                   ["--model", "llama-moe-tiny", "--steps", "2", "--num-workers", "0"])
    # 2 layers x 2 steps x (3 forward + 6 backward) grouped GEMMs
    assert moe["kernels"]["aten::_grouped_mm"] == 2 * 2 * 9
    unknown = moe["summary"]["compute_coverage"]["unknown_ops"]
    assert "aten::_grouped_mm" not in unknown
