"""Time collectives the way a user's quick benchmark does: the host waits for each call.

  torchrun --nproc_per_node 2 time_collectives.py
  torchrun --nproc_per_node 2 time_collectives.py --ops all_reduce --min-mib 1 --max-mib 16
  torchrun --nproc_per_node 1 time_collectives.py --min-kib 64 --max-mib 16 --factor 4

Per op and size (1 MiB to 1 GiB by default, times ``--factor``): ``--warmup`` untimed calls, then
``--iters`` calls each bracketed as ``synchronize; t0; collective; synchronize; t1``; rank 0
prints the median time per call in microseconds (host launch, GPU time and the sync's return
included, as a real host measures it).
"""

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
KIB = 2**10
MIB = 2**20


def issue(op: str, buf: torch.Tensor, out: torch.Tensor) -> None:
    if op == "all_reduce":
        dist.all_reduce(buf)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, buf)
    elif op == "reduce_scatter":
        dist.reduce_scatter_tensor(buf, out)
    elif op == "all_to_all":
        dist.all_to_all_single(out, buf)
    else:
        dist.broadcast(buf, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--min-mib", type=int, default=1)
    parser.add_argument("--min-kib", type=int, help="the smallest size in KiB (overrides --min-mib)")
    parser.add_argument("--max-mib", type=int, default=1024)
    parser.add_argument("--factor", type=int, default=2, help="each size is this times the last")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=8)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    for op in args.ops.split(","):
        if op not in OPS:
            raise SystemExit(f"--ops: unknown op {op!r}; choose from {', '.join(OPS)}")
        size = args.min_kib * KIB if args.min_kib else args.min_mib * MIB
        while size <= args.max_mib * MIB:
            # nccl-tests' convention: the size is the largest buffer (all_gather's output,
            # reduce_scatter's input)
            numel = size // 2
            small = numel // world if op in ("all_gather", "reduce_scatter") else numel
            buf = torch.ones(small, device=dev, dtype=torch.bfloat16)
            out = torch.empty(numel, device=dev, dtype=torch.bfloat16)
            times = []
            for i in range(args.warmup + args.iters):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                issue(op, buf, out)
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                if i >= args.warmup:
                    times.append((t1 - t0) * 1e6)
            if rank == 0:
                label = f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"
                print(f"{op} {label}: {statistics.median(times):.1f} us", flush=True)
            del buf, out
            size *= args.factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
