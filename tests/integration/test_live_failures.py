"""A live run that goes wrong ends fast with a clear message, and reproducible mode repeats.

Each case runs a small script through the CLI on two simulated GPUs: a rank that raises, ranks
that disagree on a collective, a rank that never reaches one; then the same script twice in
reproducible mode.
"""

import json
import time
from pathlib import Path

import pytest

from phantora.cli import main

_PREAMBLE = """\
import torch, torch.distributed as dist
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
x = torch.ones(1024 * {size}, device="cuda")
"""


def _run(tmp_path: Path, body: str, *, size: str = "1", reproducible: bool = False,
         out: str = "out") -> int:
    (tmp_path / "train.py").write_text(_PREAMBLE.format(size=size) + body)
    (tmp_path / "s.yaml").write_text(
        "cluster: {gpu: h100, gpus_per_host: 2}\nworkload: {script: train.py}\n"
        f"simulation: {{reproducible: {str(reproducible).lower()}}}\n")
    return main([str(tmp_path / "s.yaml"), "--out", str(tmp_path / out)])


def test_a_rank_that_raises_stops_the_run_with_its_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    status = _run(tmp_path, "dist.all_reduce(x)\nif rank == 1:\n    raise ValueError('boom')\n"
                            "dist.all_reduce(x)\ntorch.cuda.synchronize()\n")
    out = capsys.readouterr().out
    assert status == 1
    assert "rank 1 failed" in out and "ValueError: boom" in out
    assert time.monotonic() - start < 60


def test_ranks_that_disagree_on_a_collective_are_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = _run(tmp_path, "dist.all_reduce(x)\ntorch.cuda.synchronize()\n", size="(rank + 1)")
    out = capsys.readouterr().out
    assert status == 1
    assert "collective mismatch in group" in out and "seq 0" in out


def test_a_collective_one_rank_never_issues_is_a_deadlock_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = _run(tmp_path, "if rank == 0:\n    dist.all_reduce(x)\ntorch.cuda.synchronize()\n")
    out = " ".join(capsys.readouterr().out.split())
    assert status == 1
    assert "deadlock" in out
    assert "issued by ranks [0]; not issued by ranks [1]" in out


def test_reproducible_mode_gives_identical_numbers(tmp_path: Path) -> None:
    body = ("for _ in range(3):\n    y = x * 2\n    dist.all_reduce(y)\n"
            "torch.cuda.synchronize()\nprint(time.perf_counter())\n")
    body = "import time\n" + body
    runs = []
    for name in ("a", "b"):
        assert _run(tmp_path, body, reproducible=True, out=name) == 0
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        log = (tmp_path / name / "ranks" / "rank0.log").read_text()
        # Simulated numbers only: the simulator's own CPU use is measured, not simulated.
        ranks = [{key: value for key, value in rank.items() if not key.endswith("_cpu_ns")}
                 for rank in summary["ranks"]]
        runs.append((ranks, summary["collectives"], log))
    assert runs[0] == runs[1]
