"""Train GPT-2 with DeepSpeed ZeRO (stage 1, 2 or 3) through ``deepspeed.initialize``.

DeepSpeed's own pieces throughout, as its getting-started guide puts them together:
``deepspeed.init_distributed``, a ``ds_config`` built from the flags (bf16, ZeRO stage,
gradient clipping, micro-batch and gradient accumulation), DeepSpeed's default AdamW
(``FusedAdam``, a CUDA extension JIT-built at first use; ``--optimizer foreach`` or
``for-loop`` takes ``torch.optim.AdamW`` instead, ``"torch_adam": true``), and the engine's
``backward`` and ``step`` per micro-batch. The model is built whole on every GPU and
partitioned by ``deepspeed.initialize`` (ZeRO-3: parameters too; a model that does not fit one
GPU would be built under ``deepspeed.zero.Init``). Needs CUDA GPUs.

  torchrun --nproc_per_node 2 deepspeed_gpt.py --zero-stage 2
  deepspeed --num_gpus 8 deepspeed_gpt.py --zero-stage 3 --model gpt2-1558m --seq-len 1024

Rank 0 prints the step lines of the other examples (``train_utils.print_step``; the gradient
norm is the engine's, before clipping), every rank its peak memory.
"""

import argparse
import os
from typing import Any

import deepspeed
import torch
import torch.distributed as dist

from model import build_model
from train_utils import (ADAMW_BETAS, ADAMW_EPS, Launch, StepReport, StepTimer, build_parser,
                         close_distributed, compute_dtype, decay_groups, make_loader,
                         model_config, print_run_end, print_step, scheduled_steps, seq_len)

NOT_HERE = ("compile", "activation_checkpointing")
"""Flags of the shared parser this script does not implement (DeepSpeed has its own)."""


def parse_args() -> argparse.Namespace:
    parser = build_parser(__doc__.splitlines()[0])
    parser.add_argument("--zero-stage", type=int, choices=[1, 2, 3], default=2)
    parser.add_argument("--local_rank", type=int, default=-1,
                        help="passed by the deepspeed launcher (LOCAL_RANK is read instead)")
    args = parser.parse_args()
    for flag in NOT_HERE:
        if getattr(args, flag):
            parser.error(f"--{flag.replace('_', '-')} is not implemented by this script")
    return args


def ds_config(args: argparse.Namespace, dtype: torch.dtype) -> dict[str, Any]:
    """DeepSpeed's configuration for these flags (``--optimizer fused``: DeepSpeed's FusedAdam;
    otherwise ``torch.optim.AdamW``, with or without foreach)."""
    adamw: dict[str, Any] = {"lr": args.lr, "betas": list(ADAMW_BETAS), "eps": ADAMW_EPS,
                             "weight_decay": args.weight_decay}
    if args.optimizer != "fused":
        adamw.update(torch_adam=True, foreach=args.optimizer == "foreach")
    return {
        "train_micro_batch_size_per_gpu": args.batch_size,
        "gradient_accumulation_steps": args.grad_accum,
        "gradient_clipping": args.grad_clip,
        "bf16": {"enabled": dtype == torch.bfloat16},
        "zero_optimization": {"stage": args.zero_stage},
        "optimizer": {"type": "AdamW", "params": adamw},
        "steps_per_print": args.steps + 1,  # the step lines below say it instead
    }


def main() -> None:
    args = parse_args()
    deepspeed.init_distributed(dist_backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    launch = Launch(rank=dist.get_rank(), world_size=dist.get_world_size(),
                    local_rank=local_rank, device=device)
    torch.manual_seed(args.seed)
    dtype = compute_dtype(args, device)
    model = build_model(model_config(args)).to(device)
    if launch.is_main:
        print(f"{model.num_params() / 1e6:.1f}M parameters, DeepSpeed ZeRO-{args.zero_stage} "
              f"over {launch.world_size} ranks", flush=True)
    flops_per_token = model.flops_per_token(seq_len(args))
    engine, optimizer, _, _ = deepspeed.initialize(
        model=model, model_parameters=decay_groups(model, args.weight_decay),
        config=ds_config(args, dtype))
    loader = make_loader(args, model.config, launch, dp_rank=launch.rank,
                         dp_size=launch.world_size)
    batches = iter(loader)
    tokens_per_step = args.batch_size * seq_len(args) * args.grad_accum * launch.world_size
    timer = StepTimer(device)
    step_ms: list[float] = []
    for step, lr in scheduled_steps(args, optimizer):
        timer.start()
        loss_sum = torch.zeros((), device=device)
        for _ in range(args.grad_accum):
            inputs, targets = next(batches)
            _, loss = engine(inputs.to(device, non_blocking=True),
                             targets.to(device, non_blocking=True))
            engine.backward(loss)  # scales by 1 / grad_accum
            engine.step()  # clips and steps at the last micro-batch only
            loss_sum += loss.detach().float() / args.grad_accum
        dist.all_reduce(loss_sum, op=dist.ReduceOp.AVG)
        wall_ms, gpu_ms = timer.stop()
        step_ms.append(wall_ms)
        if launch.is_main:
            norm = float(engine.get_global_grad_norm())
            print_step(step, args, StepReport(loss_sum.item(), norm, lr, wall_ms, gpu_ms),
                       tokens_per_step=tokens_per_step, flops_per_token=flops_per_token,
                       world_size=launch.world_size)
    print_run_end(launch, step_ms, tokens_per_step)
    close_distributed()


if __name__ == "__main__":
    main()
