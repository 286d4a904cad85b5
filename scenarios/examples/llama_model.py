"""A Llama-style decoder (Llama 2/3 family, as torchtitan trains it), for the example scripts.

RMSNorm, rotary position embeddings (RoPE), grouped-query attention (fewer key/value heads
than query heads), a SwiGLU MLP and no biases. The container keeps GPT's attribute names
(``transformer.wte``, ``transformer.h``, ``transformer.ln_f``, ``lm_head``) so that the same
scripts wrap its blocks for activation checkpointing, ``torch.compile`` and FSDP2.

The loss is taken on float32 logits, as torchtitan does (``pred.float()``): at a 128K
vocabulary that copy is a large part of peak memory, so it is kept to stay comparable.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class LlamaConfig:
    block_size: int = 2048
    """Longest sequence: the length of the rotary table."""
    vocab_size: int = 32000
    n_layer: int = 12
    n_head: int = 12
    """Query heads."""
    n_kv_head: int = 4
    """Key/value heads (grouped-query attention); divides ``n_head``."""
    n_embd: int = 768
    ffn_hidden: int = 3072
    """SwiGLU hidden size (Llama 3: 8/3 x n_embd x ffn multiplier, rounded up to 1024)."""
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    """Share the token table with the output layer (Llama 3.2 1B does; 8B does not)."""
    n_experts: int = 0
    """Mixture of experts: this many SwiGLU experts of ``ffn_hidden`` each per block (0: dense)."""
    top_k: int = 2
    """Experts each token is routed to."""


LLAMA_PRESETS: dict[str, LlamaConfig] = {
    "llama-tiny": LlamaConfig(block_size=128, vocab_size=1024, n_layer=2, n_head=4, n_kv_head=2,
                              n_embd=128, ffn_hidden=256),
    # GPT-2-small width with Llama's blocks and the Llama 2 tokenizer: 153M parameters
    "llama-150m": LlamaConfig(),
    # Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json): 1.24B parameters, tied embeddings
    "llama-1b": LlamaConfig(block_size=8192, vocab_size=128256, n_layer=16, n_head=32,
                            n_kv_head=8, n_embd=2048, ffn_hidden=8192, rope_theta=500000.0,
                            tie_embeddings=True),
    "llama-moe-tiny": LlamaConfig(block_size=128, vocab_size=1024, n_layer=2, n_head=4,
                                  n_kv_head=2, n_embd=128, ffn_hidden=64, n_experts=4),
    # OLMoE-like shape at a quarter of its depth: 64 experts of 1024, 8 per token; 1.7B
    # parameters, 0.36B active per token
    "llama-moe-2b": LlamaConfig(block_size=4096, vocab_size=50304, n_layer=4, n_head=16,
                                n_kv_head=16, n_embd=2048, ffn_hidden=1024, n_experts=64,
                                top_k=8),
    # Llama 3.1 8B (torchtitan's llama3 "8B" flavour): 8.03B parameters
    "llama3-8b": LlamaConfig(block_size=8192, vocab_size=128256, n_layer=32, n_head=32,
                             n_kv_head=8, n_embd=4096, ffn_hidden=14336, rope_theta=500000.0),
    # torchtitan's llama2 "13B" and "70B" and llama3 "70B" flavours (FFN hidden from its
    # ffn_dim_multiplier / multiple_of rule): 13.0B, 69.0B and 70.6B parameters
    "llama2-13b": LlamaConfig(block_size=4096, vocab_size=32000, n_layer=40, n_head=40,
                              n_kv_head=40, n_embd=5120, ffn_hidden=13824),
    "llama2-70b": LlamaConfig(block_size=4096, vocab_size=32000, n_layer=80, n_head=64,
                              n_kv_head=8, n_embd=8192, ffn_hidden=28672),
    "llama3-70b": LlamaConfig(block_size=8192, vocab_size=128256, n_layer=80, n_head=64,
                              n_kv_head=8, n_embd=8192, ffn_hidden=28672, rope_theta=500000.0),
}
"""The tiny one runs in seconds on a CPU or a simulator; the others are for measurements."""


def rotary_tables(config: LlamaConfig, device: torch.device | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position x frequency, shape (block_size, head_dim / 2)."""
    head_dim = config.n_embd // config.n_head
    inv_freq = 1.0 / config.rope_theta ** (
        torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(config.block_size, device=device, dtype=torch.float32),
                         inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, T, heads, head_dim) by position (the half-split pairing of Hugging Face);
    ``cos``/``sin`` are (T, 1, head_dim / 2) in x's dtype."""
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head or config.n_head % config.n_kv_head:
            raise ValueError(f"n_embd ({config.n_embd}) must be a multiple of n_head "
                             f"({config.n_head}), and n_head of n_kv_head ({config.n_kv_head})")
        self.head_dim = config.n_embd // config.n_head
        self.n_rep = config.n_head // config.n_kv_head
        kv_dim = config.n_kv_head * self.head_dim
        self.wq = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.wk = nn.Linear(config.n_embd, kv_dim, bias=False)
        self.wv = nn.Linear(config.n_embd, kv_dim, bias=False)
        self.wo = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x)
        # the tables are float32 buffers: cast once per layer to the compute dtype
        cos, sin = cos[:, None, :].to(q.dtype), sin[:, None, :].to(q.dtype)
        q = apply_rotary(q.view(batch, seq, -1, self.head_dim), cos, sin)
        k = apply_rotary(self.wk(x).view(batch, seq, -1, self.head_dim), cos, sin)
        v = self.wv(x).view(batch, seq, -1, self.head_dim)
        # grouped-query attention: each key/value head serves n_rep query heads (torchtitan's
        # repeat_kv: expand, then one copy)
        k, v = (t[:, :, :, None, :].expand(-1, -1, -1, self.n_rep, -1)
                .reshape(batch, seq, -1, self.head_dim) for t in (k, v))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.n_embd, config.ffn_hidden, bias=False)
        self.w2 = nn.Linear(config.ffn_hidden, config.n_embd, bias=False)
        self.w3 = nn.Linear(config.n_embd, config.ffn_hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoEFeedForward(nn.Module):
    """Dropless top-k mixture of SwiGLU experts (torchtitan's shape): a linear router, the
    token copies sorted by expert, each expert's rows multiplied by one grouped GEMM
    (``torch._grouped_mm`` on a GPU, a loop over experts elsewhere), outputs weighted by the
    router's probabilities and summed back per token. No host sync: the group offsets stay
    on the GPU."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        experts, dim, hidden = config.n_experts, config.n_embd, config.ffn_hidden
        self.top_k = config.top_k
        self.router = nn.Linear(dim, experts, bias=False)
        # stored [experts, out, in] like a linear's weight, read transposed
        self.w1 = nn.Parameter(torch.empty(experts, hidden, dim))
        self.w3 = nn.Parameter(torch.empty(experts, hidden, dim))
        self.w2 = nn.Parameter(torch.empty(experts, dim, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = self.router(x).float().softmax(dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        order = experts.flatten().argsort(stable=True)
        token = order // self.top_k
        counts = torch.bincount(experts.flatten(), minlength=self.w1.shape[0])
        ends = counts.cumsum(0).to(torch.int32)
        dtype = torch.bfloat16 if x.is_cuda else x.dtype
        rows = x[token].to(dtype)
        w1, w2, w3 = (w.to(dtype) for w in (self.w1, self.w2, self.w3))
        hidden = F.silu(_grouped(rows, w1, ends)) * _grouped(rows, w3, ends)
        out = _grouped(hidden, w2, ends) * weights.flatten()[order, None].to(dtype)
        return torch.zeros_like(x).index_add_(0, token, out.to(x.dtype)).view(shape)


def _grouped(rows: torch.Tensor, weight: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Rows ``ends[e-1]:ends[e]`` times ``weight[e]`` transposed: one grouped GEMM on a GPU."""
    if rows.is_cuda:
        return torch._grouped_mm(rows, weight.transpose(-2, -1), offs=ends)
    starts = [0, *ends[:-1].tolist()]
    return torch.cat([rows[start:end] @ weight[index].t()
                      for index, (start, end) in enumerate(zip(starts, ends.tolist()))])


class LlamaBlock(nn.Module):
    """Pre-norm attention then pre-norm feed-forward, each added to the residual stream;
    ``feed_forward`` replaces the SwiGLU MLP (the expert-parallel mixture of experts of
    ``moe_model.py``); without it, ``config.n_experts`` picks the single-GPU grouped-GEMM
    mixture of experts."""

    def __init__(self, config: LlamaConfig, feed_forward: nn.Module | None = None) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = nn.RMSNorm(config.n_embd, eps=config.norm_eps)
        if feed_forward is None:
            feed_forward = MoEFeedForward(config) if config.n_experts else FeedForward(config)
        self.feed_forward = feed_forward

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


BlockFactory = Callable[[LlamaConfig], nn.Module]
"""Builds one block from the config: ``LlamaBlock`` unless a model says otherwise."""


class LlamaTransformer(nn.Module):
    """Token table, blocks and final norm under GPT's names (see the module docstring)."""

    def __init__(self, config: LlamaConfig, make_block: BlockFactory = LlamaBlock) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.h = nn.ModuleList(make_block(config) for _ in range(config.n_layer))
        self.ln_f = nn.RMSNorm(config.n_embd, eps=config.norm_eps)


class Llama(nn.Module):
    def __init__(self, config: LlamaConfig, make_block: BlockFactory = LlamaBlock) -> None:
        super().__init__()
        self.config = config
        self.transformer = LlamaTransformer(config, make_block)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        # Not saved with the weights; recomputed by init_weights (meta-built models too)
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """Normal(0.02) matrices, residual projections scaled by 1/sqrt(2 n_layer), unit
        norms, fresh rotary tables; also works on meta-built, sharded models after
        ``to_empty``."""
        device = self.lm_head.weight.device
        if device.type != "meta":
            self.rope_cos, self.rope_sin = rotary_tables(self.config, device)
        for name, param in self.named_parameters():
            if param.dim() < 2:
                param.fill_(1.0)
            elif name.endswith(("wo.weight", "w2.weight", "w2")):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))
            else:
                nn.init.normal_(param, mean=0.0, std=0.02)

    def num_params(self) -> int:
        """Parameters of the whole model (tied weights once), whatever the sharding."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token: 6 per matmul weight plus attention (as torchtitan counts).

        An untied token table is a lookup, not a matmul, so it is left out; so are the experts
        a token is not routed to."""
        cfg = self.config
        lookup = 0 if cfg.tie_embeddings else cfg.vocab_size * cfg.n_embd
        idle = (3 * cfg.n_layer * cfg.n_embd * cfg.ffn_hidden * (cfg.n_experts - cfg.top_k)
                if cfg.n_experts else 0)
        return 6 * (self.num_params() - lookup - idle) + 12 * cfg.n_layer * cfg.n_embd * seq_len

    def forward(self, idx: torch.Tensor,
                targets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        seq = idx.size(1)
        if seq > self.config.block_size:
            raise ValueError(f"sequence of {seq} tokens, longer than block_size "
                             f"({self.config.block_size})")
        cos, sin = self.rope_cos[:seq], self.rope_sin[:seq]
        x = self.transformer.wte(idx)
        for block in self.transformer.h:
            x = block(x, cos, sin)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))
        return logits, loss
