"""What the example training scripts share: flags, process setup, data, optimizer, the loop.

Each script (``gpt_single.py``, ``gpt_ddp.py``, ``gpt_fsdp2.py``, ``gpt_tp.py``,
``gpt_fsdp_tp.py``, ``moe_ep.py``) only sets up its parallelism and then calls :func:`train`;
``llama_pp.py``, whose pipeline schedule runs forward and backward itself, and
``deepspeed_gpt.py``, whose DeepSpeed engine runs backward and the optimizer step, have their
own loops around the same pieces (:func:`print_step`, :func:`print_run_end`); everything else
lives here once. Plain PyTorch: the same code runs under ``torchrun`` on real GPUs
(NCCL, bf16) and on a CPU (gloo, fp32), and unmodified on phantora-ns3's simulated GPUs.
"""

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import (CheckpointPolicy, SelectiveCheckpointContext,
                                    create_selective_checkpoint_contexts)
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from model import PRESETS, Model, ModelConfig

GradSync = Callable[[bool], AbstractContextManager[object]]
"""Called once per micro-batch with "is this the last micro-batch of the step"; returns the
context the micro-batch's forward and backward run in (DDP: ``no_sync`` until the last)."""


def build_parser(description: str,
                 presets: Mapping[str, ModelConfig] = PRESETS) -> argparse.ArgumentParser:
    """The flags every example script takes; a script adds its own before parsing.

    ``presets``: the models ``--model`` chooses from (the first is the default, except for
    the GPT-2/Llama table, whose default is ``tiny``); :func:`model_config` reads them back
    from the parsed arguments."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.set_defaults(preset_table=presets)
    model = parser.add_argument_group("model")
    model.add_argument("--model", choices=sorted(presets),
                       default="tiny" if "tiny" in presets else next(iter(presets)),
                       help="size preset; the flags below override single fields")
    model.add_argument("--n-layer", type=int)
    model.add_argument("--n-head", type=int)
    model.add_argument("--n-embd", type=int)
    model.add_argument("--vocab-size", type=int)
    model.add_argument("--seq-len", type=int, help="tokens per sample (default: block_size)")
    train = parser.add_argument_group("training")
    train.add_argument("--batch-size", type=int, default=4,
                       help="micro-batch per data-parallel rank")
    train.add_argument("--grad-accum", type=int, default=1, help="micro-batches per step")
    train.add_argument("--steps", type=int, default=5)
    train.add_argument("--lr", type=float, default=6e-4, help="peak learning rate")
    train.add_argument("--warmup-steps", type=int, default=2)
    train.add_argument("--weight-decay", type=float, default=0.1)
    train.add_argument("--grad-clip", type=float, default=1.0)
    train.add_argument("--optimizer", choices=["fused", "foreach", "for-loop"], default="fused",
                       help="AdamW implementation")
    train.add_argument("--dtype", choices=["bf16", "fp32"],
                       help="compute dtype (default: bf16 on CUDA, fp32 on CPU)")
    train.add_argument("--compile", action="store_true", help="torch.compile each block")
    train.add_argument("--compile-mode", choices=["default", "reduce-overhead", "max-autotune"],
                       default="default", help="torch.compile's mode (reduce-overhead: CUDA "
                       "graphs)")
    train.add_argument("--activation-checkpointing", nargs="?", const="full",
                       choices=["full", "selective-op"],
                       help="recompute each block's activations in backward: all of them "
                            "(full, the default when given without a value) or all but "
                            "matmul and attention outputs (selective-op, torchtitan's)")
    train.add_argument("--num-workers", type=int, default=2, help="DataLoader worker processes")
    train.add_argument("--seed", type=int, default=1337)
    return parser


def model_config(args: argparse.Namespace) -> ModelConfig:
    """The preset named by ``--model`` with the single-field flags applied."""
    overrides = {"n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
                 "vocab_size": args.vocab_size}
    return replace(args.preset_table[args.model],
                   **{k: v for k, v in overrides.items() if v is not None})


def seq_len(args: argparse.Namespace) -> int:
    """Tokens per sample: ``--seq-len``, else the model's whole context."""
    return args.seq_len or model_config(args).block_size


def compute_dtype(args: argparse.Namespace, device: torch.device) -> torch.dtype:
    """bf16 on GPUs unless told otherwise; fp32 on a CPU, where bf16 matmuls are slow."""
    name = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    return torch.bfloat16 if name == "bf16" else torch.float32


@dataclass(frozen=True)
class Launch:
    """Where this process runs, as torchrun told it."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_single() -> Launch:
    """One process, one device: the first GPU, or the CPU where there is none."""
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return Launch(rank=0, world_size=1, local_rank=0, device=device)


def init_distributed() -> Launch:
    """Join the job torchrun started: NCCL on GPUs (one per local rank), gloo on a CPU."""
    if "RANK" not in os.environ:
        raise SystemExit("launch with torchrun, e.g. torchrun --nproc_per_node 2 "
                         f"{os.path.basename(sys.argv[0])}")
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return Launch(rank=dist.get_rank(), world_size=dist.get_world_size(),
                  local_rank=local_rank, device=device)


def init_launch() -> Launch:
    """:func:`init_distributed` when torchrun started several processes, else
    :func:`init_single` (no process group for a job of one): for scripts that also run as
    one plain process."""
    return init_distributed() if int(os.environ.get("WORLD_SIZE", "1")) > 1 else init_single()


def close_distributed() -> None:
    """Leave the job. The barrier first: without it a gloo rank that tears its connections
    down while a peer is still finishing sometimes aborts the peer (seen with 8 CPU ranks)."""
    dist.barrier()
    dist.destroy_process_group()


class RandomTokens(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Uniformly random token sequences, the same for a given index on every run."""

    def __init__(self, num_samples: int, seq_len: int, vocab_size: int, seed: int) -> None:
        self.num_samples, self.seq_len, self.vocab_size, self.seed = (num_samples, seq_len,
                                                                      vocab_size, seed)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed + index)
        tokens = torch.randint(self.vocab_size, (self.seq_len + 1,), generator=generator)
        return tokens[:-1], tokens[1:]


def make_loader(args: argparse.Namespace, config: ModelConfig, launch: Launch, *,
                dp_rank: int, dp_size: int) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
    """Exactly ``steps x grad_accum`` micro-batches for this data-parallel rank.

    Ranks that hold the same data-parallel rank (tensor-parallel peers) get the same batches.
    """
    micro_batches = args.steps * args.grad_accum
    dataset = RandomTokens(micro_batches * args.batch_size * dp_size, seq_len(args),
                           config.vocab_size, args.seed)
    sampler: DistributedSampler[tuple[torch.Tensor, torch.Tensor]] = DistributedSampler(
        dataset, num_replicas=dp_size, rank=dp_rank, seed=args.seed)
    return DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                      num_workers=args.num_workers, pin_memory=launch.device.type == "cuda")


ADAMW_BETAS = (0.9, 0.95)
ADAMW_EPS = 1e-8


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict[str, object]]:
    """Parameter groups as nanoGPT sets them up: weight decay on matrices only."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, args: argparse.Namespace) -> torch.optim.AdamW:
    """AdamW as nanoGPT sets it up (:func:`decay_groups`), in ``--optimizer``'s
    implementation."""
    implementation = {"fused": {"fused": True}, "foreach": {"foreach": True},
                      "for-loop": {"foreach": False}}[args.optimizer]
    return torch.optim.AdamW(decay_groups(model, args.weight_decay), lr=args.lr,
                             betas=ADAMW_BETAS, eps=ADAMW_EPS, **implementation)


_SAVED_OPS = frozenset({
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
})
"""Ops whose outputs selective-op checkpointing keeps (torchtitan's ``_save_list``)."""


def _selective_op_context() -> tuple[AbstractContextManager[object],
                                     AbstractContextManager[object]]:
    """torchtitan's per-op policy for one block: keep the outputs of attention and of every
    other matmul, recompute everything else in backward. The matmul count is the block's
    own and runs on across steps, as torchtitan's does."""
    mm_counts = {"forward": 0, "recompute": 0}

    def policy(ctx: SelectiveCheckpointContext, func: torch._ops.OpOverload, *args: object,
               **kwargs: object) -> CheckpointPolicy:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            mm_counts[mode] += 1
        keep = func in _SAVED_OPS and not (func == torch.ops.aten.mm.default
                                           and mm_counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def apply_activation_checkpointing(model: Model, mode: str) -> None:
    """Wrap every block so that its activations are recomputed in backward (before FSDP
    wraps it): all of them (``full``) or as :func:`_selective_op_context` says
    (``selective-op``)."""
    for index, block in enumerate(model.transformer.h):
        if mode == "full":
            model.transformer.h[index] = checkpoint_wrapper(block)
        else:
            model.transformer.h[index] = checkpoint_wrapper(
                block, context_fn=_selective_op_context, preserve_rng_state=False)


def compile_blocks(model: Model, mode: str = "default") -> None:
    """``torch.compile`` each block in place, so DDP, FSDP and TP see the same module tree."""
    for block in model.transformer.h:
        block.compile(mode=mode)


def lr_at(step: int, args: argparse.Namespace) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak at the last step (nanoGPT)."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = (step - args.warmup_steps) / max(1, args.steps - 1 - args.warmup_steps)
    min_lr = args.lr / 10
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))) * (args.lr - min_lr)


def scheduled_steps(args: argparse.Namespace,
                    optimizer: torch.optim.Optimizer) -> Iterator[tuple[int, float]]:
    """Each step's index and learning rate (:func:`lr_at`), set on every parameter group before
    the step runs."""
    for step in range(args.steps):
        lr = lr_at(step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        yield step, lr


def _full(tensor: torch.Tensor) -> torch.Tensor:
    """A plain tensor from a DTensor (tensor-parallel loss, gradient norm), else the tensor.

    Duck-typed so that scripts without DTensors never import ``torch.distributed.tensor``
    (half a second of CPU per process)."""
    full_tensor = getattr(tensor, "full_tensor", None)
    return full_tensor() if full_tensor is not None else tensor


class StepTimer:
    """Wall time of a step by ``time.perf_counter``; on a GPU also by CUDA events."""

    def __init__(self, device: torch.device) -> None:
        self.on_gpu = device.type == "cuda"
        if self.on_gpu:
            self.start_event = torch.cuda.Event(enable_timing=True)
            self.end_event = torch.cuda.Event(enable_timing=True)
        self.start_s = 0.0

    def start(self) -> None:
        self.start_s = time.perf_counter()
        if self.on_gpu:
            self.start_event.record()

    def stop(self) -> tuple[float, float | None]:
        """Wait for the GPU; return (wall ms, GPU ms or None on a CPU)."""
        if self.on_gpu:
            self.end_event.record()
            torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - self.start_s) * 1e3
        return wall_ms, self.start_event.elapsed_time(self.end_event) if self.on_gpu else None


def _always_sync(is_last: bool) -> AbstractContextManager[object]:
    return nullcontext()


GradClip = Callable[[nn.Module, float], torch.Tensor]
"""Clips a model's gradients to a total norm and returns the norm before clipping."""


def _clip_local(model: nn.Module, max_norm: float) -> torch.Tensor:
    return nn.utils.clip_grad_norm_(model.parameters(), max_norm)


@torch.no_grad()
def clip_grad_norm_across(own: list[nn.Parameter], shared: list[nn.Parameter], max_norm: float,
                          group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """``clip_grad_norm_`` over a model spread across ranks: ``own`` parameters live on this
    rank only (pipeline stages, experts), ``shared`` ones are the same on every rank of
    ``group`` (already all-reduced). Every rank gets the same total norm and scales alike,
    which ``clip_grad_norm_`` of the local parameters would not do."""
    own_grads = [p.grad for p in own if p.grad is not None]
    shared_grads = [p.grad for p in shared if p.grad is not None]
    own_sq = nn.utils.get_total_norm(own_grads).float().square()
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        dist.all_reduce(own_sq, group=group)
    total = (own_sq + nn.utils.get_total_norm(shared_grads).float().square()).sqrt()
    nn.utils.clip_grads_with_norm_(own + shared, max_norm, total)
    return total


def train(model: nn.Module, optimizer: torch.optim.Optimizer,
          loader: DataLoader[tuple[torch.Tensor, torch.Tensor]], args: argparse.Namespace,
          launch: Launch, *, flops_per_token: int, dp_size: int = 1,
          dp_group: dist.ProcessGroup | None = None, autocast_dtype: torch.dtype | None = None,
          grad_sync: GradSync = _always_sync,
          loss_context: Callable[[], AbstractContextManager[object]] = nullcontext,
          clip_grads: GradClip = _clip_local) -> None:
    """The training loop: ``args.steps`` steps of ``args.grad_accum`` micro-batches each.

    Rank 0 prints one line per step (loss averaged over data-parallel ranks, gradient norm,
    learning rate, step time, tokens/s, model TFLOP/s per GPU); every rank prints its peak
    GPU memory at the end. ``autocast_dtype``: run forward under ``torch.autocast`` (not with
    FSDP, whose MixedPrecisionPolicy casts instead). ``loss_context`` wraps forward and
    backward (tensor parallelism's ``loss_parallel``). ``clip_grads`` clips the gradients
    and returns their norm (expert parallelism: over every rank's experts).
    """
    device = launch.device
    autocast = (torch.autocast(device.type, dtype=autocast_dtype)
                if autocast_dtype not in (None, torch.float32) else nullcontext())
    tokens_per_step = args.batch_size * seq_len(args) * args.grad_accum * dp_size
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]] = iter(loader)
    timer = StepTimer(device)
    step_ms: list[float] = []
    for step, lr in scheduled_steps(args, optimizer):
        timer.start()
        loss_sum = torch.zeros((), device=device)
        for micro in range(args.grad_accum):
            inputs, targets = next(batches)
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            with grad_sync(micro == args.grad_accum - 1), loss_context():
                with autocast:
                    _, loss = model(inputs, targets)
                loss = loss / args.grad_accum
                loss.backward()
            loss_sum += _full(loss.detach())
        norm = clip_grads(model, args.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if dp_size > 1:
            dist.all_reduce(loss_sum, op=dist.ReduceOp.AVG, group=dp_group)
        wall_ms, gpu_ms = timer.stop()
        step_ms.append(wall_ms)
        if launch.is_main:
            print_step(step, args, StepReport(loss_sum.item(), _full(norm).item(), lr, wall_ms,
                                              gpu_ms), tokens_per_step=tokens_per_step,
                       flops_per_token=flops_per_token, world_size=launch.world_size)
    print_run_end(launch, step_ms, tokens_per_step)


@dataclass(frozen=True)
class StepReport:
    """What a step's log line says besides its number and throughput."""

    loss: float
    norm: float
    lr: float
    wall_ms: float
    gpu_ms: float | None


def print_step(step: int, args: argparse.Namespace, report: StepReport, *, tokens_per_step: int,
               flops_per_token: int, world_size: int) -> None:
    """The per-step line every example prints on rank 0 (the tests and the accuracy harness
    read it: ``step i/N | loss | norm | lr | ms (gpu ms) | tok/s | TFLOP/s/GPU``)."""
    gpu = f" (gpu {report.gpu_ms:.2f} ms)" if report.gpu_ms is not None else ""
    seconds = report.wall_ms / 1e3
    tflops = flops_per_token * tokens_per_step / seconds / world_size / 1e12
    print(f"step {step + 1}/{args.steps} | loss {report.loss:.4f} | "
          f"norm {report.norm:.4f} | lr {report.lr:.2e} | {report.wall_ms:.2f} ms{gpu} | "
          f"{tokens_per_step / seconds:,.0f} tok/s | {tflops:.2f} TFLOP/s/GPU", flush=True)


def print_run_end(launch: Launch, step_ms: list[float], tokens_per_step: int) -> None:
    """After the last step: rank 0 prints the mean step after the first, every rank its peak
    GPU memory (allocated, and reserved: what torchtitan reports as "memory")."""
    if launch.is_main and len(step_ms) > 1:
        mean_ms = sum(step_ms[1:]) / len(step_ms[1:])
        print(f"mean of steps 2-{len(step_ms)}: {mean_ms:.2f} ms/step, "
              f"{tokens_per_step / (mean_ms / 1e3):,.0f} tok/s", flush=True)
    device = launch.device
    if device.type == "cuda":
        peak = f"{torch.cuda.max_memory_allocated(device) / 2**30:.3f} GiB"
    else:
        peak = "n/a on cpu"
    print(f"rank {launch.rank}: max_memory_allocated {peak}", flush=True)
    if device.type == "cuda":
        print(f"rank {launch.rank}: max_memory_reserved "
              f"{torch.cuda.max_memory_reserved(device) / 2**30:.3f} GiB", flush=True)
