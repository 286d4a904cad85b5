"""Time the host's calls that wait on or mark the GPU, and an op and a collective call between
two synchronisations, as a user's micro-benchmark does.

  torchrun --nproc_per_node 1 time_sync_calls.py

Rank 0 prints, in microseconds (median over ``--iters``):

* ``loop <name>``: ``synchronize(); t0; <name>; synchronize(); t1`` for nothing, an in-place add
  on 1 MiB and an all_reduce of 1 MiB: what the host spends around one call when it waits for
  the GPU after each;
* ``hot <name>``: one call of ``torch.cuda.synchronize()`` (GPU idle), ``Event.record()``,
  ``Event.query()`` and ``Event.synchronize()`` of a completed event, and
  ``Stream.synchronize()``, in a loop of ``--calls``; and a collective call on 1 MiB through
  ``torch.distributed`` and through the functional collectives DTensor issues
  (``torch.ops._c10d_functional.all_reduce`` then ``wait_tensor``).
"""

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist


def loop(name: str, call: Callable[[], object], iters: int) -> None:
    times = []
    for i in range(iters + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        if i >= 3:
            times.append((t1 - t0) * 1e6)
    print(f"loop {name}: {statistics.median(times):.1f} us", flush=True)


def hot(name: str, call: Callable[[], object], calls: int, iters: int) -> None:
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    print(f"hot {name}: {statistics.median(times):.2f} us", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    x = torch.ones(2**19, device="cuda", dtype=torch.bfloat16)
    loop("nothing", lambda: None, args.iters)
    loop("add_ 1 MiB", lambda: x.add_(1), args.iters)
    loop("all_reduce 1 MiB", lambda: dist.all_reduce(x), args.iters)
    done = torch.cuda.Event()
    done.record()
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream()
    hot("synchronize", torch.cuda.synchronize, args.calls, args.iters)
    hot("Stream.synchronize", stream.synchronize, args.calls, args.iters)
    hot("Event.query", done.query, args.calls, args.iters)
    hot("Event.synchronize", done.synchronize, args.calls, args.iters)
    mark = torch.cuda.Event()
    hot("Event.record", mark.record, args.calls, args.iters)
    torch.cuda.synchronize()
    hot("all_reduce 1 MiB", lambda: dist.all_reduce(x), args.calls, args.iters)
    torch.cuda.synchronize()
    group = dist.group.WORLD.group_name
    functional = torch.ops._c10d_functional
    hot("functional all_reduce 1 MiB",
        lambda: functional.wait_tensor(functional.all_reduce(x, "sum", group)),
        args.calls, args.iters)
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
