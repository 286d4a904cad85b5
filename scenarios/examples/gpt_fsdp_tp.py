"""Train GPT-2 with 2-D parallelism: tensor parallel inside a group, FSDP2 across groups.

A ``(dp, tp)`` device mesh: ranks of one ``tp`` row split every layer as in ``gpt_tp.py``
(put them on one host, where NVLink carries the per-layer traffic); the ``dp`` columns shard
the parameters with ``fully_shard`` and see different batches. Order as in torchtitan:
tensor parallel, activation checkpointing, compile, then FSDP.

  torchrun --nproc_per_node 4 gpt_fsdp_tp.py --tp 2
  torchrun --nnodes 2 --nproc_per_node 8 gpt_fsdp_tp.py --tp 8 --model gpt2-1558m ...
"""

from contextlib import AbstractContextManager, nullcontext

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import loss_parallel

from gpt_tp import apply_tensor_parallel, check_divisible
from model import GPT
from train_utils import (apply_activation_checkpointing, build_parser, close_distributed,
                         compile_blocks, compute_dtype, init_distributed, make_loader,
                         make_optimizer, model_config, seq_len, train)


def main() -> None:
    parser = build_parser(__doc__.splitlines()[0])
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel size (ranks per row)")
    args = parser.parse_args()
    launch = init_distributed()
    if launch.world_size % args.tp:
        raise SystemExit(f"world size ({launch.world_size}) must be a multiple of --tp ({args.tp})")
    dp = launch.world_size // args.tp
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    config = model_config(args)
    check_divisible(config, seq_len(args), args.tp)
    mesh = init_device_mesh(launch.device.type, (dp, args.tp), mesh_dim_names=("dp", "tp"))
    with torch.device("meta"):
        model = GPT(config)
    apply_tensor_parallel(model, mesh["tp"])
    if args.activation_checkpointing:
        apply_activation_checkpointing(model, args.activation_checkpointing)
    if args.compile:
        compile_blocks(model)
    mp_policy = MixedPrecisionPolicy(param_dtype=compute_dtype(args, launch.device),
                                     reduce_dtype=torch.float32)
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh["dp"], mp_policy=mp_policy)
    sharded = fully_shard(model, mesh=mesh["dp"], mp_policy=mp_policy)  # same module
    model.to_empty(device=launch.device)
    model.init_weights()
    if launch.is_main:
        print(f"{model.num_params() / 1e6:.1f}M parameters, FSDP2 {dp} x tensor parallel "
              f"{args.tp}", flush=True)

    def grad_sync(is_last: bool) -> AbstractContextManager[object]:
        sharded.set_requires_gradient_sync(is_last)
        return nullcontext()

    dp_mesh = mesh["dp"]
    loader = make_loader(args, config, launch, dp_rank=dp_mesh.get_local_rank(), dp_size=dp)
    train(model, make_optimizer(model, args), loader, args, launch,
          flops_per_token=model.flops_per_token(seq_len(args)), dp_size=dp,
          dp_group=dp_mesh.get_group(), grad_sync=grad_sync, loss_context=loss_parallel)
    close_distributed()


if __name__ == "__main__":
    main()
