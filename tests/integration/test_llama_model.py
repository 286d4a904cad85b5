"""The Llama-style example model trains on a CPU: forward, backward, presets, checkpointing."""

import math
import sys

import pytest
import torch

from tests.integration.live_examples import ROOT

sys.path.insert(0, str(ROOT / "scenarios" / "examples"))

from llama_model import Llama, LlamaConfig
from model import GPT, PRESETS, build_model
from train_utils import apply_activation_checkpointing, build_parser

TINY = PRESETS["llama-tiny"]


def _loss_and_grads(model: torch.nn.Module,
                    seed: int = 0) -> tuple[torch.Tensor, list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(TINY.vocab_size, (2, 33), generator=generator)
    _, loss = model(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


def test_tiny_llama_forward_backward_on_cpu() -> None:
    torch.manual_seed(0)
    model = build_model(TINY)
    assert isinstance(model, Llama)
    loss, grads = _loss_and_grads(model)
    assert abs(loss.item() - math.log(TINY.vocab_size)) < 0.5  # random init: ~ln(vocab)
    assert all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)
    attention = model.transformer.h[0].attention
    assert attention.wk.out_features == TINY.n_kv_head * attention.head_dim  # grouped queries
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())


def test_selective_op_checkpointing_keeps_the_math() -> None:
    torch.manual_seed(0)
    plain = build_model(TINY)
    checkpointed = build_model(TINY)
    checkpointed.load_state_dict(plain.state_dict())
    apply_activation_checkpointing(checkpointed, "selective-op")
    loss, grads = _loss_and_grads(plain)
    loss_ckpt, grads_ckpt = _loss_and_grads(checkpointed)
    torch.testing.assert_close(loss_ckpt, loss)
    for grad, grad_ckpt in zip(grads, grads_ckpt, strict=True):
        torch.testing.assert_close(grad_ckpt, grad)


def test_presets_sizes_and_families() -> None:
    with torch.device("meta"):
        sizes = {name: build_model(PRESETS[name]).num_params()
                 for name in ("llama-1b", "llama3-8b")}
        gpt = build_model(PRESETS["tiny"])
    assert isinstance(gpt, GPT)
    assert sizes["llama-1b"] == pytest.approx(1.236e9, rel=1e-3)  # Llama 3.2 1B
    assert sizes["llama3-8b"] == pytest.approx(8.030e9, rel=1e-3)  # Llama 3.1 8B


def test_meta_built_model_gets_rotary_tables_at_init() -> None:
    """FSDP scripts build on meta, then to_empty + init_weights: the tables must be real."""
    with torch.device("meta"):
        model = Llama(TINY)
    model.to_empty(device="cpu")
    model.init_weights()
    head_dim = TINY.n_embd // TINY.n_head
    assert model.rope_cos.shape == (TINY.block_size, head_dim // 2)
    torch.testing.assert_close(model.rope_cos[0], torch.ones(head_dim // 2))


def test_tied_embeddings_share_one_table() -> None:
    config = LlamaConfig(**{**TINY.__dict__, "tie_embeddings": True})
    model = Llama(config)
    assert model.lm_head.weight is model.transformer.wte.weight
    untied = Llama(TINY)
    lookup = TINY.vocab_size * TINY.n_embd
    assert untied.flops_per_token(32) - 6 * (untied.num_params() - lookup) == \
        12 * TINY.n_layer * TINY.n_embd * 32


def test_full_checkpointing_flag_still_takes_no_value() -> None:
    """``--activation-checkpointing`` alone (the CI scenarios) means full recompute."""
    parser = build_parser("x")
    assert parser.parse_args(["--activation-checkpointing"]).activation_checkpointing == "full"
    assert parser.parse_args([]).activation_checkpointing is None
    args = parser.parse_args(["--activation-checkpointing", "selective-op", "--model", "llama-1b"])
    assert (args.activation_checkpointing, args.model) == ("selective-op", "llama-1b")
