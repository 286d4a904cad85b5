"""Train GPT-2 with FSDP2: fully_shard per block and root, bf16 params, fp32 reduce-scatter.

The model is built on the meta device (no memory), sharded, then materialised with
``to_empty`` and initialised shard by shard, as large models must be.

  torchrun --nproc_per_node 2 gpt_fsdp2.py --activation-checkpointing
  torchrun --nproc_per_node 8 gpt_fsdp2.py --model gpt2-1558m --batch-size 8 --seq-len 1024
  torchrun --nproc_per_node 8 gpt_fsdp2.py --model llama3-8b --batch-size 2 --seq-len 8192 \
      --activation-checkpointing selective-op          # torchtitan's Llama 3.1 8B recipe
"""

from contextlib import AbstractContextManager, nullcontext

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from model import build_model
from train_utils import (apply_activation_checkpointing, build_parser, close_distributed,
                         compile_blocks, compute_dtype, init_distributed, make_loader,
                         make_optimizer, model_config, seq_len, train)


def main() -> None:
    parser = build_parser(__doc__.splitlines()[0])
    parser.add_argument("--sync-every-microbatch", action="store_true",
                        help="reduce-scatter gradients after every micro-batch (Composer's FSDP "
                             "does) instead of keeping unsharded gradients until the last")
    args = parser.parse_args()
    launch = init_distributed()
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    with torch.device("meta"):
        model = build_model(model_config(args))
    if args.activation_checkpointing:
        apply_activation_checkpointing(model, args.activation_checkpointing)
    if args.compile:
        compile_blocks(model)
    mp_policy = MixedPrecisionPolicy(param_dtype=compute_dtype(args, launch.device),
                                     reduce_dtype=torch.float32)
    for block in model.transformer.h:
        fully_shard(block, mp_policy=mp_policy)
    sharded = fully_shard(model, mp_policy=mp_policy)  # the same module, now an FSDPModule
    model.to_empty(device=launch.device)
    model.init_weights()
    if launch.is_main:
        print(f"{model.num_params() / 1e6:.1f}M parameters, FSDP2 over {launch.world_size} ranks",
              flush=True)

    def grad_sync(is_last: bool) -> AbstractContextManager[object]:
        sharded.set_requires_gradient_sync(is_last or args.sync_every_microbatch)
        return nullcontext()

    loader = make_loader(args, model.config, launch, dp_rank=launch.rank,
                         dp_size=launch.world_size)
    train(model, make_optimizer(model, args), loader, args, launch,
          flops_per_token=model.flops_per_token(seq_len(args)), dp_size=launch.world_size,
          grad_sync=grad_sync)
    close_distributed()


if __name__ == "__main__":
    main()
