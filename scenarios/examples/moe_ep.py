"""Train a mixture-of-experts Llama with expert parallelism (experts split over the ranks).

Every rank is also data-parallel: it trains on its own batches, sends each token to the rank
of its expert (variable-size ``all_to_all_single``) and averages the gradients of everything
but the experts over all ranks. One process (``python moe_ep.py``) is a single-GPU MoE with
no exchange at all.

  python moe_ep.py                                         # tiny model, one process
  torchrun --nproc_per_node 2 moe_ep.py                    # 4 experts per rank
  python moe_ep.py --model moe-600m --batch-size 4 --seq-len 2048 --routing balanced
"""

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch
import torch.distributed as dist
from torch import nn

from moe_model import MOE_PRESETS, ROUTINGS, ExpertParallel, MoEConfig, MoELlama
from train_utils import (build_parser, clip_grad_norm_across, close_distributed, compute_dtype,
                         init_launch, make_loader, make_optimizer, model_config, seq_len, train)


def moe_config(args: argparse.Namespace) -> MoEConfig:
    """The ``--model`` preset with the common overrides and ``--n-experts``/``--top-k``."""
    overrides = {"n_experts": args.n_experts, "top_k": args.top_k}
    return replace(model_config(args), **{k: v for k, v in overrides.items() if v is not None})


@torch.no_grad()
def average_dense_gradients(model: MoELlama, world_size: int) -> None:
    """Data-parallel gradients: the dense parameters' averaged over the ranks (one flat
    all-reduce). An expert's gradient already sums what every rank's tokens contributed
    through it, so it is divided by the rank count to be the gradient of the global mean
    loss, as the dense ones are."""
    grads = [p.grad for p in model.dense_parameters() if p.grad is not None]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.AVG)
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()
    torch._foreach_div_([p.grad for p in model.expert_parameters() if p.grad is not None],
                        world_size)


def main() -> None:
    parser = build_parser(__doc__.splitlines()[0], MOE_PRESETS)
    parser.add_argument("--routing", choices=ROUTINGS, default="learned",
                        help="learned: the router's top-k; balanced: round-robin over the "
                             "experts, whatever the router says (even counts)")
    parser.add_argument("--all-to-all", choices=["nn", "functional"], default="nn",
                        help="token exchange: torch.distributed.nn.functional."
                             "all_to_all_single, or the functional collectives' "
                             "all_to_all_single_autograd (torchtitan's)")
    parser.add_argument("--n-experts", type=int, help="experts per layer (preset: 8)")
    parser.add_argument("--top-k", type=int, help="experts per token (preset: 2)")
    args = parser.parse_args()
    launch = init_launch()
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")
    config = moe_config(args)
    ep = ExpertParallel(launch.rank, launch.world_size, all_to_all=args.all_to_all)
    model = MoELlama(config, ep, args.routing).to(launch.device)
    if launch.is_main:
        print(f"{model.num_params() / 1e6:.1f}M parameters ({model.active_params() / 1e6:.1f}M "
              f"active), {config.n_experts} experts top-{config.top_k}, {args.routing} routing, "
              f"expert parallel over {launch.world_size} ranks", flush=True)

    @contextmanager
    def grad_sync(is_last: bool) -> Iterator[None]:
        yield
        if is_last and launch.world_size > 1:
            average_dense_gradients(model, launch.world_size)

    def clip_grads(module: nn.Module, max_norm: float) -> torch.Tensor:
        return clip_grad_norm_across(model.expert_parameters(), model.dense_parameters(),
                                     max_norm)

    loader = make_loader(args, config, launch, dp_rank=launch.rank, dp_size=launch.world_size)
    train(model, make_optimizer(model, args), loader, args, launch,
          flops_per_token=model.flops_per_token(seq_len(args)), dp_size=launch.world_size,
          autocast_dtype=compute_dtype(args, launch.device), grad_sync=grad_sync,
          clip_grads=clip_grads)
    if launch.world_size > 1:
        close_distributed()


if __name__ == "__main__":
    main()
