"""Uneven, rank-dependent splits through the autograd ``all_to_all_single`` run live on two
simulated GPUs, forward and backward (issue 33: expert-parallel MoE stopped with a false
"NCCL would hang here" where the per-rank totals of an all_to_allv differed).

The script exchanges with ``torch.distributed.nn.functional.all_to_all_single`` three times,
as MoE dispatch and combine do: split matrix ``A`` (both ranks send the same row), its return
exchange ``A^T`` (each rank's own row even, the totals 4 and 8 rows), and ``B`` (rank 0's row
even, rank 1's not); backward runs each again with the splits swapped.
"""

import json
from pathlib import Path

import pytest

from phantora.cli import main

_SCRIPT = """\
import torch, torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
WIDTH = 1024
A = [[2, 4], [2, 4]]
B = {b}

def exchange(x, matrix):
    send = matrix[rank]
    recv = [row[rank] for row in matrix]
    out = x.new_empty((sum(recv), WIDTH))
    return dist_fn.all_to_all_single(out, x, recv, send)

x = torch.randn(6, WIDTH, device="cuda", requires_grad=True)
dispatched = exchange(x, A)
combined = exchange(dispatched, [list(col) for col in zip(*A)])
y = exchange(combined, B)
y.sum().backward()
torch.cuda.synchronize()
print("shapes", rank, tuple(dispatched.shape), tuple(y.shape), tuple(x.grad.shape), flush=True)
"""
_ROW_BYTES = 1024 * 4
"""One row of the exchanged tensors (float32)."""


def _run(tmp_path: Path, b: str) -> int:
    (tmp_path / "train.py").write_text(_SCRIPT.format(b=b))
    (tmp_path / "s.yaml").write_text(
        "cluster: {gpu: h100, gpus_per_host: 2}\nworkload: {script: train.py}\n")
    return main([str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out")])


def test_uneven_splits_run_forward_and_backward_as_all_to_allv(tmp_path: Path) -> None:
    assert _run(tmp_path, "[[3, 3], [1, 5]]") == 0
    logs = [(tmp_path / "out" / "ranks" / f"rank{r}.log").read_text() for r in (0, 1)]
    assert "shapes 0 (4, 1024) (4, 1024) (6, 1024)" in logs[0]
    assert "shapes 1 (8, 1024) (8, 1024) (6, 1024)" in logs[1]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    exchanges = [(c["op"], c["bytes"] // _ROW_BYTES, c["count"]) for c in summary["collectives"]]
    # nccl-tests' size, the largest row: A, B and A again in backward (6 rows); A^T, and in
    # backward B^T and A^T (8 rows)
    assert sorted(exchanges) == [("all_to_allv", 6, 3), ("all_to_allv", 8, 3)]


def test_splits_the_members_disagree_on_are_reported_with_their_numbers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """B's receive column on rank 1 does not add up to what rank 0 sends it."""
    assert _run(tmp_path, "[[3, 3], [1, 5]] if rank == 0 else [[4, 2], [1, 5]]") == 1
    out = " ".join(capsys.readouterr().out.split())
    assert (f"all-to-all mismatch in group '0' seq 2: rank 0 sends {3 * _ROW_BYTES} bytes to "
            f"rank 1, which expects {2 * _ROW_BYTES} bytes from it") in out
