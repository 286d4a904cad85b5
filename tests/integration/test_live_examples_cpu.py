"""The example training scripts are known good: each scenario's script and args run for real
under torchrun on this CPU (gloo, fp32), the way a user would run them on GPUs."""

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.live_examples import (ROOT, ExampleScenario, example_scenarios,
                                             parse_steps, peak_memory_line)

EXAMPLES = ROOT / "scenarios" / "examples"


def _rank_log(log_dir: Path, rank: int, stream: str) -> str:
    """torchrun's ``--log-dir`` file for one rank's stdout or stderr ("" if never written)."""
    paths = sorted(log_dir.glob(f"*/attempt_0/{rank}/{stream}.log"))
    return paths[0].read_text() if paths else ""


GLOO_TEARDOWN_ABORT = "terminate called without an active exception"
"""How gloo on a CPU sometimes aborts a rank at interpreter exit, after the script has finished
and destroyed its process group (seen once in CI, in the TP example): such a run is
tried once more, any other failure fails the test."""


def torchrun(script: str, args: list[str], nproc: int, log_dir: Path,
             env: dict[str, str] | None = None, timeout_s: int = 300) -> list[str]:
    """Run ``script`` like ``torchrun --standalone --nproc_per_node nproc``; return what each
    rank printed (torchrun's per-rank log files: the merged console interleaves lines)."""
    for attempt in range(2):
        attempt_dir = log_dir / f"try{attempt}"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={nproc}", f"--log-dir={attempt_dir}", "--redirects=3",
                   str(EXAMPLES / script), *args]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, **(env or {})}, cwd=ROOT)
        stdout = [_rank_log(attempt_dir, rank, "stdout") for rank in range(nproc)]
        if proc.returncode == 0:
            return stdout
        stderr = "".join(_rank_log(attempt_dir, rank, "stderr") for rank in range(nproc))
        if GLOO_TEARDOWN_ABORT not in stderr:
            break
    pytest.fail(f"{script} exited with {proc.returncode}:\n{''.join(stdout)}\n"
                f"{stderr[-4000:]}\n{proc.stderr[-2000:]}")


TorchrunOnce = Callable[[str, list[str], int, dict[str, str]], list[str]]


@pytest.fixture(scope="module")
def torchrun_once(tmp_path_factory: pytest.TempPathFactory) -> TorchrunOnce:
    """:func:`torchrun`, run once in this module per script, arguments, ranks and environment
    (the tensor-parallel comparison's parallel run is the TP scenario's)."""
    runs: dict[tuple[str, tuple[str, ...], int, tuple[tuple[str, str], ...]], list[str]] = {}

    def run(script: str, args: list[str], nproc: int, env: dict[str, str]) -> list[str]:
        key = (script, tuple(args), nproc, tuple(sorted(env.items())))
        if key not in runs:
            runs[key] = torchrun(script, args, nproc, tmp_path_factory.mktemp("torchrun"), env)
        return runs[key]
    return run


@pytest.mark.slow
@pytest.mark.parametrize("example", example_scenarios(), ids=lambda e: e.name)
def test_scenario_script_runs_under_torchrun(example: ExampleScenario,
                                             torchrun_once: TorchrunOnce) -> None:
    logs = torchrun_once(example.script.name, example.args, example.world_size, example.env)
    steps = parse_steps(logs[0])
    expected_steps = int(example.args[example.args.index("--steps") + 1])
    assert [s.step for s in steps] == list(range(1, expected_steps + 1))
    for step in steps:
        assert 6.0 < step.loss < 8.0, "random tokens: loss starts near ln(vocab) = 6.93"
        assert step.norm > 0 and step.wall_ms > 0
        assert step.gpu_ms is None  # a CPU has no CUDA events
    for rank, log in enumerate(logs):
        assert peak_memory_line(log, rank) == "n/a on cpu"
        assert rank == 0 or not parse_steps(log), "only rank 0 prints steps"


@pytest.mark.slow
def test_tensor_parallel_trains_exactly_like_one_device(torchrun_once: TorchrunOnce) -> None:
    """Same seed, same batches: TP over 2 ranks must reproduce the single-device losses."""
    args, env = ["--steps", "3", "--num-workers", "0"], {"OMP_NUM_THREADS": "1"}
    single = parse_steps(torchrun_once("gpt_single.py", args, 1, env)[0])
    parallel = parse_steps(torchrun_once("gpt_tp.py", args, 2, env)[0])
    assert len(single) == len(parallel) == 3
    for one, tp in zip(single, parallel, strict=True):
        assert tp.loss == pytest.approx(one.loss, abs=2e-4)
        assert tp.norm == pytest.approx(one.norm, abs=2e-4)
    assert single[0].loss != single[-1].loss  # the steps did train
