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


LLAMA_PRESETS: dict[str, LlamaConfig] = {
    "llama-tiny": LlamaConfig(block_size=128, vocab_size=1024, n_layer=2, n_head=4, n_kv_head=2,
                              n_embd=128, ffn_hidden=256),
    # GPT-2-small width with Llama's blocks and the Llama 2 tokenizer: 153M parameters
    "llama-150m": LlamaConfig(),
    # Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json): 1.24B parameters, tied embeddings
    "llama-1b": LlamaConfig(block_size=8192, vocab_size=128256, n_layer=16, n_head=32,
                            n_kv_head=8, n_embd=2048, ffn_hidden=8192, rope_theta=500000.0,
                            tie_embeddings=True),
    # Llama 3.1 8B (torchtitan's llama3 "8B" flavour): 8.03B parameters
    "llama3-8b": LlamaConfig(block_size=8192, vocab_size=128256, n_layer=32, n_head=32,
                             n_kv_head=8, n_embd=4096, ffn_hidden=14336, rope_theta=500000.0),
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


class LlamaBlock(nn.Module):
    """Pre-norm attention then pre-norm feed-forward, each added to the residual stream;
    ``feed_forward`` replaces the SwiGLU MLP (a mixture of experts: ``moe_model.py``)."""

    def __init__(self, config: LlamaConfig, feed_forward: nn.Module | None = None) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = nn.RMSNorm(config.n_embd, eps=config.norm_eps)
        self.feed_forward = feed_forward if feed_forward is not None else FeedForward(config)

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
            elif name.endswith(("wo.weight", "w2.weight")):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))
            else:
                nn.init.normal_(param, mean=0.0, std=0.02)

    def num_params(self) -> int:
        """Parameters of the whole model (tied weights once), whatever the sharding."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token: 6 per matmul weight plus attention (as torchtitan counts).

        An untied token table is a lookup, not a matmul, so it is left out."""
        cfg = self.config
        lookup = 0 if cfg.tie_embeddings else cfg.vocab_size * cfg.n_embd
        return 6 * (self.num_params() - lookup) + 12 * cfg.n_layer * cfg.n_embd * seq_len

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
