"""Train GPT-2 with tensor parallelism (Megatron style, with sequence parallelism) via DTensor.

Every rank holds a slice of every layer: attention heads and the MLP hidden units are split
column-wise then row-wise (``ColwiseParallel``/``RowwiseParallel``), LayerNorms and the
residual stream are split along the sequence (``SequenceParallel``), the embedding and the
output layer along the vocabulary, and the loss is computed on vocabulary shards
(``loss_parallel``). All ranks see the same batches.

  torchrun --nproc_per_node 2 gpt_tp.py
  torchrun --nproc_per_node 8 gpt_tp.py --model gpt2-350m --batch-size 8 --seq-len 1024
"""

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel, loss_parallel,
                                               parallelize_module)

from model import GPT, GPTConfig, ModelConfig
from train_utils import (apply_activation_checkpointing, build_parser, close_distributed,
                         compile_blocks, compute_dtype, init_distributed, make_loader,
                         make_optimizer, model_config, seq_len, train)


def check_divisible(config: ModelConfig, seq: int, tp: int) -> None:
    """Heads, vocabulary and sequence are split tp ways; say which one does not split (and
    that the plan below names GPT-2's modules only)."""
    if not isinstance(config, GPTConfig):
        raise SystemExit("the tensor-parallel plan is written for the GPT-2 presets; "
                         "choose a --model without the llama- prefix")
    for what, size in (("n_head", config.n_head), ("vocab_size", config.vocab_size),
                       ("seq_len", seq)):
        if size % tp:
            raise SystemExit(f"{what} ({size}) must be a multiple of the tensor-parallel "
                             f"size ({tp})")


def apply_tensor_parallel(model: GPT, mesh: DeviceMesh) -> None:
    """Shard ``model`` in place over the 1-D ``mesh`` (torchtitan's Llama plan, for GPT-2)."""
    parallelize_module(model, mesh, {
        # token and position tables split by rows; outputs reduce-scattered along the sequence
        "transformer.wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "transformer.wpe": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
        "transformer.ln_f": SequenceParallel(),
        # logits stay split by vocabulary for loss_parallel
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                   use_local_output=False),
    })
    for block in model.transformer.h:
        parallelize_module(block, mesh, {
            "ln_1": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1),),
                                       desired_input_layouts=(Replicate(),)),
            "attn.q_proj": ColwiseParallel(),
            "attn.k_proj": ColwiseParallel(),
            "attn.v_proj": ColwiseParallel(),
            "attn.c_proj": RowwiseParallel(output_layouts=Shard(1)),
            "ln_2": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),)),
            "mlp.c_fc": ColwiseParallel(),
            "mlp.c_proj": RowwiseParallel(output_layouts=Shard(1)),
        })
    model.tie_weights()  # wte and lm_head were sharded the same way (rows) but separately


def main() -> None:
    args = build_parser(__doc__.splitlines()[0]).parse_args()
    launch = init_distributed()
    torch.manual_seed(args.seed)  # same seed everywhere: the replicated parts must match
    torch.set_float32_matmul_precision("high")
    config = model_config(args)
    check_divisible(config, seq_len(args), launch.world_size)
    mesh = init_device_mesh(launch.device.type, (launch.world_size,), mesh_dim_names=("tp",))
    model = GPT(config).to(launch.device)
    apply_tensor_parallel(model, mesh)
    if launch.is_main:
        print(f"{model.num_params() / 1e6:.1f}M parameters, tensor parallel over "
              f"{launch.world_size} ranks", flush=True)
    if args.activation_checkpointing:
        apply_activation_checkpointing(model, args.activation_checkpointing)
    if args.compile:
        compile_blocks(model)
    loader = make_loader(args, config, launch, dp_rank=0, dp_size=1)
    train(model, make_optimizer(model, args), loader, args, launch,
          flops_per_token=model.flops_per_token(seq_len(args)),
          autocast_dtype=compute_dtype(args, launch.device), loss_context=loss_parallel)
    close_distributed()


if __name__ == "__main__":
    main()
