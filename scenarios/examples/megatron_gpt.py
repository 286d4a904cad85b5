"""Train a Megatron-core GPT with tensor, sequence and pipeline parallelism.

Megatron's own pieces throughout, as its ``pretrain_gpt.py`` puts them together:
``GPTModel`` from the local layer spec (Megatron-core modules only, no Transformer Engine or
Apex), ``parallel_state`` for the process groups (data parallel over the ranks left after
tensor x pipeline), bf16 through ``Float16Module``, Megatron's DDP and distributed optimizer,
``get_forward_backward_func()`` for the schedule (1F1B over the pipeline stages, with
micro-batches) and ``OptimizerParamScheduler`` for the learning rate. Needs CUDA GPUs.

  torchrun --nproc_per_node 2 megatron_gpt.py --tp 2 --sequence-parallel
  torchrun --nproc_per_node 4 megatron_gpt.py --tp 2 --pp 2 --micro-batches 4
  torchrun --nproc_per_node 8 megatron_gpt.py --tp 2 --pp 2 --num-layers 24 \\
      --hidden-size 2048 --num-attention-heads 16 --vocab-size 50304 --seq-len 2048 \\
      --micro-batches 8 --sequence-parallel
  torchrun --nproc_per_node 8 megatron_gpt.py --tp 8 --sequence-parallel --llama \\
      --num-layers 12 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 \\
      --num-query-groups 8 --vocab-size 128256 --seq-len 4096 --batch-size 1 \\
      --micro-batches 4 --attention flash     # Llama 3 70B's layers, as pretrain_gpt.py

Set ``CUDA_DEVICE_MAX_CONNECTIONS=1``, as Megatron asks. Rank 0 prints the step lines of the
other examples (``train_utils.print_step``); the loss comes from the last pipeline stage.
"""

import argparse
from collections.abc import Callable, Iterator
from dataclasses import replace

import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.distributed import (DistributedDataParallel, DistributedDataParallelConfig,
                                       finalize_model_grads)
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import MegatronOptimizer, OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import (TransformerBlockSubmodules,
                                                         get_num_layers_to_build)

from train_utils import (Launch, StepReport, StepTimer, close_distributed, init_distributed,
                         print_run_end, print_step)

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""Input tokens, target tokens, positions: each ``[batch, seq]``."""
LossFunc = Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, torch.Tensor]]]
"""Turns the last stage's output into the loss and the values the schedule returns."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parallel = parser.add_argument_group("parallelism")
    parallel.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    parallel.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    parallel.add_argument("--sequence-parallel", action="store_true",
                          help="split norms, dropout and the residual stream along the "
                               "sequence over the tensor-parallel group")
    model = parser.add_argument_group("model")
    model.add_argument("--num-layers", type=int, default=2)
    model.add_argument("--hidden-size", type=int, default=256)
    model.add_argument("--num-attention-heads", type=int, default=4)
    model.add_argument("--vocab-size", type=int, default=1024,
                       help="a multiple of --tp (Megatron splits the vocabulary)")
    model.add_argument("--seq-len", type=int, default=256)
    model.add_argument("--llama", action="store_true",
                       help="Llama blocks, as pretrain_gpt.py's --swiglu --normalization RMSNorm "
                            "--position-embedding-type rope --disable-bias-linear "
                            "--untie-embeddings-and-output-weights")
    model.add_argument("--ffn-hidden-size", type=int,
                       help="MLP hidden size (default 4 x --hidden-size)")
    model.add_argument("--num-query-groups", type=int,
                       help="key/value heads (grouped-query attention; default: one per head)")
    model.add_argument("--rotary-base", type=int, default=500000, help="RoPE base (--llama)")
    model.add_argument("--attention", choices=["unfused", "flash"], default="unfused",
                       help="core attention: the local spec's (scores, softmax, context as "
                            "separate kernels) or one fused kernel (SDPA's flash attention, as "
                            "Transformer Engine's fused attention under --use-flash-attn)")
    train = parser.add_argument_group("training")
    train.add_argument("--batch-size", type=int, default=4,
                       help="micro-batch size per data-parallel rank")
    train.add_argument("--micro-batches", type=int, default=1, help="micro-batches per step")
    train.add_argument("--steps", type=int, default=5)
    train.add_argument("--lr", type=float, default=6e-4, help="peak learning rate")
    train.add_argument("--warmup-steps", type=int, default=2)
    train.add_argument("--seed", type=int, default=1337)
    train.add_argument("--overlap-grad-reduce", action=argparse.BooleanOptionalAction,
                       default=True, help="reduce-scatter gradients while backward runs "
                       "(pretrain_gpt.py's --overlap-grad-reduce, off by default there)")
    return parser.parse_args()


class SequenceParallelLayerNorm(torch.nn.LayerNorm):
    """``torch.nn.LayerNorm`` as a layer-spec norm that sequence parallelism accepts.

    The local spec's norm (``WrappedTorchNorm``) refuses sequence parallelism. A norm works
    per token, so it runs unchanged on a sequence shard; what sequence parallelism needs
    besides is that the gradients of the weight and bias, which each rank computes from its
    own shard, are summed over the tensor-parallel group. Megatron's ``finalize_model_grads``
    does that for parameters marked ``sequence_parallel``, as Transformer Engine's and Apex's
    norms mark theirs; this one marks its own the same way."""

    def __init__(self, config: TransformerConfig, hidden_size: int, eps: float = 1e-5,
                 **_: object) -> None:
        super().__init__(hidden_size, eps=eps)
        for param in self.parameters():
            param.sequence_parallel = config.sequence_parallel


class SequenceParallelRMSNorm(torch.nn.RMSNorm):
    """:class:`SequenceParallelLayerNorm`'s RMSNorm (Llama's norm)."""

    def __init__(self, config: TransformerConfig, hidden_size: int, eps: float = 1e-5,
                 **_: object) -> None:
        super().__init__(hidden_size, eps=eps)
        for param in self.parameters():
            param.sequence_parallel = config.sequence_parallel


class FlashCoreAttention(DotProductAttention):
    """Causal core attention as one fused kernel (``scaled_dot_product_attention``) instead
    of the local spec's scores, softmax and context kernels; key/value groups repeated to the
    query heads as the local spec does. Input ``[s, b, heads, head_dim]``, output
    ``[s, b, heads * head_dim]``, as :class:`DotProductAttention`."""

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, attn_mask_type: object = None,
                attention_bias: object = None, packed_seq_params: object = None) -> torch.Tensor:
        groups = self.num_attention_heads_per_partition // self.num_query_groups_per_partition
        if groups > 1:
            key, value = (t.repeat_interleave(groups, dim=2) for t in (key, value))
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
        return out.permute(2, 0, 1, 3).reshape(out.size(2), out.size(0), -1)


def block_spec(config: TransformerConfig,
               args: argparse.Namespace) -> ModuleSpec | TransformerBlockSubmodules:
    """The local GPT layer spec (RMSNorm under ``--llama``, :class:`FlashCoreAttention`
    under ``--attention flash``); under sequence parallelism its norms, and the final one,
    are :class:`SequenceParallelLayerNorm` (or :class:`SequenceParallelRMSNorm`)."""
    layer = get_gpt_layer_local_spec(normalization=config.normalization)
    if args.attention == "flash":
        attention = layer.submodules.self_attention
        layer = replace(layer, submodules=replace(layer.submodules, self_attention=replace(
            attention, submodules=replace(attention.submodules,
                                          core_attention=FlashCoreAttention))))
    if not config.sequence_parallel:
        return layer
    norm = SequenceParallelRMSNorm if args.llama else SequenceParallelLayerNorm
    layer = replace(layer, submodules=replace(layer.submodules, input_layernorm=norm,
                                              pre_mlp_layernorm=norm))
    return TransformerBlockSubmodules(layer_specs=[layer] * get_num_layers_to_build(config),
                                      layer_norm=norm)


def build_model(args: argparse.Namespace, config: TransformerConfig) -> DistributedDataParallel:
    """This rank's stage of the GPT, in bf16, under Megatron's DDP (gradients reduced in
    fp32, while backward runs unless ``--no-overlap-grad-reduce``, sharded for the distributed
    optimizer). The input embedding and the output layer share their weights, as in GPT-2 and
    ``pretrain_gpt.py``'s default; not under ``--llama``, whose positions are rotary."""
    gpt = GPTModel(config=config, transformer_layer_spec=block_spec(config, args),
                   vocab_size=args.vocab_size, max_sequence_length=args.seq_len,
                   share_embeddings_and_output_weights=not args.llama,
                   position_embedding_type="rope" if args.llama else "learned_absolute",
                   rotary_base=args.rotary_base,
                   pre_process=parallel_state.is_pipeline_first_stage(),
                   post_process=parallel_state.is_pipeline_last_stage()).cuda()
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True,
                                               overlap_grad_reduce=args.overlap_grad_reduce,
                                               use_distributed_optimizer=True)
    model = DistributedDataParallel(config=config, ddp_config=ddp_config,
                                    module=Float16Module(config, gpt))
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads
    return model


def random_batches(args: argparse.Namespace, device: torch.device) -> Iterator[Batch]:
    """Uniformly random token sequences without end: the same on the tensor- and
    pipeline-parallel peers of a data-parallel rank, different across data-parallel ranks."""
    generator = torch.Generator().manual_seed(args.seed + parallel_state.get_data_parallel_rank())
    positions = torch.arange(args.seq_len, device=device).expand(args.batch_size, -1)
    while True:
        tokens = torch.randint(args.vocab_size, (args.batch_size, args.seq_len + 1),
                               generator=generator).to(device)
        yield tokens[:, :-1], tokens[:, 1:], positions


def forward_step(batches: Iterator[Batch],
                 model: DistributedDataParallel) -> tuple[torch.Tensor, LossFunc]:
    """One micro-batch's forward, as Megatron's schedules call it: the stage's output and
    the function that turns the last stage's output (per-token losses) into the loss."""
    tokens, targets, positions = next(batches)
    return model(tokens, positions, None, labels=targets), mean_loss


def mean_loss(per_token: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss to back-propagate, and what the schedule hands back to the script."""
    loss = per_token.float().mean()
    return loss, {"lm loss": loss.detach()}


def step_loss(losses: list[dict[str, torch.Tensor]], device: torch.device) -> torch.Tensor:
    """The step's loss on every rank: the mean over micro-batches and data-parallel ranks,
    which only the last pipeline stage computes (the schedule returns nothing elsewhere)."""
    if parallel_state.is_pipeline_last_stage():
        loss = torch.stack([loss["lm loss"] for loss in losses]).mean()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG,
                        group=parallel_state.get_data_parallel_group())
    else:
        loss = torch.empty((), device=device)
    dist.broadcast(loss, src=parallel_state.get_pipeline_model_parallel_last_rank(),
                   group=parallel_state.get_pipeline_model_parallel_group())
    return loss


def flops_per_token(args: argparse.Namespace) -> int:
    """Training FLOPs per token as ``model.py`` counts them: 6 per matmul weight (attention
    and MLP of each layer, and the output layer), plus attention."""
    hidden, ffn = args.hidden_size, args.ffn_hidden_size or 4 * args.hidden_size
    kv = hidden * (args.num_query_groups or args.num_attention_heads) // args.num_attention_heads
    mlp = (3 if args.llama else 2) * hidden * ffn
    matmul_params = args.num_layers * (2 * hidden * hidden + 2 * hidden * kv + mlp) \
        + args.vocab_size * hidden
    return 6 * matmul_params + 12 * args.num_layers * hidden * args.seq_len


def build_optimizer(args: argparse.Namespace, model: DistributedDataParallel) -> tuple[
        MegatronOptimizer, OptimizerParamScheduler]:
    """Adam over the bf16 model's fp32 master weights, sharded across the data-parallel
    ranks (distributed optimizer), with gradient clipping; its learning rate warms up
    linearly, then decays to a tenth along a cosine."""
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=args.lr, min_lr=args.lr / 10, weight_decay=0.1,
                        adam_beta2=0.95, clip_grad=1.0, bf16=True,
                        use_distributed_optimizer=True),
        [model], use_gloo_process_groups=False)
    scheduler = OptimizerParamScheduler(
        optimizer, init_lr=0.0, max_lr=args.lr, min_lr=args.lr / 10,
        lr_warmup_steps=args.warmup_steps, lr_decay_steps=args.steps, lr_decay_style="cosine",
        start_wd=0.1, end_wd=0.1, wd_incr_steps=args.steps, wd_incr_style="constant")
    return optimizer, scheduler


def train(args: argparse.Namespace, launch: Launch) -> None:
    """``--steps`` optimizer steps of ``--micro-batches`` each, timed and logged as the
    other examples do (a step ends when the GPU is done with it)."""
    llama = dict(gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm",
                 add_bias_linear=False, bias_activation_fusion=False) if args.llama else {}
    config = TransformerConfig(
        num_layers=args.num_layers, hidden_size=args.hidden_size,
        num_attention_heads=args.num_attention_heads, tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp, sequence_parallel=args.sequence_parallel,
        ffn_hidden_size=args.ffn_hidden_size, num_query_groups=args.num_query_groups,
        bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16, **llama)
    model = build_model(args, config)
    optimizer, scheduler = build_optimizer(args, model)
    forward_backward = get_forward_backward_func()
    batches = random_batches(args, launch.device)
    dp_size = parallel_state.get_data_parallel_world_size()
    tokens_per_step = args.batch_size * args.micro_batches * args.seq_len * dp_size
    timer = StepTimer(launch.device)
    step_ms: list[float] = []
    for step in range(args.steps):
        lr = optimizer.param_groups[0]["lr"]
        timer.start()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses = forward_backward(forward_step_func=forward_step, data_iterator=batches,
                                  model=model, num_microbatches=args.micro_batches,
                                  seq_length=args.seq_len, micro_batch_size=args.batch_size)
        _, norm, _ = optimizer.step()
        scheduler.step(increment=1)
        loss = step_loss(losses, launch.device)
        wall_ms, gpu_ms = timer.stop()
        step_ms.append(wall_ms)
        if launch.is_main:
            print_step(step, args, StepReport(loss.item(), norm, lr, wall_ms, gpu_ms),
                       tokens_per_step=tokens_per_step, flops_per_token=flops_per_token(args),
                       world_size=launch.world_size)
    print_run_end(launch, step_ms, tokens_per_step)


def main() -> None:
    args = parse_args()
    launch = init_distributed()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tp,
                                             pipeline_model_parallel_size=args.pp)
    torch.manual_seed(args.seed)
    model_parallel_cuda_manual_seed(args.seed)
    train(args, launch)
    parallel_state.destroy_model_parallel()
    close_distributed()


if __name__ == "__main__":
    main()
