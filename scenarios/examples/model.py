"""GPT-2 in the nanoGPT style, shared by every example training script; the presets of both
model families (GPT-2 here, Llama in ``llama_model.py``) and :func:`build_model`.

One change from nanoGPT: separate q/k/v projections instead of one fused ``c_attn``, and
attention reshapes with ``-1`` heads, so that tensor parallelism can shard the projections
column-wise and each rank simply holds ``n_head / tp`` heads (as torchtitan's Llama does).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from llama_model import LLAMA_PRESETS, Llama, LlamaConfig


@dataclass(frozen=True)
class GPTConfig:
    block_size: int = 1024
    """Longest sequence: the size of the learned position table."""
    vocab_size: int = 50304
    """GPT-2's 50257 tokens padded to a multiple of 64, as nanoGPT does (faster matmuls)."""
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    """Biases in the linears and LayerNorms, like GPT-2."""


GPT_PRESETS: dict[str, GPTConfig] = {
    "tiny": GPTConfig(block_size=128, vocab_size=1024, n_layer=2, n_head=4, n_embd=128),
    "gpt2-124m": GPTConfig(),
    "gpt2-350m": GPTConfig(n_layer=24, n_head=16, n_embd=1024),
    "gpt2-774m": GPTConfig(n_layer=36, n_head=20, n_embd=1280),
    "gpt2-1558m": GPTConfig(n_layer=48, n_head=25, n_embd=1600),
    # MosaicML MPT shapes as llm-foundry's throughput tables ran them (learned positions,
    # biases, tied embeddings, 4x GELU MLP, vocabulary 50368, 2048 positions): exactly the
    # NumParams of scripts/train/benchmarking/README.md at sequence 2048
    "mpt-760m": GPTConfig(block_size=2048, vocab_size=50368, n_layer=24, n_head=12, n_embd=1536),
    "mpt-1b": GPTConfig(block_size=2048, vocab_size=50368, n_layer=24, n_head=16, n_embd=2048),
    "mpt-3b": GPTConfig(block_size=2048, vocab_size=50368, n_layer=32, n_head=20, n_embd=2560),
    "mpt-7b": GPTConfig(block_size=2048, vocab_size=50368, n_layer=32, n_head=32, n_embd=4096),
    "mpt-13b": GPTConfig(block_size=2048, vocab_size=50368, n_layer=40, n_head=40, n_embd=5120),
}
"""The tiny default runs in seconds on a CPU or a simulator; the GPT-2 sizes are for benchmarks."""


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(f"n_embd ({config.n_embd}) must be a multiple of "
                             f"n_head ({config.n_head})")
        self.head_dim = config.n_embd // config.n_head
        self.q_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.k_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.v_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        # (B, T, C) -> (B, heads, T, head_dim); "-1" heads: all of them, or this rank's share
        q = self.q_proj(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(batch, seq, -1)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    """GPT-2's ``transformer`` container (nanoGPT's ModuleDict, with typed attributes)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = Transformer(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.tie_weights()
        self.init_weights()

    def tie_weights(self) -> None:
        """Share the token embedding with the output layer (GPT-2 does); call again after
        anything that replaces parameters, such as tensor parallelism."""
        self.lm_head.weight = self.transformer.wte.weight

    @torch.no_grad()
    def init_weights(self) -> None:
        """GPT-2 init; also works on meta-built, sharded models after ``to_empty``."""
        for name, param in self.named_parameters():
            if param.dim() < 2:  # biases and LayerNorm
                param.fill_(1.0 if "ln_" in name and name.endswith("weight") else 0.0)
            elif name.endswith("c_proj.weight"):  # residual projections, GPT-2 paper
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))
            else:
                nn.init.normal_(param, mean=0.0, std=0.02)

    def num_params(self) -> int:
        """Parameters of the whole model (tied weights once), whatever the sharding."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token: 6 per matmul weight, plus attention (PaLM appendix B).

        The position table is a lookup, not a matmul, so it is left out (as nanoGPT does).
        """
        cfg = self.config
        matmul_params = self.num_params() - cfg.block_size * cfg.n_embd
        return 6 * matmul_params + 12 * cfg.n_layer * cfg.n_embd * seq_len

    def forward(self, idx: torch.Tensor,
                targets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        seq = idx.size(1)
        if seq > self.config.block_size:
            raise ValueError(f"sequence of {seq} tokens, longer than block_size "
                             f"({self.config.block_size})")
        pos = torch.arange(seq, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


ModelConfig = GPTConfig | LlamaConfig
Model = GPT | Llama

PRESETS: dict[str, ModelConfig] = {**GPT_PRESETS, **LLAMA_PRESETS}
"""Every ``--model`` name: GPT-2 sizes and Llama sizes."""


def build_model(config: ModelConfig) -> Model:
    """The model family a preset's config belongs to."""
    return Llama(config) if isinstance(config, LlamaConfig) else GPT(config)
