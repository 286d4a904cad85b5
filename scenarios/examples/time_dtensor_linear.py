"""Time the host side of a tensor-parallel MLP through DTensor, phase by phase, beside the same
MLP on plain tensors: what DTensor's dispatch adds per op.

  torchrun --nproc_per_node 1 time_dtensor_linear.py
  torchrun --nproc_per_node 2 time_dtensor_linear.py --width 1024

The MLP is ``Linear(w, 4w) -> gelu -> Linear(4w, w)``, the first ``ColwiseParallel``, the second
``RowwiseParallel`` (``parallelize_module``), as a transformer's MLP under tensor parallelism.
Shapes are small, so the GPU finishes each kernel long before the host issues the next and the
host bounds every phase. Per phase (forward, backward, optimizer step: ``torch.optim.AdamW``
with ``foreach=False``) rank 0 prints the median host time over ``--iters`` iterations, each
phase timed with ``time.perf_counter`` and no synchronisation inside it (the GPU is synchronised
between iterations). Then it counts, in one more iteration, the aten ops each phase dispatches
(a counting dispatch mode, outside the timed iterations) and prints the time per op::

    dtensor forward: 812.3 us, 14 ops, 58.0 us/op

One rank gives a one-rank mesh: DTensor runs its full dispatch path (sharding propagation,
redistribution checks, wrapping) with no communication.
"""

import argparse
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched under it (DTensor's inner ops on local tensors too)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def mlp(width: int, dev: torch.device) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                         nn.Linear(4 * width, width)).to(dev)


def phases(model: nn.Module, x: torch.Tensor) -> dict[str, Callable[[], object]]:
    """The phases of one iteration, in order; each returns what the next needs."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    state: dict[str, torch.Tensor] = {}

    def forward() -> None:
        state["loss"] = model(x).float().pow(2).mean()

    def backward() -> None:
        state["loss"].backward()

    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {"forward": forward, "backward": backward, "optimizer": step}


def time_phases(name: str, model: nn.Module, x: torch.Tensor, iters: int,
                warmup: int) -> dict[str, float]:
    """Median host us per phase over ``iters`` iterations after ``warmup``."""
    steps = phases(model, x)
    times: dict[str, list[float]] = {phase: [] for phase in steps}
    for i in range(warmup + iters):
        torch.cuda.synchronize()
        for phase, run in steps.items():
            t0 = time.perf_counter()
            run()
            t1 = time.perf_counter()
            if i >= warmup:
                times[phase].append((t1 - t0) * 1e6)
    counts: dict[str, int] = {}
    for phase, run in steps.items():
        try:
            with OpCounter() as counter:
                run()
            counts[phase] = sum(counter.ops.values())
        except Exception as exc:  # a build whose subclass dispatch refuses the mode: no count
            print(f"{name} {phase}: ops not counted ({type(exc).__name__}: {exc})", flush=True)
            counts[phase] = 0
    torch.cuda.synchronize()
    medians = {phase: statistics.median(ts) for phase, ts in times.items()}
    if dist.get_rank() == 0:
        for phase, us in medians.items():
            print(f"{name} {phase}: {us:.1f} us, {counts[phase]} ops, "
                  f"{us / max(1, counts[phase]):.1f} us/op", flush=True)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    dist.init_process_group("nccl")
    local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    x = torch.randn(args.batch, args.width, device=dev)
    time_phases("plain", mlp(args.width, dev), x, args.iters, args.warmup)
    mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    tp = parallelize_module(mlp(args.width, dev), mesh,
                            {"0": ColwiseParallel(), "2": RowwiseParallel()})
    time_phases("dtensor", tp, x, args.iters, args.warmup)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
