"""The example training scenarios (``workload.script``) and how to read their scripts' logs.

Shared by the tests that run the examples on the simulator and for real under torchrun.
"""

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCENARIO_DIR = ROOT / "scenarios"


def needs_framework(package: str) -> pytest.MarkDecorator:
    """Skips a module's tests where ``package`` (of the ``frameworks`` extra) is not installed,
    without importing it while pytest collects (``megatron.core`` alone takes seconds of CPU;
    the simulated ranks import it, not the test process)."""
    return pytest.mark.skipif(importlib.util.find_spec(package) is None,
                              reason=f"{package} is not installed (the frameworks extra)")


def trace_spans(out: Path, category: str) -> list[dict[str, Any]]:
    """The complete ("X") events of ``category`` (``kernel``, ``collective``) in a run's
    ``trace.json``, in file order."""
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and e.get("cat") == category]


@dataclass(frozen=True)
class ExampleScenario:
    path: Path
    script: Path
    args: list[str]
    world_size: int
    env: dict[str, str]

    @property
    def name(self) -> str:
        return self.path.stem


def example_scenarios() -> list[ExampleScenario]:
    """Every bundled scenario that runs a training script."""
    found = []
    for path in sorted(SCENARIO_DIR.glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())
        workload = spec["workload"]
        if "script" not in workload:
            continue
        nproc = workload.get("nproc_per_node", spec["cluster"].get("gpus_per_host", 8))
        found.append(ExampleScenario(
            path=path, script=path.parent / workload["script"],
            args=[str(a) for a in workload.get("args", [])],
            world_size=spec["cluster"].get("hosts", 1) * nproc,
            env={k: str(v) for k, v in workload.get("env", {}).items()}))
    return found


STEP_LINE = re.compile(r"^step (\d+)/(\d+) \| loss (\S+) \| norm (\S+) \| lr \S+ \| "
                       r"([\d.]+) ms(?: \(gpu ([\d.]+) ms\))? \|", re.MULTILINE)


@dataclass(frozen=True)
class Step:
    step: int
    steps: int
    loss: float
    norm: float
    wall_ms: float
    gpu_ms: float | None


def parse_steps(log: str) -> list[Step]:
    """The per-step lines that ``train_utils.train`` prints on rank 0."""
    return [Step(int(m[1]), int(m[2]), float(m[3]), float(m[4]), float(m[5]),
                 float(m[6]) if m[6] is not None else None) for m in STEP_LINE.finditer(log)]


def peak_memory_line(log: str, rank: int) -> str | None:
    """What rank ``rank`` printed as its max_memory_allocated, e.g. ``0.012 GiB``."""
    match = re.search(rf"^rank {rank}: max_memory_allocated (.+)$", log, re.MULTILINE)
    return match[1] if match else None
