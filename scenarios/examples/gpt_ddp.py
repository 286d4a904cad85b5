"""Train GPT-2 with DistributedDataParallel; gradient accumulation skips all-reduces via no_sync.

  torchrun --nproc_per_node 2 gpt_ddp.py --grad-accum 2
  torchrun --nproc_per_node 8 gpt_ddp.py --model gpt2-124m --batch-size 8 --seq-len 1024
"""

from contextlib import AbstractContextManager, nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from model import build_model
from train_utils import (apply_activation_checkpointing, build_parser, close_distributed,
                         compile_blocks, compute_dtype, init_distributed, make_loader,
                         make_optimizer, model_config, seq_len, train)


def main() -> None:
    args = build_parser(__doc__.splitlines()[0]).parse_args()
    launch = init_distributed()
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    model = build_model(model_config(args)).to(launch.device)
    if launch.is_main:
        print(f"{model.num_params() / 1e6:.1f}M parameters, DDP over {launch.world_size} ranks",
              flush=True)
    if args.activation_checkpointing:
        apply_activation_checkpointing(model, args.activation_checkpointing)
    if args.compile:
        compile_blocks(model)
    device_ids = [launch.local_rank] if launch.device.type == "cuda" else None
    ddp_model = DDP(model, device_ids=device_ids)

    def grad_sync(is_last: bool) -> AbstractContextManager[object]:
        return nullcontext() if is_last else ddp_model.no_sync()

    loader = make_loader(args, model.config, launch, dp_rank=launch.rank,
                         dp_size=launch.world_size)
    train(ddp_model, make_optimizer(ddp_model, args), loader, args, launch,
          flops_per_token=model.flops_per_token(seq_len(args)), dp_size=launch.world_size,
          autocast_dtype=compute_dtype(args, launch.device), grad_sync=grad_sync)
    close_distributed()


if __name__ == "__main__":
    main()
