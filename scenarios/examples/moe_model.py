"""A mixture-of-experts Llama (Mixtral / DeepSeek-MoE style), for the expert-parallel example.

Each block's MLP is a set of SwiGLU experts behind a learned linear router: softmax over the
experts, the top-k kept and their weights renormalised to sum to 1 (Mixtral). There is no
capacity limit and no token is dropped, so every routed token is computed and an expert's
GEMM is as large as the number of tokens routed to it: the sizes follow the router.

Expert parallelism: the experts are split evenly over the ranks of a group; each rank routes
its own tokens, exchanges the per-expert counts with ``all_to_all_single``, reads them with
``.tolist()`` as the split sizes of an autograd-aware, variable-size
``torch.distributed.nn.functional.all_to_all_single`` that sends each token to the rank of its
expert, runs its local experts on what it received (``torch.split`` per expert), and sends
the results back the same way. With one rank there is no exchange at all. torch 2.13
deprecates that function for the functional collectives' ``all_to_all_single_autograd``
(torchtitan's choice); ``ExpertParallel.all_to_all`` picks either.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.distributed.nn.functional as dist_fn
from torch import nn
from torch.nn import functional as F

from llama_model import FeedForward, Llama, LlamaBlock, LlamaConfig


@dataclass(frozen=True)
class MoEConfig(LlamaConfig):
    """A Llama whose ``ffn_hidden`` is the hidden size of each expert's SwiGLU."""

    n_experts: int = 8
    top_k: int = 2


MOE_PRESETS: dict[str, MoEConfig] = {
    # 8 experts of 256 hidden units: seconds on a CPU, the CI scenarios' model
    "moe-tiny": MoEConfig(block_size=128, vocab_size=1024, n_layer=2, n_head=4, n_kv_head=2,
                          n_embd=128, ffn_hidden=256),
    # d_model 1024, 8 layers of 8 experts (2816 hidden units, top-2): 0.62B parameters, of
    # which 0.19B are active per token; the single-GPU accuracy run
    "moe-600m": MoEConfig(block_size=2048, vocab_size=32000, n_layer=8, n_head=16, n_kv_head=4,
                          n_embd=1024, ffn_hidden=2816),
}


@dataclass(frozen=True)
class ExpertParallel:
    """This rank's place in the expert-parallel group: it holds experts
    ``[rank * n_local, (rank + 1) * n_local)``."""

    rank: int = 0
    size: int = 1
    group: dist.ProcessGroup | None = None
    all_to_all: str = "nn"
    """How tokens travel: ``nn`` (``torch.distributed.nn.functional.all_to_all_single``) or
    ``functional`` (``_functional_collectives.all_to_all_single_autograd``)."""

    def exchange(self, tokens: torch.Tensor, send_splits: list[int],
                 recv_splits: list[int]) -> torch.Tensor:
        """Rows ``send_splits[r]`` of ``tokens`` to rank r; ``recv_splits[r]`` rows from it."""
        if self.all_to_all == "functional":
            group = self.group if self.group is not None else dist.group.WORLD
            return funcol.all_to_all_single_autograd(tokens, recv_splits, send_splits, group)
        received = tokens.new_empty((sum(recv_splits), *tokens.shape[1:]))
        return dist_fn.all_to_all_single(received, tokens, output_split_sizes=recv_splits,
                                         input_split_sizes=send_splits, group=self.group)

    def local_experts(self, n_experts: int) -> range:
        if n_experts % self.size:
            raise ValueError(f"{n_experts} experts do not split evenly over {self.size} "
                             "expert-parallel ranks; choose a world size that divides them")
        per_rank = n_experts // self.size
        return range(self.rank * per_rank, (self.rank + 1) * per_rank)


ROUTINGS = ("learned", "balanced")
"""``learned``: the router's top-k. ``balanced``: token i goes to experts ``(i*k + j) % E``,
whatever the router says (its weights still combine the outputs): perfectly even counts, a
reference for validating a simulator's routing model."""


class MoE(nn.Module):
    """Router, experts and the expert-parallel exchange of one block."""

    def __init__(self, config: MoEConfig, ep: ExpertParallel, routing: str = "learned") -> None:
        super().__init__()
        if routing not in ROUTINGS:
            raise ValueError(f"routing {routing!r}: expected one of {', '.join(ROUTINGS)}")
        if not 0 < config.top_k <= config.n_experts:
            raise ValueError(f"top_k ({config.top_k}) must be in 1..n_experts "
                             f"({config.n_experts})")
        self.n_experts, self.top_k, self.ep, self.routing = (config.n_experts, config.top_k,
                                                             ep, routing)
        self.router = nn.Linear(config.n_embd, config.n_experts, bias=False)
        # every expert is built (same initial values whatever the world size), then
        # shard_experts keeps this rank's; keys are global expert indices
        self.experts = nn.ModuleDict({str(e): FeedForward(config)
                                      for e in range(config.n_experts)})

    def shard(self) -> None:
        """Keep only this rank's experts."""
        local = self.ep.local_experts(self.n_experts)
        for key in [k for k in self.experts if int(k) not in local]:
            del self.experts[key]

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(expert ids, weights), each (tokens, top_k)."""
        probs = F.softmax(self.router(x).float(), dim=-1)
        if self.routing == "learned":
            weights, ids = torch.topk(probs, self.top_k, dim=-1)
        else:
            slots = torch.arange(x.size(0) * self.top_k, device=x.device)
            ids = (slots % self.n_experts).view(-1, self.top_k)
            weights = probs.gather(-1, ids)
        return ids, weights / weights.sum(dim=-1, keepdim=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        ids, weights = self.route(x)
        flat_ids = ids.flatten()
        counts = torch.bincount(flat_ids, minlength=self.n_experts)
        # token copies grouped by expert (stable: a token's copies keep their order)
        order = torch.argsort(flat_ids, stable=True)
        routed = x[order // self.top_k]
        if torch.is_autocast_enabled(x.device.type):  # dispatch in the compute dtype
            routed = routed.to(torch.get_autocast_dtype(x.device.type))
        if self.ep.size == 1:
            out = self._run_experts(routed, counts.tolist())
        else:
            out = self._exchange_and_run(routed, counts)
        combined = torch.empty_like(out).index_copy_(0, order, out)
        combined = combined.view(-1, self.top_k, shape[-1])
        y = (combined * weights.unsqueeze(-1).to(combined.dtype)).sum(dim=1)
        return y.view(shape)

    def _run_experts(self, tokens: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """``tokens`` grouped by local expert, ``counts[i]`` for the i-th: each expert's
        SwiGLU on its group, concatenated in the same order."""
        groups = torch.split(tokens, counts)
        return torch.cat([expert(group) for expert, group in zip(self.experts.values(), groups,
                                                                 strict=True)])

    def _exchange_and_run(self, routed: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Send each token to its expert's rank, run the local experts, send results back."""
        ep = self.ep
        n_local = self.n_experts // ep.size
        # what each rank will send me: counts per (source rank, local expert)
        received_counts = torch.empty_like(counts)
        dist.all_to_all_single(received_counts, counts, group=ep.group)
        send_splits = counts.view(ep.size, n_local).sum(dim=1).tolist()
        by_source = received_counts.view(ep.size, n_local)
        recv_splits = by_source.sum(dim=1).tolist()
        received = ep.exchange(routed, send_splits, recv_splits)
        # received: per source rank, per local expert; regroup per local expert
        local_ids = torch.arange(n_local, device=routed.device).repeat(ep.size)
        expert_of_row = torch.repeat_interleave(local_ids, by_source.flatten(),
                                                output_size=received.size(0))
        regroup = torch.argsort(expert_of_row, stable=True)
        out = self._run_experts(received[regroup], by_source.sum(dim=0).tolist())
        out = torch.empty_like(out).index_copy_(0, regroup, out)
        return ep.exchange(out, recv_splits, send_splits)


class MoELlama(Llama):
    """Llama with an :class:`MoE` in place of every block's MLP."""

    config: MoEConfig

    def __init__(self, config: MoEConfig, ep: ExpertParallel = ExpertParallel(),
                 routing: str = "learned") -> None:
        super().__init__(config,
                         make_block=lambda cfg: LlamaBlock(cfg, MoE(config, ep, routing)))
        for moe in self.moe_layers():
            moe.shard()

    def moe_layers(self) -> list[MoE]:
        return [block.feed_forward for block in self.transformer.h]

    def expert_parameters(self) -> list[nn.Parameter]:
        """This rank's experts' parameters (unique to it)."""
        return [p for moe in self.moe_layers() for p in moe.experts.parameters()]

    def dense_parameters(self) -> list[nn.Parameter]:
        """Everything else: the same on every rank, gradients all-reduced."""
        experts = {id(p) for p in self.expert_parameters()}
        return [p for p in self.parameters() if id(p) not in experts]

    def _expert_size(self) -> int:
        """Parameters of one expert."""
        return 3 * self.config.n_embd * self.config.ffn_hidden

    def num_params(self) -> int:
        """All parameters of the model, every rank's experts counted."""
        dense = sum(p.numel() for p in self.dense_parameters())
        return dense + self.config.n_layer * self.config.n_experts * self._expert_size()

    def active_params(self) -> int:
        """Parameters a token goes through: the dense ones and top_k experts per layer."""
        dense = sum(p.numel() for p in self.dense_parameters())
        return dense + self.config.n_layer * self.config.top_k * self._expert_size()

    def flops_per_token(self, seq_len: int) -> int:
        """As :meth:`Llama.flops_per_token`, over the active parameters (the router's GEMM
        included, the token table left out)."""
        cfg = self.config
        lookup = 0 if cfg.tie_embeddings else cfg.vocab_size * cfg.n_embd
        return 6 * (self.active_params() - lookup) + 12 * cfg.n_layer * cfg.n_embd * seq_len
