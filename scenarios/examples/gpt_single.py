"""Train GPT-2 on one GPU (nanoGPT style): bf16 autocast, fused AdamW, gradient accumulation.

  python gpt_single.py                                    # tiny model, a few seconds on a CPU
  python gpt_single.py --model gpt2-124m --batch-size 8 --seq-len 1024 --compile
  python gpt_single.py --model llama-1b --batch-size 4 --seq-len 2048   # Llama-style decoder
"""

import torch

from model import build_model
from train_utils import (apply_activation_checkpointing, build_parser, compile_blocks,
                         compute_dtype, init_single, make_loader, make_optimizer, model_config,
                         seq_len, train)


def main() -> None:
    args = build_parser(__doc__.splitlines()[0]).parse_args()
    launch = init_single()
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    model = build_model(model_config(args)).to(launch.device)
    print(f"{model.num_params() / 1e6:.1f}M parameters on {launch.device}", flush=True)
    if args.activation_checkpointing:
        apply_activation_checkpointing(model, args.activation_checkpointing)
    if args.compile:
        compile_blocks(model, args.compile_mode)
    train(model, make_optimizer(model, args),
          make_loader(args, model.config, launch, dp_rank=0, dp_size=1), args, launch,
          flops_per_token=model.flops_per_token(seq_len(args)),
          autocast_dtype=compute_dtype(args, launch.device))


if __name__ == "__main__":
    main()
