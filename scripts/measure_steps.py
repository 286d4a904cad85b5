"""Measure real training-step times of the example scripts, for the simulator's accuracy harness.

Two verbs, so that the device machine only runs and this machine only summarises:

  # on a GPU machine (the lent device): run suites, one log per script under OUT
  python3 scripts/measure_steps.py run --machine h100x1 --suites single,llama --out "$OUT"
  python3 scripts/measure_steps.py run --machine h200x2 --suites single,dist,dist-more \
      --out "$OUT"

  # anywhere: a markdown table (median step ms over steps 3..N, peak memory) from the logs
  python3 scripts/measure_steps.py summarize scripts/data/steps

Each run is appended to ``<out>/<machine>_<script>.log`` between ``=== RUN name: command`` and
``=== EXIT name: rc`` lines; the CI scenarios' runs take their arguments from the scenario YAML
so the measurement follows the scenario if it changes. Runs named ``profile-*`` (suite
``profile``) run a script under ``torch.profiler`` (verb ``profile-script``) and append its
kernel-time table: they say which kernels a step launches, their times are not step times.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "scenarios"
EXAMPLES = SCENARIOS / "examples"

# NVLink multicast must stay off on the shared lent hosts (device KINDS.md).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
GPT2_124M = ["--model", "gpt2-124m", "--seq-len", "1024", "--steps", "10", "--num-workers", "0"]
LLAMA_SEQ_2048 = ["--seq-len", "2048", "--steps", "10", "--num-workers", "0"]
PROFILE_PREFIX = "profile-"
RUN_TIMEOUT_S = 150
FIRST_MEASURED_STEP = 3

RUN_RE = re.compile(r"^=== RUN (\S+): (.*)$")
EXIT_RE = re.compile(r"^=== EXIT (\S+): (-?\d+)$")
STEP_RE = re.compile(r"^step (\d+)/(\d+) \|.*\| ([\d.]+) ms(?: \(gpu ([\d.]+) ms\))?")
PEAK_RE = re.compile(r"^rank (\d+): max_memory_allocated ([\d.]+) GiB")
RESERVED_RE = re.compile(r"^rank (\d+): max_memory_reserved ([\d.]+) GiB")


@dataclass(frozen=True)
class Run:
    """One training run: a script of scenarios/examples, its arguments and its process count."""

    name: str
    script: str
    args: tuple[str, ...]
    nproc: int = 1

    def command(self) -> list[str]:
        path = str(EXAMPLES / self.script)
        if self.name.startswith(PROFILE_PREFIX):
            return [sys.executable, __file__, "profile-script", path, *self.args]
        if self.nproc == 1:
            return [sys.executable, path, *self.args]
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node", str(self.nproc), path, *self.args]


def scenario_run(scenario: str) -> Run:
    """The run a CI scenario describes, read from its YAML (not copied here)."""
    workload = yaml.safe_load((SCENARIOS / f"{scenario}.yaml").read_text())["workload"]
    return Run(name=f"ci-{scenario}", script=Path(workload["script"]).name,
               args=tuple(str(a) for a in workload["args"]),
               nproc=int(workload.get("nproc_per_node", 1)))


def suite(name: str) -> list[Run]:
    """Runs of a suite: ``single``, ``llama`` (one GPU), ``dist``, ``dist-more`` (two GPUs,
    torchrun) or ``profile`` (one GPU, under the profiler)."""
    if name == "single":
        return [Run("gpt2-124m-b8", "gpt_single.py", (*GPT2_124M, "--batch-size", "8")),
                Run("gpt2-124m-b16", "gpt_single.py", (*GPT2_124M, "--batch-size", "16")),
                Run("gpt2-350m-b8", "gpt_single.py",
                    ("--model", "gpt2-350m", *GPT2_124M[2:], "--batch-size", "8")),
                scenario_run("h100x1-gpt-single")]
    if name == "dist":
        runs = []
        for kind in ("ddp", "fsdp2", "tp"):
            runs.append(Run(f"{kind}-gpt2-124m-b8", f"gpt_{kind}.py",
                            (*GPT2_124M, "--batch-size", "8"), nproc=2))
            runs.append(scenario_run(f"h100x2-gpt-{kind}"))
        return runs
    if name == "llama":
        return [Run(f"{model}-b{batch}", "gpt_single.py",
                    ("--model", model, *LLAMA_SEQ_2048, "--batch-size", str(batch)))
                for model, batches in (("llama-150m", (8, 16)), ("llama-1b", (2, 4)))
                for batch in batches]
    if name == "dist-more":
        llama_1b = ("--model", "llama-1b", *LLAMA_SEQ_2048, "--batch-size", "4")
        runs = [Run(f"{kind}-llama-1b-b4", f"gpt_{kind}.py", llama_1b, nproc=2)
                for kind in ("ddp", "fsdp2")]
        # the TorchTitan anchor's recipe (FSDP2 + selective per-op recompute) at small scale
        runs.append(Run("fsdp2-llama-1b-b4-sac", "gpt_fsdp2.py",
                        (*llama_1b, "--activation-checkpointing", "selective-op"), nproc=2))
        return runs + [Run(f"{kind}-gpt2-124m-b16", f"gpt_{kind}.py",
                           (*GPT2_124M, "--batch-size", "16"), nproc=2)
                       for kind in ("ddp", "fsdp2")]
    if name == "profile":
        return [Run(f"{PROFILE_PREFIX}llama-1b-b4", "gpt_single.py",
                    ("--model", "llama-1b", *LLAMA_SEQ_2048[:2], "--steps", "4",
                     "--num-workers", "0", "--batch-size", "4"))]
    raise ValueError(f"unknown suite {name!r}")


def write_env(out: Path, machine: str) -> None:
    """Record the GPU, driver, topology and torch version next to the logs."""
    probes = ["nvidia-smi -q | head -40", "nvidia-smi topo -m",
              f"{shlex.quote(sys.executable)} -c 'import torch; print(torch.__version__, "
              "torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.device_count())'"]
    with open(out / f"{machine}_env.log", "w") as log:
        for probe in probes:
            log.write(f"=== {probe}\n")
            log.flush()
            subprocess.run(probe, shell=True, stdout=log, stderr=subprocess.STDOUT, check=False)


def execute(runs: list[Run], out: Path, machine: str) -> None:
    """Run each in turn, appending its whole output to the log of its script."""
    env = {**os.environ, **SAFE_ENV}
    for run in runs:
        log_path = out / f"{machine}_{Path(run.script).stem}.log"
        command = run.command()
        with open(log_path, "a") as log:
            log.write(f"=== RUN {run.name}: {shlex.join(command)}\n")
            log.flush()
            start_s = time.monotonic()
            try:
                rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    cwd=REPO, timeout=RUN_TIMEOUT_S, check=False).returncode
            except subprocess.TimeoutExpired:
                rc = 124
            log.write(f"=== EXIT {run.name}: {rc}\n")
            print(f"{run.name}: rc {rc}, {time.monotonic() - start_s:.0f} s wall", flush=True)


@dataclass
class Result:
    """What one run's log block (or one rank's output) says."""

    machine: str
    name: str
    command: str
    rc: int | None = None
    steps_ms: list[float] = field(default_factory=list)
    """Wall ms of steps FIRST_MEASURED_STEP.. (earlier ones are warm-up)."""
    gpu_ms: list[float] = field(default_factory=list)
    peak_gib: float | None = None
    """Largest ``max_memory_allocated`` printed (over ranks, where several print)."""
    reserved_gib: float | None = None
    """Largest ``max_memory_reserved`` printed (logs from before it was printed: None)."""

    def read(self, line: str) -> None:
        """Take in one line the script printed."""
        if match := STEP_RE.match(line):
            if int(match.group(1)) >= FIRST_MEASURED_STEP:
                self.steps_ms.append(float(match.group(3)))
                if match.group(4):
                    self.gpu_ms.append(float(match.group(4)))
        elif match := PEAK_RE.match(line):
            self.peak_gib = max(float(match.group(2)), self.peak_gib or 0.0)
        elif match := RESERVED_RE.match(line):
            self.reserved_gib = max(float(match.group(2)), self.reserved_gib or 0.0)

    @property
    def median_ms(self) -> float | None:
        """The step time this run stands for: the median of its measured steps."""
        return statistics.median(self.steps_ms) if self.steps_ms else None


def parse_log(path: Path, machine: str) -> list[Result]:
    """Split a log into its runs and read step times and peak memory from each."""
    results: list[Result] = []
    current: Result | None = None
    for line in path.read_text(errors="replace").splitlines():
        if match := RUN_RE.match(line):
            current = Result(machine, match.group(1), match.group(2))
            results.append(current)
        elif current is None:
            continue
        elif match := EXIT_RE.match(line):
            current.rc = int(match.group(2))
        else:
            current.read(line)
    return results


def parse_output(texts: list[str], machine: str, name: str) -> Result:
    """What the ranks of one run printed (e.g. the simulator's rank logs), read as one run."""
    result = Result(machine, name, command="")
    for text in texts:
        for line in text.splitlines():
            result.read(line)
    return result


def profile_script(script: Path, args: list[str]) -> None:
    """Run ``script`` as ``__main__`` under ``torch.profiler``; print device time by kernel
    and by op over all its steps: the kernels a step really launches, for the compute model."""
    import runpy

    import torch
    from torch.profiler import ProfilerActivity, profile

    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))
    on_gpu = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        runpy.run_path(str(script), run_name="__main__")
    averages = prof.key_averages()
    time_key = "device_time_total" if on_gpu else "cpu_time_total"
    for sort_by in (f"self_{time_key}", time_key):
        print(f"=== PROFILE sorted by {sort_by}", flush=True)
        print(averages.table(sort_by=sort_by, row_limit=50, max_name_column_width=90),
              flush=True)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def _gib(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def summarize(root: Path) -> str:
    """A markdown table over every ``<machine>/*.log`` under root."""
    rows = [("| machine | run | rc | steps | median wall ms | median gpu ms | peak GiB (max rank) "
             "| reserved GiB |"), "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for machine_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for log in sorted(machine_dir.glob("*.log")):
            for res in parse_log(log, machine_dir.name):
                steps = f"{FIRST_MEASURED_STEP}..{FIRST_MEASURED_STEP + len(res.steps_ms) - 1}"
                rows.append(f"| {res.machine} | {res.name} | {res.rc} | "
                            f"{steps if res.steps_ms else 'none'} | {_median(res.steps_ms)} | "
                            f"{_median(res.gpu_ms)} | {_gib(res.peak_gib)} | "
                            f"{_gib(res.reserved_gib)} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="run suites on this (GPU) machine")
    run.add_argument("--machine", required=True, help="log-name prefix, e.g. h100x1")
    run.add_argument("--suites", default="single",
                     help="comma list of: single, llama, dist, dist-more, profile")
    run.add_argument("--out", type=Path, required=True)
    summary = verbs.add_parser("summarize", help="table from <root>/<machine>/*.log")
    summary.add_argument("root", type=Path)
    prof = verbs.add_parser("profile-script", help="run one script under torch.profiler")
    prof.add_argument("script", type=Path)
    prof.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.verb == "run":
        args.out.mkdir(parents=True, exist_ok=True)
        write_env(args.out, args.machine)
        execute([r for name in args.suites.split(",") for r in suite(name)], args.out,
                args.machine)
    elif args.verb == "profile-script":
        profile_script(args.script, args.args)
    else:
        print(summarize(args.root))


if __name__ == "__main__":
    main()
