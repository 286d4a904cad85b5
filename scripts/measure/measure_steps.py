"""Measure real training-step times of the example scripts, for the simulator's accuracy harness.

Two verbs, so that the device machine only runs and this machine only summarises:

  # on a GPU machine (the lent device): run suites, one log per script under OUT
  python3 scripts/measure/measure_steps.py run --machine h100x1 --suites single,llama --out "$OUT"
  python3 scripts/measure/measure_steps.py run --machine h200x2 --suites single,dist,dist-more \
      --out "$OUT"
  # every visible GPU, machine named from them (h200x8 on eight H200s), at most 300 s:
  python3 scripts/measure/measure_steps.py run --suites dist,dist-more --budget-s 300 \
      --out "$OUT/steps/{machine}"

  # anywhere: what a machine would run, without running it
  python3 scripts/measure/measure_steps.py run --machine h200x8 --suites dist,dist-more --out /tmp/s \
      --dry-run

  # anywhere: a markdown table (median step ms over steps 3..N, peak memory) from the logs
  python3 scripts/measure/measure_steps.py summarize scripts/data/steps

The distributed suites run ``torchrun --nproc_per_node N`` with N = ``--nproc``, by default the
GPU count of ``--machine`` (``h200x8`` -> 8), or every visible GPU. Tensor parallelism splits
the attention heads N ways: GPT-2 124M (12 heads) runs at 2 and 4, GPT-2 350M (16 heads) at 2,
4 and 8 (``tp_model``); the CI scenarios' runs keep their YAML's process count and run only
where it is N.

Each run is appended to ``<out>/<machine>_<script>.log`` between ``=== RUN name: command`` and
``=== EXIT name: rc`` lines (then ``=== WALL name: seconds``, and with ``--host-watch`` the
host's speed during the run, ``=== HOST name: <factor> of <reference> (...)``, from
``host_watch.py`` running beside the runs; a run left out because
``--budget-s`` was spent gets ``=== SKIP name: reason`` instead); the CI scenarios' runs take
their arguments from the scenario YAML so the measurement follows the scenario if it changes. Runs named ``profile-*`` (suite
``profile``) run a script under ``torch.profiler`` (verb ``profile-script``) and append its
kernel-time table: they say which kernels a step launches, their times are not step times.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO  # noqa: E402

SCENARIOS = REPO / "scenarios"
EXAMPLES = SCENARIOS / "examples"

SAFE_ENV = {**common.SAFETY_ENV, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
"""Every run's environment: NVLink multicast off on the shared lent hosts, one OpenMP thread,
unbuffered output."""
GPT2_124M = ["--model", "gpt2-124m", "--seq-len", "1024", "--steps", "10", "--num-workers", "0"]
LLAMA_SEQ_2048 = ["--seq-len", "2048", "--steps", "10", "--num-workers", "0"]
PROFILE_PREFIX = "profile-"
RUN_TIMEOUT_S = 150
FIRST_MEASURED_STEP = 3
DEFAULT_DIST_NPROC = 2
"""Process count of the distributed suites where neither ``--nproc`` nor the machine says."""
KILL_GRACE_S = 10
"""After a run's timeout: seconds between SIGTERM and SIGKILL to its whole process group."""
MACHINE_RE = re.compile(r"^(?P<gpu>[a-z]+\d+)x(?P<gpus>\d+)$")
"""A machine name as the data folders use it: ``<gpu>x<count>``, e.g. ``h200x8``."""
_GPU_MODEL_RE = re.compile(r"\b([A-Za-z]+\d+)")

RUN_RE = re.compile(r"^=== RUN (\S+): (.*)$")
EXIT_RE = re.compile(r"^=== EXIT (\S+): (-?\d+)$")
HOST_RE = re.compile(r"^=== HOST (\S+): ([\d.]+) of (\S+)")
STEP_RE = re.compile(r"^step (\d+)/(\d+) \|.*\| ([\d.]+) ms(?: \(gpu ([\d.]+) ms\))?")
PEAK_RE = re.compile(r"^rank (\d+): max_memory_allocated ([\d.]+) GiB")
RESERVED_RE = re.compile(r"^rank (\d+): max_memory_reserved ([\d.]+) GiB")


PROCESS_GROUP_SCRIPTS = frozenset({"gpt_ddp.py", "gpt_fsdp2.py", "gpt_fsdp_tp.py", "gpt_tp.py",
                                   "llama_pp.py", "megatron_gpt.py"})
"""Examples that join a process group whatever its size (``train_utils.init_distributed``):
they run under torchrun even as one process (Megatron TP=1 on one GPU)."""


@dataclass(frozen=True)
class Run:
    """One training run: a script of scenarios/examples, its arguments and its process count."""

    name: str
    script: str
    args: tuple[str, ...]
    nproc: int = 1
    env: tuple[tuple[str, str], ...] = ()
    """Variables the script needs (Megatron's CUDA_DEVICE_MAX_CONNECTIONS): the command sets
    them through ``env``, so the logged command line carries them."""
    runner: tuple[str, ...] = ()
    """A script that runs the example, with its arguments (``record_routing.py --out F --``):
    it comes before the example's path, in one process and under torchrun alike."""

    def command(self) -> list[str]:
        path = str(EXAMPLES / self.script)
        prefix = ["env", *(f"{key}={value}" for key, value in self.env)] if self.env else []
        if self.name.startswith(PROFILE_PREFIX):
            return [*prefix, sys.executable, __file__, "profile-script", path, *self.args]
        if self.nproc == 1 and self.script not in PROCESS_GROUP_SCRIPTS:
            return [*prefix, sys.executable, *self.runner, path, *self.args]
        return [*prefix, sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node", str(self.nproc), *self.runner, path, *self.args]


def machine_name(gpu_name: str, count: int) -> str:
    """``("NVIDIA H200", 8)`` -> ``"h200x8"``: the first letters-then-digits word of the
    device name (``H100 80GB HBM3`` -> ``h100``, ``A100-SXM4-80GB`` -> ``a100``), lower case."""
    match = _GPU_MODEL_RE.search(gpu_name.replace("NVIDIA", " "))
    return f"{match.group(1).lower() if match else 'gpu'}x{count}"


def machine_gpus(machine: str) -> int | None:
    """``h200x8`` -> 8; None for a name not of the form ``<gpu>x<count>``."""
    match = MACHINE_RE.match(machine)
    return int(match["gpus"]) if match else None


def visible_gpu_names() -> list[str]:
    """Names of the GPUs this process may use (``CUDA_VISIBLE_DEVICES`` respected), read with
    nvidia-smi so that this process opens no CUDA context; empty where there is none."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and done.returncode == 0:
        picked = [int(i) for i in visible.split(",") if i.strip().isdigit()]
        names = [names[i] for i in picked if i < len(names)]
    return names if done.returncode == 0 else []


def with_steps(args: list[str], steps: int) -> list[str]:
    """``args`` with ``--steps`` set to ``steps``."""
    if "--steps" not in args:
        return [*args, "--steps", str(steps)]
    at = args.index("--steps") + 1
    return [*args[:at], str(steps), *args[at + 1:]]


CI_STEPS = 10
"""Steps of a CI scenario's measured run, whatever its YAML says (3, to keep CI short): one
measured step of a launch-bound run is one sample of a host whose speed drifts, 8 are a median."""


def scenario_run(scenario: str) -> Run:
    """The run a CI scenario describes, read from its YAML (not copied here), over
    :data:`CI_STEPS` steps."""
    workload = yaml.safe_load((SCENARIOS / f"{scenario}.yaml").read_text())["workload"]
    args = with_steps([str(a) for a in workload["args"]], CI_STEPS)
    return Run(name=f"ci-{scenario}", script=Path(workload["script"]).name, args=tuple(args),
               nproc=int(workload.get("nproc_per_node", 1)))


MEGATRON_GPT2_124M = ("--num-layers", "12", "--hidden-size", "768", "--num-attention-heads", "12",
                      "--vocab-size", "50304", "--seq-len", "1024")
"""GPT-2 124M's shape in megatron_gpt.py's flags (its heads split 2, 3, 4, 6 or 12 ways)."""
MEGATRON_ENV = (("CUDA_DEVICE_MAX_CONNECTIONS", "1"),)
"""Megatron asks for one hardware queue, so that its communication kernels run in issue order."""

TP_MODELS = (("gpt2-124m", 12), ("gpt2-350m", 16))
"""GPT-2 presets the tensor-parallel suite may use and their head counts (``gpt_tp.py``'s plan
is GPT-2's only)."""
GPT2_VOCAB, GPT2_SEQ = 50304, 1024
"""The other sizes ``gpt_tp.py`` splits N ways: vocabulary (padded) and ``--seq-len``."""


ZOO_STEPS = 10
"""Steps of a zoo run: the harness takes the median of steps 3 onwards."""


def tp_model(nproc: int) -> str | None:
    """The smallest GPT-2 preset whose heads, vocabulary and sequence split ``nproc`` ways;
    None where none does."""
    if GPT2_VOCAB % nproc or GPT2_SEQ % nproc:
        return None
    return next((model for model, heads in TP_MODELS if heads % nproc == 0), None)


def deepspeed_env() -> tuple[tuple[str, str], ...]:
    """DeepSpeed JIT-builds its fused Adam for the architectures of ``TORCH_CUDA_ARCH_LIST`` and
    cannot parse a suffixed one (``9.0a``, as the lent machines set it): the same list without
    the suffixes."""
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
    plain = re.sub(r"(\d+\.\d+)[a-z]+", r"\1", archs)
    return (("TORCH_CUDA_ARCH_LIST", plain),) if plain != archs else ()


def suite(name: str, nproc: int = DEFAULT_DIST_NPROC) -> list[Run]:
    """Runs of a suite: ``single``, ``llama``, ``families`` (one GPU: compiled LMs beside
    their eager selves, ResNet-50, ViT-B/16, a mixture of experts), ``dist``, ``dist-more``,
    ``frameworks`` (``nproc`` GPUs, torchrun; DeepSpeed and Megatron-core installed),
    ``values`` (``nproc`` GPUs: expert-parallel MoE, pipeline-parallel Llama), ``zoo`` (one
    GPU: ``zoo_train.py``'s Hugging Face, timm and diffusers models, the Trainer loop) or
    ``profile`` (one GPU, under the profiler)."""
    if name == "single":
        return [Run("gpt2-124m-b8", "gpt_single.py", (*GPT2_124M, "--batch-size", "8")),
                Run("gpt2-124m-b16", "gpt_single.py", (*GPT2_124M, "--batch-size", "16")),
                Run("gpt2-350m-b8", "gpt_single.py",
                    ("--model", "gpt2-350m", *GPT2_124M[2:], "--batch-size", "8")),
                scenario_run("h100x1-gpt-single")]
    if name == "dist":
        runs = []
        for kind in ("ddp", "fsdp2", "tp"):
            model = tp_model(nproc) if kind == "tp" else "gpt2-124m"
            if model is not None:
                runs.append(Run(f"{kind}-{model}-b8", f"gpt_{kind}.py",
                                ("--model", model, *GPT2_124M[2:], "--batch-size", "8"),
                                nproc=nproc))
            ci = scenario_run(f"h100x2-gpt-{kind}")
            if ci.nproc == nproc:
                runs.append(ci)
        return runs
    if name == "llama":
        return [Run(f"{model}-b{batch}", "gpt_single.py",
                    ("--model", model, *LLAMA_SEQ_2048, "--batch-size", str(batch)))
                for model, batches in (("llama-150m", (8, 16)), ("llama-1b", (2, 4)))
                for batch in batches]
    if name == "dist-more":
        llama_1b = ("--model", "llama-1b", *LLAMA_SEQ_2048, "--batch-size", "4")
        runs = [Run(f"{kind}-llama-1b-b4", f"gpt_{kind}.py", llama_1b, nproc=nproc)
                for kind in ("ddp", "fsdp2")]
        # the TorchTitan anchor's recipe (FSDP2 + selective per-op recompute) at small scale
        runs.append(Run("fsdp2-llama-1b-b4-sac", "gpt_fsdp2.py",
                        (*llama_1b, "--activation-checkpointing", "selective-op"), nproc=nproc))
        runs += [Run(f"{kind}-gpt2-124m-b16", f"gpt_{kind}.py",
                     (*GPT2_124M, "--batch-size", "16"), nproc=nproc)
                 for kind in ("ddp", "fsdp2")]
        # GPT-2 350M TP where ``dist`` ran 124M: the same model at every GPU count >= 2
        if tp_model(nproc) == "gpt2-124m" and 16 % nproc == 0:
            runs.append(Run("tp-gpt2-350m-b8", "gpt_tp.py",
                            ("--model", "gpt2-350m", *GPT2_124M[2:], "--batch-size", "8"),
                            nproc=nproc))
        return runs
    if name == "families":
        gpt2 = ("--model", "gpt2-124m", *GPT2_124M[2:], "--batch-size", "8")
        llama = ("--model", "llama-1b", *LLAMA_SEQ_2048, "--batch-size", "4")
        vision = ("--image-size", "224", "--steps", "12")
        # in order of need: a run the budget ends is lost
        return [Run("gpt2-124m-b8", "gpt_single.py", gpt2),
                Run("gpt2-124m-b8-compile", "gpt_single.py", (*gpt2, "--compile")),
                Run("resnet50-b64", "vision_single.py",
                    ("--model", "resnet50", "--batch-size", "64", *vision)),
                Run("resnet50-b128", "vision_single.py",
                    ("--model", "resnet50", "--batch-size", "128", *vision)),
                Run("vit-b16-b64", "vision_single.py",
                    ("--model", "vit-b16", "--batch-size", "64", *vision)),
                Run("llama-moe-2b-b4", "gpt_single.py",
                    ("--model", "llama-moe-2b", *LLAMA_SEQ_2048, "--batch-size", "4")),
                Run("llama-1b-b4", "gpt_single.py", llama),
                Run("llama-1b-b4-compile", "gpt_single.py", (*llama, "--compile")),
                Run("gpt2-124m-b8-compile-cudagraphs", "gpt_single.py",
                    (*gpt2, "--compile", "--compile-mode", "reduce-overhead")),
                Run("resnet50-b64-compile", "vision_single.py",
                    ("--model", "resnet50", "--batch-size", "64", *vision, "--compile"))]
    if name == "frameworks":
        # DeepSpeed's ZeRO stages and Megatron-core's tensor parallel (with and without sequence
        # parallel) on GPT-2 124M, through each framework's own training pieces
        gpt2 = ("--model", "gpt2-124m", *GPT2_124M[2:], "--batch-size", "8")
        runs = [Run(f"deepspeed-zero{stage}-gpt2-124m-b8", "deepspeed_gpt.py",
                    (*gpt2, "--zero-stage", str(stage)), nproc=nproc, env=deepspeed_env())
                for stage in (1, 2, 3)]
        if 12 % nproc == 0:
            megatron = ("--tp", str(nproc), *MEGATRON_GPT2_124M, "--batch-size", "8",
                        "--steps", "10")
            runs += [Run(f"megatron-tp{nproc}{suffix}-gpt2-124m-b8", "megatron_gpt.py",
                         (*megatron, *flags), nproc=nproc, env=MEGATRON_ENV)
                     for suffix, flags in (("", ()), ("-sp", ("--sequence-parallel",)))]
        if nproc == 1:
            # batch 1: the GPU idles between launches, so the step is Megatron's host path alone
            runs.append(Run("megatron-tp1-gpt2-124m-b1", "megatron_gpt.py",
                            ("--tp", "1", *MEGATRON_GPT2_124M, "--batch-size", "1", "--steps",
                             "10"), env=MEGATRON_ENV))
        return runs
    if name == "values":
        # issue 13's scripts at realistic sizes: expert parallel (experts split over the
        # ranks, variable all_to_all) and pipeline parallel (one stage per rank)
        moe = ("--model", "moe-600m", *LLAMA_SEQ_2048, "--batch-size", "4")
        runs = [Run("ep-moe-600m-b4-balanced", "moe_ep.py", (*moe, "--routing", "balanced"),
                    nproc=nproc)] if 8 % nproc == 0 else []
        # Llama 3 8B's width at 8 layers (llama-1b ties its embeddings, which stages cannot)
        pp = ("--model", "llama3-8b", "--n-layer", "8", *LLAMA_SEQ_2048, "--batch-size", "2",
              "--microbatches", "8")
        return runs + [Run(f"pp-{schedule}-llama3-8b-8l-b2-m8", "llama_pp.py",
                           (*pp, "--schedule", schedule), nproc=nproc)
                       for schedule in ("1f1b", "gpipe")]
    if name == "parallel":
        # what dist, dist-more and values leave out: 2-D FSDP x TP, learned expert routing,
        # interleaved pipeline stages, Megatron's pipeline; the CNN under DDP
        moe = ("--model", "moe-600m", *LLAMA_SEQ_2048, "--batch-size", "4")
        pp = ("--model", "llama3-8b", "--n-layer", "8", *LLAMA_SEQ_2048, "--batch-size", "2",
              "--microbatches", "8")
        runs = []
        if nproc % 2 == 0 and nproc > 2:
            runs.append(Run(f"fsdp-tp2-gpt2-124m-b8", "gpt_fsdp_tp.py",
                            ("--tp", "2", *GPT2_124M, "--batch-size", "8"), nproc=nproc))
        if 8 % nproc == 0:
            runs.append(Run("ep-moe-600m-b4-learned", "moe_ep.py", (*moe, "--routing", "learned"),
                            nproc=nproc))
        if 8 % (2 * nproc) == 0:
            runs.append(Run("pp-interleaved-llama3-8b-8l-b2-m8", "llama_pp.py",
                            (*pp, "--schedule", "interleaved1f1b", "--stages-per-rank", "2"),
                            nproc=nproc))
        if 12 % max(nproc // 2, 1) == 0:
            runs.append(Run(f"megatron-tp{max(nproc // 2, 1)}-pp2-gpt2-124m-b8", "megatron_gpt.py",
                            ("--tp", str(max(nproc // 2, 1)), "--pp", "2", *MEGATRON_GPT2_124M,
                             "--batch-size", "8", "--micro-batches", "4", "--steps", "10"),
                            nproc=nproc, env=MEGATRON_ENV))
        return runs
    if name == "zoo":
        # Hugging Face, timm and diffusers models at their full size, default optimizer; one
        # through transformers.Trainer
        models = sorted(common.load_example("zoo_train").ZOO)
        return [*(Run(model, "zoo_train.py", ("--model", model, "--steps", str(ZOO_STEPS)))
                  for model in models),
                Run("hf-llama-trainer", "zoo_train.py",
                    ("--model", "hf-llama", "--loop", "trainer", "--steps", str(ZOO_STEPS)))]
    if name == "profile":
        return [Run(f"{PROFILE_PREFIX}llama-1b-b4", "gpt_single.py",
                    ("--model", "llama-1b", *LLAMA_SEQ_2048[:2], "--steps", "4",
                     "--num-workers", "0", "--batch-size", "4"))]
    raise ValueError(f"unknown suite {name!r}")


def env_log_name(machine: str, session: str = "") -> str:
    """The env log's file name: ``<machine>_env.log``, renamed ``<machine>_env.<session>.log``
    beside a measuring session's ``<machine>_<script>.<session>.log``."""
    return f"{machine}_env{'.' + session if session else ''}.log"


def write_env(out: Path, machine: str) -> None:
    """Record the GPU, driver, topology, torch version and the host's speed before the runs
    (``measure_host_speed.py``: a lent host's speed moves the host-bound runs' steps) next to
    the logs."""
    host_speed = Path(__file__).resolve().with_name("measure_host_speed.py")
    probes = ["nvidia-smi -q | head -40", "nvidia-smi topo -m",
              f"{shlex.quote(sys.executable)} -c 'import torch; print(torch.__version__, "
              "torch.version.cuda, torch.cuda.nccl.version(), torch.cuda.device_count())'",
              f"{shlex.quote(sys.executable)} "
              f"{shlex.quote(str(host_speed))} --repeats 3"]
    with open(out / env_log_name(machine), "w") as log:
        for probe in probes:
            log.write(f"=== {probe}\n")
            log.flush()
            subprocess.run(probe, shell=True, stdout=log, stderr=subprocess.STDOUT, check=False)


def log_path(out: Path, machine: str, run: Run) -> Path:
    """``<out>/<machine>_<script stem>.log``: where a run's output is appended."""
    return out / f"{machine}_{Path(run.script).stem}.log"


def run_in_group(command: list[str], log, env: dict[str, str], timeout_s: float) -> int:
    """Run ``command`` in its own process group; on timeout end the whole group (torchrun's
    workers too, which would otherwise keep their GPUs) and return 124."""
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                            start_new_session=True)
    try:
        return proc.wait(timeout=max(timeout_s, 1.0))
    except subprocess.TimeoutExpired:
        for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        proc.wait()
        return 124


def execute_single_gpu_runs(runs: list[Run], out: Path, machine: str, gpus: int,
                            budget_s: float | None, run_timeout_s: float) -> None:
    """One-GPU runs side by side, one per GPU (``CUDA_VISIBLE_DEVICES``), each logged to its
    own file first and appended to its script's log when done, so that logs do not interleave.
    For kernel profiles: concurrent runs share the host, so their step times are not kept as
    step measurements where one run alone was made."""
    free = queue.Queue()
    for gpu in range(gpus):
        free.put(gpu)
    lock = threading.Lock()
    started_s = time.monotonic()

    def one(run: Run) -> None:
        gpu = free.get()
        try:
            left_s = (budget_s - (time.monotonic() - started_s)) if budget_s is not None else None
            if left_s is not None and left_s < 1.0:
                with lock, open(log_path(out, machine, run), "a") as log:
                    log.write(f"=== SKIP {run.name}: budget of {budget_s:.0f} s spent\n")
                return
            command = run.command()
            env = {**os.environ, **SAFE_ENV, "CUDA_VISIBLE_DEVICES": str(gpu)}
            private = out / f".{run.name}.part"
            start_s = time.monotonic()
            with open(private, "w") as log:
                log.write(f"=== RUN {run.name}: {shlex.join(command)}\n")
                log.flush()
                timeout_s = run_timeout_s if left_s is None else min(run_timeout_s, left_s)
                rc = run_in_group(command, log, env, timeout_s)
                wall_s = time.monotonic() - start_s
                log.write(f"=== EXIT {run.name}: {rc}\n=== WALL {run.name}: {wall_s:.1f} s\n")
            with lock, open(log_path(out, machine, run), "a") as log:
                log.write(private.read_text())
            private.unlink()
            print(f"{run.name}: rc {rc}, {wall_s:.0f} s wall on GPU {gpu}", flush=True)
        finally:
            free.put(gpu)

    threads = [threading.Thread(target=one, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


HOST_WATCH = Path(__file__).resolve().with_name("host_watch.py")


class HostWatcher:
    """``host_watch.py`` running beside the runs (``<out>/<machine>_host_watch.jsonl``), and the
    ``=== HOST`` line of a run from its rounds."""

    def __init__(self, out: Path, machine: str) -> None:
        from hwmodel.measured.host_references import references

        match = MACHINE_RE.match(machine)
        self.reference = references().for_gpu(match.group("gpu") if match else machine)
        self.path = out / f"{machine}_host_watch.jsonl"
        self._proc = subprocess.Popen([sys.executable, str(HOST_WATCH), "--out", str(self.path)],
                                      env={**os.environ, **SAFE_ENV}, cwd=REPO,
                                      start_new_session=True)

    def line(self, run: str, start_t: float, end_t: float) -> str:
        """The run's ``=== HOST`` line (``time.time()`` span), or one saying no round fell in
        it."""
        from scripts.measure.host_watch import read_watch, speed_during

        speed = (speed_during(read_watch(self.path), start_t, end_t, self.reference)
                 if self.path.exists() else None)
        if speed is None:
            return f"=== HOST {run}: no round of {self.path.name} inside the run"
        return speed.log_line(run, self.reference.name)

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def execute(runs: list[Run], out: Path, machine: str, budget_s: float | None = None,
            run_timeout_s: float = RUN_TIMEOUT_S, watcher: HostWatcher | None = None) -> None:
    """Run each in turn, appending its whole output to the log of its script. With
    ``budget_s``, no run starts after that many seconds and a run still going then is ended
    (rc 124): the whole call ends within the budget plus ``KILL_GRACE_S``. With ``watcher``,
    each run's log ends with the host's speed during it."""
    env = {**os.environ, **SAFE_ENV}
    started_s = time.monotonic()
    for run in runs:
        command = run.command()
        left_s = (budget_s - (time.monotonic() - started_s)) if budget_s is not None else None
        with open(log_path(out, machine, run), "a") as log:
            if left_s is not None and left_s < 1.0:
                log.write(f"=== SKIP {run.name}: budget of {budget_s:.0f} s spent\n")
                print(f"{run.name}: skipped, budget of {budget_s:.0f} s spent", flush=True)
                continue
            log.write(f"=== RUN {run.name}: {shlex.join(command)}\n")
            log.flush()
            start_s, start_t = time.monotonic(), time.time()
            timeout_s = run_timeout_s if left_s is None else min(run_timeout_s, left_s)
            rc = run_in_group(command, log, env, timeout_s)
            wall_s = time.monotonic() - start_s
            log.write(f"=== EXIT {run.name}: {rc}\n=== WALL {run.name}: {wall_s:.1f} s\n")
            host = watcher.line(run.name, start_t, time.time()) if watcher else ""
            if host:
                log.write(host + "\n")
            print(f"{run.name}: rc {rc}, {wall_s:.0f} s wall{'; ' + host[4:] if host else ''}",
                  flush=True)


PROFILE_RUNNER = Path(__file__).resolve().with_name("profile_run.py")
CALL_TIMER = Path(__file__).resolve().with_name("time_host_calls.py")


def _under(runs: list[Run], runner: Path, out_dir: Path, machine: str,
           *runner_args: str) -> list[Run]:
    """Each run (but the ``profile-`` ones) under
    ``runner --out <out_dir>/<machine>_<run> [runner_args] --``."""
    return [replace(r, runner=(str(runner), "--out", str(out_dir / f"{machine}_{r.name}"),
                               *runner_args, "--", *r.runner))
            if not r.name.startswith(PROFILE_PREFIX) else r for r in runs]


def plan_runs(suites: str, nproc: int, trace_dir: Path | None = None,
              machine: str = "", calls_dir: Path | None = None,
              time_modules: bool = False) -> list[Run]:
    """The runs of the comma-separated ``suites``, distributed ones on ``nproc`` GPUs; with
    ``trace_dir``, each under ``profile_run.py``, writing ``<trace_dir>/<machine>_<run>/``; with
    ``calls_dir``, under ``time_host_calls.py`` (each collective call's host time, unprofiled),
    writing ``<calls_dir>/<machine>_<run>/`` (``time_modules``: each module's forward too)."""
    runs = [r for name in suites.split(",") if name.strip() for r in suite(name.strip(), nproc)]
    if trace_dir is not None:
        runs = _under(runs, PROFILE_RUNNER, trace_dir, machine)
    if calls_dir is not None:
        runs = _under(runs, CALL_TIMER, calls_dir, machine,
                      *(["--modules"] if time_modules else []))
    return runs


def only_runs(runs: list[Run], names: list[str]) -> list[Run]:
    """The runs named, in the order named (a budget that runs out ends the last); a name no
    suite has is an error naming it."""
    unknown = sorted(set(names) - {r.name for r in runs})
    if unknown:
        raise ValueError(f"--only: no run named {', '.join(unknown)} in these suites "
                         f"(they have: {', '.join(r.name for r in runs)})")
    by_name = {r.name: r for r in runs}
    return [by_name[name] for name in dict.fromkeys(names)]


def describe_runs(runs: list[Run], out: Path, machine: str) -> str:
    """One line per run: its name, process count, log file and command."""
    lines = [f"machine {machine}: {len(runs)} runs, logs under {out}"]
    for run in runs:
        lines.append(f"  {run.name:<28} x{run.nproc}  {log_path(out, machine, run).name:<26} "
                     f"{shlex.join(run.command())}")
    return "\n".join(lines)


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
    host_speed: float | None = None
    """The host's speed during the run against its reference (``=== HOST``, ``--host-watch``;
    None where the run was not watched)."""

    @cached_property
    def profiled(self) -> bool:
        """Whether the run ran under the profiler (``profile_run.py``). None of its steps is a
        step measurement: the profiled ones time the profiler, and the ones after it still run
        slower where the host bounds the step (stored sessions of the same runs: GPT-2 124M b8
        on one H100 48.7 and 64.9 ms against 30.8-42.0 unprofiled, ResNet-50 b64 39.6 against
        28.2, DDP on four H200s 67.4 against 49.4; GPU-bound runs agree within 1%)."""
        return PROFILE_RUNNER.name in self.command

    def read(self, line: str) -> None:
        """Take in one line the script printed."""
        if match := STEP_RE.match(line):
            step = int(match.group(1))
            if step >= FIRST_MEASURED_STEP and not self.profiled:
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
        elif match := HOST_RE.match(line):
            current.host_speed = float(match.group(2))
        else:
            current.read(line)
    return results


def stored_runs(root: Path) -> Iterator[tuple[Path, Result]]:
    """Every run of every ``<machine>/*.log`` under ``root``, with the log it is in, in path
    order."""
    for machine_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for log in sorted(machine_dir.glob("*.log")):
            for result in parse_log(log, machine_dir.name):
                yield log, result


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
    import torch
    from torch.profiler import ProfilerActivity, profile


    on_gpu = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        common.run_as_main(script, args)
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
    for _, res in stored_runs(root):
        steps = f"{FIRST_MEASURED_STEP}..{FIRST_MEASURED_STEP + len(res.steps_ms) - 1}"
        rows.append(f"| {res.machine} | {res.name} | {res.rc} | "
                    f"{steps if res.steps_ms else 'none'} | {_median(res.steps_ms)} | "
                    f"{_median(res.gpu_ms)} | {_gib(res.peak_gib)} | "
                    f"{_gib(res.reserved_gib)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = common.parser(__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="run suites on this (GPU) machine")
    run.add_argument("--machine",
                     help="log-name prefix, e.g. h100x1; default: <gpu>x<count> of the "
                          "visible GPUs (nvidia-smi), e.g. h200x8")
    run.add_argument("--nproc", type=int,
                     help="processes (GPUs) of the distributed suites; default: the count in "
                          f"--machine, else every visible GPU, else {DEFAULT_DIST_NPROC}")
    run.add_argument("--suites", default="single",
                     help="comma list of: single, llama, families, dist, dist-more, frameworks, values, "
                          "parallel, profile")
    run.add_argument("--out", type=Path, required=True,
                     help="log folder; '{machine}' in it is replaced by the machine name")
    run.add_argument("--budget-s", type=float,
                     help="start no run after this many seconds and end one still running")
    run.add_argument("--run-timeout-s", type=float, default=RUN_TIMEOUT_S,
                     help="end a single run after this long (rc 124)")
    run.add_argument("--trace-dir", type=Path,
                     help="run each under profile_run.py (step 6 profiled), one Kineto trace "
                          "per rank in <trace-dir>/<machine>_<run>/; '{machine}' is replaced")
    run.add_argument("--only",
                     help="comma list of run names of the suites to keep (the others are left out)")
    run.add_argument("--calls-dir", type=Path,
                     help="run each under time_host_calls.py: each collective call's host time "
                          "per rank in <calls-dir>/<machine>_<run>/; '{machine}' is replaced")
    run.add_argument("--time-modules", action="store_true",
                     help="with --calls-dir: also time each nn.Module's forward")
    run.add_argument("--host-watch", action="store_true",
                     help="run host_watch.py beside the runs (one benchmark round every "
                          "0.25 s) and end each run's log with the host's speed during it")
    run.add_argument("--single-side-by-side", action="store_true",
                     help="run the one-GPU runs first, one per visible GPU at a time")
    run.add_argument("--dry-run", action="store_true",
                     help="print the runs, their process counts and commands; run nothing")
    verbs.add_parser("machine", help="print <gpu>x<count> of the visible GPUs")
    summary = verbs.add_parser("summarize", help="table from <root>/<machine>/*.log")
    summary.add_argument("root", type=Path)
    prof = verbs.add_parser("profile-script", help="run one script under torch.profiler")
    prof.add_argument("script", type=Path)
    prof.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.verb == "run":
        names = [] if args.machine and args.nproc else visible_gpu_names()
        machine = args.machine or (machine_name(names[0], len(names)) if names else None)
        if machine is None:
            parser.error("no GPU visible (nvidia-smi): give --machine, e.g. h200x8")
        nproc = args.nproc or machine_gpus(machine) or len(names) or DEFAULT_DIST_NPROC
        out = Path(str(args.out).replace("{machine}", machine))
        try:
            trace_dir = (Path(str(args.trace_dir).replace("{machine}", machine))
                         if args.trace_dir else None)
            calls_dir = (Path(str(args.calls_dir).replace("{machine}", machine))
                         if args.calls_dir else None)
            runs = plan_runs(args.suites, nproc, trace_dir, machine, calls_dir,
                             args.time_modules)
            if args.only:
                runs = only_runs(runs, args.only.split(","))
        except ValueError as exc:
            parser.error(str(exc))
        print(describe_runs(runs, out, machine), flush=True)
        if args.dry_run:
            return
        if names and runs and max(r.nproc for r in runs) > len(names):
            parser.error(f"runs need {max(r.nproc for r in runs)} GPUs, {len(names)} visible")
        out.mkdir(parents=True, exist_ok=True)
        write_env(out, machine)
        started_s = time.monotonic()
        if args.single_side_by_side and len(names) > 1:
            execute_single_gpu_runs([r for r in runs if r.nproc == 1], out, machine, len(names),
                                    args.budget_s, args.run_timeout_s)
            runs = [r for r in runs if r.nproc > 1]
        left_s = (args.budget_s - (time.monotonic() - started_s)) if args.budget_s else None
        watcher = HostWatcher(out, machine) if args.host_watch else None
        try:
            execute(runs, out, machine, left_s, args.run_timeout_s, watcher)
        finally:
            if watcher:
                watcher.stop()
    elif args.verb == "machine":
        names = visible_gpu_names()
        if not names:
            sys.exit("no GPU visible (nvidia-smi)")
        print(machine_name(names[0], len(names)))
    elif args.verb == "profile-script":
        profile_script(args.script, args.args)
    else:
        print(summarize(args.root))


if __name__ == "__main__":
    main()
