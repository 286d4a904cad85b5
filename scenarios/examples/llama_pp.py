"""Train a Llama-style decoder with pipeline parallelism (``torch.distributed.pipelining``).

Each rank builds the whole model from the seed (so the weights are those of a one-device
run), keeps its stage(s) (a contiguous run of blocks; the first stage also embeds, the last
also norms and projects to the vocabulary) and hands them to ``PipelineStage`` and a schedule,
as a user of the library does. Without ``--static-shapes`` the stages learn each other's
shapes at the first step (no ``input_args``).

  torchrun --nproc_per_node 2 llama_pp.py                          # 1F1B, 2 stages
  torchrun --nproc_per_node 4 llama_pp.py --n-layer 4 --schedule gpipe
  torchrun --nproc_per_node 2 llama_pp.py --n-layer 4 --schedule interleaved1f1b
  torchrun --nproc_per_node 4 llama_pp.py --model llama-150m --seq-len 2048 --microbatches 8

Rank 0 prints the step lines (the loss comes from the last stage's rank), every rank its peak
memory. ``--batch-size`` is the size of one micro-batch, so a step sees
``--microbatches x --batch-size`` sequences: the same batches, losses and gradients as
``gpt_single.py --grad-accum <microbatches>`` with the same model and seed.
"""

import argparse
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (PipelineScheduleMulti,
                                                    PipelineScheduleSingle, Schedule1F1B,
                                                    ScheduleGPipe, ScheduleInterleaved1F1B,
                                                    ScheduleInterleavedZeroBubble,
                                                    ScheduleZBVZeroBubble)
from torch.nn import functional as F

from llama_model import LLAMA_PRESETS, Llama, LlamaConfig
from train_utils import (Launch, StepReport, StepTimer, build_parser, clip_grad_norm_across,
                         close_distributed, compute_dtype, init_distributed, make_loader,
                         make_optimizer, model_config, print_run_end, print_step, scheduled_steps,
                         seq_len)

SCHEDULES: dict[str, type[PipelineScheduleSingle] | type[PipelineScheduleMulti]] = {
    "gpipe": ScheduleGPipe,
    "1f1b": Schedule1F1B,
    "interleaved1f1b": ScheduleInterleaved1F1B,
    "zb": ScheduleInterleavedZeroBubble,
    "zbv": ScheduleZBVZeroBubble,
}
"""``--schedule`` names. gpipe and 1f1b run one stage per rank; the others several
(``--stages-per-rank``), zbv exactly two, placed in a V (rank r: stages r and 2W-1-r)."""


class LlamaStage(nn.Module):
    """Blocks ``layers`` of ``model``; the first stage also embeds the tokens, the last also
    applies the final norm and the output layer. Runs under ``torch.autocast`` where the
    compute dtype is not float32 (the schedule calls forward, not the script)."""

    def __init__(self, model: Llama, layers: range, first: bool, last: bool,
                 autocast_dtype: torch.dtype) -> None:
        super().__init__()
        self.wte = model.transformer.wte if first else None
        self.layers = nn.ModuleDict({str(i): model.transformer.h[i] for i in layers})
        self.ln_f = model.transformer.ln_f if last else None
        self.lm_head = model.lm_head if last else None
        self.register_buffer("rope_cos", model.rope_cos, persistent=False)
        self.register_buffer("rope_sin", model.rope_sin, persistent=False)
        self.autocast_dtype = autocast_dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = self.rope_cos.device.type
        with torch.autocast(device, dtype=self.autocast_dtype,
                            enabled=self.autocast_dtype != torch.float32):
            if self.wte is not None:
                x = self.wte(x)
            cos, sin = self.rope_cos[:x.size(1)], self.rope_sin[:x.size(1)]
            for block in self.layers.values():
                x = block(x, cos, sin)
            if self.lm_head is not None:
                x = self.lm_head(self.ln_f(x))
        return x


def stage_ids(schedule: str, rank: int, world: int, per_rank: int) -> list[int]:
    """The stages rank ``rank`` holds: ``per_rank`` of them, looped (rank, rank + W, ...) or,
    for zbv, in a V."""
    if schedule == "zbv":
        return [rank, 2 * world - 1 - rank]
    return [rank + i * world for i in range(per_rank)]


def layer_ranges(n_layer: int, n_stages: int) -> list[range]:
    """Blocks per stage: as even as possible, the earlier stages taking the remainder."""
    if n_layer < n_stages:
        raise SystemExit(f"{n_layer} layers cannot fill {n_stages} pipeline stages: pass "
                         f"--n-layer {n_stages} or more, or fewer ranks/stages")
    base, extra = divmod(n_layer, n_stages)
    bounds = [0]
    for stage in range(n_stages):
        bounds.append(bounds[-1] + base + (stage < extra))
    return [range(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]


def check_args(args: argparse.Namespace, config: LlamaConfig, world: int) -> int:
    """Stages per rank for the schedule; a clear exit where the flags cannot work."""
    if args.grad_accum != 1:
        raise SystemExit("--grad-accum: pipeline parallelism accumulates over "
                         "--microbatches; leave --grad-accum at 1")
    if config.tie_embeddings:
        raise SystemExit(f"--model {args.model} ties its token table to its output layer, "
                         "which the first and last stages cannot share; choose an untied "
                         "preset (llama-tiny, llama-150m, llama3-8b)")
    per_rank = 2 if args.schedule == "zbv" else args.stages_per_rank
    multi = args.schedule in ("interleaved1f1b", "zb", "zbv")
    if multi and per_rank < 2:
        raise SystemExit(f"--schedule {args.schedule} runs several stages per rank: pass "
                         "--stages-per-rank 2 or more")
    if not multi and per_rank != 1:
        raise SystemExit(f"--schedule {args.schedule} runs one stage per rank: leave "
                         "--stages-per-rank at 1, or choose interleaved1f1b or zb")
    if multi and args.microbatches % world:
        raise SystemExit(f"--schedule {args.schedule} needs --microbatches ({args.microbatches})"
                         f" to be a multiple of the ranks ({world})")
    return per_rank


def build_stages(args: argparse.Namespace, config: LlamaConfig, launch: Launch,
                 ids: list[int], n_stages: int) -> tuple[list[LlamaStage], int]:
    """This rank's stage modules, cut from the whole model built from the seed on the CPU (as
    ``gpt_single.py`` builds it) and moved to the device; and the whole model's training
    FLOPs per token."""
    torch.manual_seed(args.seed)
    model = Llama(config)
    ranges = layer_ranges(config.n_layer, n_stages)
    dtype = compute_dtype(args, launch.device)
    modules = [LlamaStage(model, ranges[i], first=i == 0, last=i == n_stages - 1,
                          autocast_dtype=dtype).to(launch.device) for i in ids]
    return modules, model.flops_per_token(seq_len(args))


def pipeline_stage(module: LlamaStage, index: int, n_stages: int, args: argparse.Namespace,
                   config: LlamaConfig, device: torch.device) -> PipelineStage:
    """``PipelineStage`` of one module: shapes learnt at the first step, or with
    ``--static-shapes`` given as example micro-batch tensors (``input_args``/``output_args``;
    activations flagged ``requires_grad``, as a forward would leave them: the stage takes
    that flag to mean "a gradient travels back")."""
    if not args.static_shapes:
        return PipelineStage(module, index, n_stages, device)
    micro, seq, width = args.batch_size, seq_len(args), config.n_embd
    if index == 0:
        inputs = torch.zeros(micro, seq, dtype=torch.long, device=device)
    else:
        inputs = torch.empty(micro, seq, width, device=device, requires_grad=True)
    if index == n_stages - 1:
        outputs = torch.empty(micro, seq, config.vocab_size, device=device,
                              dtype=module.autocast_dtype, requires_grad=True)
    else:
        outputs = torch.empty(micro, seq, width, device=device, requires_grad=True)
    return PipelineStage(module, index, n_stages, device, input_args=inputs,
                         output_args=outputs)


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of one micro-batch on float32 logits (as ``Llama.forward``)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


def main() -> None:
    parser = build_parser(__doc__.splitlines()[0], LLAMA_PRESETS)
    parser.set_defaults(model="llama-tiny")
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b")
    parser.add_argument("--microbatches", type=int, default=4,
                        help="micro-batches per step, each of --batch-size sequences")
    parser.add_argument("--stages-per-rank", type=int, default=1,
                        help="stages each rank holds (interleaved1f1b, zb: 2 or more)")
    parser.add_argument("--static-shapes", action="store_true",
                        help="give PipelineStage input_args/output_args instead of letting "
                             "it infer the shapes at the first step")
    args = parser.parse_args()
    launch = init_distributed()
    torch.set_float32_matmul_precision("high")
    config = model_config(args)
    per_rank = check_args(args, config, launch.world_size)
    n_stages = per_rank * launch.world_size
    ids = stage_ids(args.schedule, launch.rank, launch.world_size, per_rank)
    modules, flops_per_token = build_stages(args, config, launch, ids, n_stages)
    stages = [pipeline_stage(m, i, n_stages, args, config, launch.device)
              for m, i in zip(modules, ids, strict=True)]
    schedule_class = SCHEDULES[args.schedule]
    schedule = schedule_class(stages[0] if len(stages) == 1 else stages, args.microbatches,
                              loss_fn=loss_fn)
    model = nn.ModuleList(modules)
    if launch.is_main:
        print(f"{n_stages} pipeline stages over {launch.world_size} ranks, {args.schedule} "
              f"schedule, {args.microbatches} micro-batches of {args.batch_size}", flush=True)
    args.grad_accum = args.microbatches  # the loader yields one micro-batch at a time
    train_pipeline(schedule, model, first=0 in ids, last=n_stages - 1 in ids,
                   last_rank=stage_owner(args.schedule, n_stages - 1, launch.world_size),
                   args=args, config=config, launch=launch, flops_per_token=flops_per_token)
    close_distributed()


def stage_owner(schedule: str, stage: int, world: int) -> int:
    """The rank that holds ``stage``."""
    if schedule == "zbv":
        return stage if stage < world else 2 * world - 1 - stage
    return stage % world


def train_pipeline(schedule: PipelineScheduleSingle | PipelineScheduleMulti, model: nn.Module,
                   *, first: bool, last: bool, last_rank: int, args: argparse.Namespace,
                   config: LlamaConfig, launch: Launch, flops_per_token: int) -> None:
    """``train_utils.train``'s loop with the schedule in place of forward and backward: the
    first stage feeds the tokens, the last the targets and collects each micro-batch's loss;
    the gradient norm is taken over every rank's stages."""
    device = launch.device
    optimizer = make_optimizer(model, args)
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]] = iter(
        make_loader(args, config, launch, dp_rank=0, dp_size=1))
    tokens_per_step = args.batch_size * seq_len(args) * args.microbatches
    timer = StepTimer(device)
    step_ms: list[float] = []
    for step, lr in scheduled_steps(args, optimizer):
        timer.start()
        micro = [next(batches) for _ in range(args.microbatches)]
        inputs = torch.cat([x for x, _ in micro]).to(device, non_blocking=True)
        targets = torch.cat([y for _, y in micro]).to(device, non_blocking=True)
        losses: list[torch.Tensor] = []
        if first and last:
            schedule.step(inputs, target=targets, losses=losses)
        elif first:
            schedule.step(inputs)
        elif last:
            schedule.step(target=targets, losses=losses)
        else:
            schedule.step()
        norm = clip_grad_norm_across(list(model.parameters()), [], args.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss = torch.stack(losses).mean() if last else torch.zeros((), device=device)
        dist.broadcast(loss, src=last_rank)
        wall_ms, gpu_ms = timer.stop()
        step_ms.append(wall_ms)
        if launch.is_main:
            print_step(step, args, StepReport(loss.item(), norm.item(), lr, wall_ms, gpu_ms),
                       tokens_per_step=tokens_per_step, flops_per_token=flops_per_token,
                       world_size=launch.world_size)
    print_run_end(launch, step_ms, tokens_per_step)


if __name__ == "__main__":
    main()
