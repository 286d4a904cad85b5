"""Host CPU time of issuing one GPU op on a real GPU host: what the simulator charges per launch.

  # on a GPU machine with 2 GPUs:
  python3 -m torch.distributed.run --standalone --nproc_per_node 2 scripts/measure_host_ops.py

Each case issues the op ``CALLS`` times back to back and reports the host time per call
(``time.perf_counter`` around the loop, the GPU kept busy behind a ``torch.cuda._sleep`` so the
host never waits for it), the best of ``ROUNDS``. Rank 0 prints one JSON line per case. The
collectives are asynchronous (``async_op=True``, as DDP and FSDP2 issue them); both ranks issue
the same sequence so NCCL never blocks the host.
"""

import json
import os
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

CALLS = 200
ROUNDS = 5
SLEEP_CYCLES = 2_000_000_000
"""GPU cycles the stream sleeps first (~1 s): longer than any loop below takes on the host."""


def host_us_per_call(op: Callable[[], object]) -> float:
    for _ in range(10):
        op()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(ROUNDS):
        torch.cuda._sleep(SLEEP_CYCLES)
        start = time.perf_counter()
        for _ in range(CALLS):
            op()
        best = min(best, (time.perf_counter() - start) / CALLS * 1e6)
        torch.cuda.synchronize()
    return best


def main() -> None:
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    small = torch.ones(16, device=dev)
    grads = torch.ones(4 * 2**20, device=dev)
    shards = torch.empty(2 * 2**20, device=dev)
    q = torch.randn(8, 12, 1024, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    grad_out = torch.randn_like(out)
    a = torch.randn(4096, 768, device=dev, dtype=torch.bfloat16)
    w = torch.randn(2304, 768, device=dev, dtype=torch.bfloat16)
    cases: dict[str, Callable[[], object]] = {
        "add_ (16 floats)": lambda: small.add_(small),
        "linear bf16 4096x768x2304": lambda: F.linear(a, w),
        "all_reduce async (16 MiB)": lambda: dist.all_reduce(grads, async_op=True),
        "reduce_scatter_tensor async": lambda: dist.reduce_scatter_tensor(shards, grads,
                                                                          async_op=True),
        "all_gather_into_tensor async": lambda: dist.all_gather_into_tensor(grads, shards,
                                                                            async_op=True),
        "sdpa forward causal b8 h12 s1024 d64": lambda: F.scaled_dot_product_attention(
            q, q, q, is_causal=True),
        "sdpa forward+backward (autograd.grad)": lambda: torch.autograd.grad(
            F.scaled_dot_product_attention(q, q, q, is_causal=True), q, grad_out),
    }
    for name, op in cases.items():
        us = host_us_per_call(op)
        if rank == 0:
            print(json.dumps({"case": name, "host_us_per_call": round(us, 2),
                              "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}),
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
