"""Measure the GPU time of the aten ops a training step launches, for phantora's compute model.

The simulator charges every intercepted aten op a device duration looked up in measured tables
(interpolated between shapes, roofline beyond them). This script takes those tables on one GPU:
matrix products (mm/addmm/linear/bmm in the layouts forward and backward use), attention forward
and backward (flash, cuDNN and PyTorch's default SDPA backend), the memory-bound ops of a step
(elementwise, casts, norms, softmax, cross-entropy, embedding, reductions, dropout, fill) and
optimizer steps over realistic parameter lists (fused/foreach AdamW and SGD, ``_foreach_*``,
``clip_grad_norm_``).

Usages (run from the repository root):

 1. Full run on the visible GPU, stopping sections at their share of a 480 s budget:
      python3 scripts/measure/measure_kernels.py --out /tmp/kernels --budget-s 480
 2. List the grid with a roofline estimate of the device time, without a GPU:
      python3 scripts/measure/measure_kernels.py --dry-run
 3. Check every code path on the CPU with tiny shapes (seconds):
      python3 scripts/measure/measure_kernels.py --out /tmp/kernels_cpu --device cpu --smoke
 4. Only some sections; a second run into the same --out skips the rows already there:
      python3 scripts/measure/measure_kernels.py --out /tmp/kernels --sections attention,optimizer
 5. Print the headline numbers of a stored table, write its cleaned copy, and compare its
    times with another GPU's:
      python3 scripts/measure/measure_kernels.py --import-result scripts/measure/data/kernels/h100/results.csv \\
          --export-clean hwmodel/measured/data/kernels_h100.csv \\
          --compare scripts/measure/data/kernels/h200/results.csv

Output under ``--out DIR``: ``results.csv`` (one row per case, appended and flushed as each case
ends, so a killed run keeps what it measured) and ``system.json`` (GPU, clocks, versions, date).

Timing (CUDA events, not the profiler): each case builds its inputs (random normal data, never
zeros), rotating over several input sets when one set is smaller than ``ROTATE_L2_FACTOR`` times
the L2 cache (``cache=cold``; ``cache=warm`` rows reuse one set), runs two warm-up calls per set
(the second, in steady state, also names the aten ops dispatched), then ``repeats`` times: a
``torch.cuda._sleep`` that holds the stream, a start event, ``calls`` back-to-back calls, an end
event. The sleep is sized from the measured host time per call, so every call is queued before
the first starts and the events see device time without PyTorch's host overhead (launch-to-
launch gaps of back-to-back kernels are included, as on a GPU that the CPU runs ahead of). If
the GPU reached the start event before the host had queued the calls, the case is re-run with a
longer sleep and flagged ``host-bound`` if that happens again. ``time_us`` is the median of the
repeats' per-call means.

``flops`` count multiply-adds as 2 (attention: causal counts half the score matrix; memory-bound
ops: a nominal count per element). ``bytes`` is the compulsory traffic (each input read once,
each output written once), not what the kernels move: ``gbs`` below the copy rate means extra
passes.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import importlib.metadata
import io
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from measurements import read_text  # noqa: E402
from scripts import common  # noqa: E402

# This script uses one GPU, but libraries it loads may probe NVLink multicast: off before torch.
os.environ.update(common.SAFETY_ENV)

import torch  # noqa: E402  (after the environment is fixed)
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from hwmodel.compute.spec import RNN_GATES, rnn_flops  # noqa: E402
from intercept.dispatch.cudnn_rnn import CUDNN_MODES  # noqa: E402

SECTIONS = ("matmul", "attention", "memory", "optimizer", "conv", "vision", "triton", "grouped",
            "rnn")
# Share of --budget-s per section; time a section leaves unused passes to the next.
SECTION_SHARE = {"matmul": 0.5, "attention": 0.2, "memory": 0.2, "optimizer": 0.1,
                 "conv": 0.4, "vision": 0.15, "triton": 0.3, "grouped": 0.15, "rnn": 0.3}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
          "tf32": torch.float32}
ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4}
INDEX_BYTES = 8  # int64 token ids and targets
ROTATE_L2_FACTOR = 4  # cold cases rotate input sets until they span this many L2 caches
MAX_SETS = 32
TARGET_REPEAT_US = 1000.0  # device time each repeat aims at
MAX_CALLS = 64  # calls per repeat; keeps the queued launches well under the driver's queue
SLOW_CALL_US = 20_000.0  # calls at least this long get SLOW_REPEATS repeats instead of REPEATS
REPEATS = 5
SLOW_REPEATS = 3
PROBE_SLEEP_US = 2000.0
PREFILL_FACTOR = 1.5  # sleep = this x the host time to queue a repeat's calls (+ 50 us)
# Roofline guesses for --dry-run and for skipping a case that cannot finish in its section.
EST_TFLOPS = {"bf16": 700.0, "fp16": 700.0, "tf32": 350.0, "fp32": 50.0}
EST_GBS = 3000.0
EST_LAUNCH_US = 4.0
EST_CASE_OVERHEAD_S = 0.008
EST_HOST_US = {"fwd": 15.0, "bwd": 80.0}  # host time to queue one call (autograd: "bwd")
# Ops that launch no kernel; left out of the aten_ops column so it lists what costs time.
NO_KERNEL_OPS = frozenset({
    "t", "transpose", "view", "_unsafe_view", "expand", "detach", "alias", "as_strided",
    "permute", "unsqueeze", "squeeze", "select", "slice", "reshape", "_reshape_alias",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "lift_fresh",
    "_local_scalar_dense", "_record_function_enter_new", "_record_function_exit",
})

Call = Callable[[], object]


# --- the grid ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grid:
    """Every shape list the cases are drawn from; ``FULL`` for a GPU, ``SMOKE`` for a CPU check."""

    linear_pairs: tuple[tuple[int, int], ...]
    """(in_features, out_features) of the linear layers of common models."""
    tokens_first: tuple[int, ...]
    """Token counts (M of a linear layer) measured first; ``tokens_later`` fill in between."""
    tokens_later: tuple[int, ...]
    cube: tuple[int, ...]
    """M, N and K values of the bf16 sweeps (all combinations, each layout)."""
    cube_coarse: tuple[int, ...]
    """M, N and K of the other dtypes' sweeps and of addmm."""
    other_dtype_pairs: tuple[tuple[int, int], ...]
    other_dtype_tokens: tuple[int, ...]
    bmm: tuple[tuple[int, int, int, int], ...]
    """(batch, m, n, k) of batched products."""
    seqs: tuple[int, ...]
    attn_tokens: int
    """Batch x sequence of the attention cases that fill the GPU (batch = this // seq)."""
    numels: tuple[int, ...]
    warm_numels: tuple[int, ...]
    hiddens: tuple[int, ...]
    softmax_dims: tuple[int, ...]
    ce_tokens: tuple[int, ...]
    vocabs: tuple[int, ...]
    embeddings: tuple[tuple[int, int], ...]
    """(vocab, dim) of embedding tables."""
    emb_tokens: tuple[int, ...]
    models: tuple[ModelParams, ...]
    max_fp32_flops: int
    """fp32 (non-tensor-core) products above this many FLOPs are left out: too slow to repeat."""
    # Second round (added after the first H100 run left time over); generated after the lists
    # above, so a run cut short loses these first.
    more_tokens: tuple[int, ...]
    """Token counts between the powers of two, for ``more_pairs``."""
    more_pairs: tuple[tuple[int, int], ...]
    moe_bmm: tuple[tuple[int, int, int, int], ...]
    """(experts, tokens per expert, out, in) of batched expert MLPs."""
    holdout: int
    """Random off-grid matmul shapes (a quarter as many attention and memory ones), each row
    marked ``"holdout": true`` in its shape: for checking an interpolation, not for fitting it."""
    more_hiddens: tuple[int, ...]
    more_softmax_dims: tuple[int, ...]
    more_vocabs: tuple[int, ...]
    more_embeddings: tuple[tuple[int, int], ...]
    max_case_bytes: int
    """Holdout cases whose compulsory traffic exceeds this are redrawn (memory and time)."""
    # Third round (issue 15): other model families, Inductor's kernels, grouped GEMMs.
    conv_batches: tuple[int, ...] = (32, 96, 256)
    """Batches of the ResNet-50 / ViT-B/16 convolutions in bf16 channels_last; 64 and 128, the
    validation runs' batches, are left to interpolation on purpose."""
    conv_other_batch: int = 64
    """Batch of the other dtypes and layouts (fp16 and fp32 channels_last, bf16 NCHW)."""
    image: int = 224
    unet_batch: int = 8
    unet_latent: int = 64
    triton_numels: tuple[int, ...] = tuple(4**e for e in range(8, 15))
    """Elements of the compiled (Triton) pointwise and reduction kernels: 2^16 ... 2^28."""
    grouped_rows: tuple[int, ...] = (8192, 32768, 131072)
    """Token rows (all experts together) of the grouped GEMMs."""
    grouped_shapes: tuple[tuple[int, int, int], ...] = ((8, 4096, 14336), (64, 2048, 1024),
                                                        (64, 1024, 2048), (8, 14336, 4096))
    """(experts, K, N) of an expert layer's grouped GEMM."""
    # Fourth round (issue 56): cuDNN's recurrent layers.
    rnn_shapes: tuple[tuple[int, int, int, int, int, int], ...] = (
        *((seq, batch, h, h, 1, 1) for seq in (32, 128, 512) for batch in (16, 64, 256)
          for h in (256, 512, 1024, 2048)),
        (128, 64, 1024, 1024, 2, 1), (128, 64, 1024, 1024, 4, 1), (128, 64, 512, 512, 2, 2),
        (128, 32, 1024, 1024, 2, 1), (35, 20, 650, 650, 2, 1), (256, 16, 128, 512, 1, 2))
    """(seq, batch, input, hidden, layers, directions) of the LSTM and GRU cases: one layer
    over sequence, batch and width, then stacks, bidirectional layers and the zoo's LSTM."""
    rnn_dtypes: tuple[str, ...] = ("fp16", "fp32")
    """fp16: what autocast runs a CUDA build's cuDNN RNN in (whatever the autocast dtype)."""


@dataclass(frozen=True, slots=True)
class ModelParams:
    """A transformer's parameter list, for optimizer steps over realistic tensor counts."""

    name: str
    dim: int
    layers: int
    ffn: int
    vocab: int
    kv_dim: int
    gated: bool
    """SwiGLU MLP (three matrices) instead of two."""
    biases: bool
    """Linear and norm biases (GPT-2) or none (Llama)."""
    tied: bool
    """Output head shares the embedding."""
    positions: int
    shard: int = 1
    """Each tensor's first dimension divided by this: one rank's FSDP2 shard."""

    def shapes(self) -> list[tuple[int, ...]]:
        """The parameter shapes: embeddings, per layer two norms and the attention and MLP
        matrices (with their biases if any), final norm, head."""
        d, qkv = self.dim, self.dim + 2 * self.kv_dim
        norm: list[tuple[int, ...]] = [(d,), (d,)] if self.biases else [(d,)]
        mats: list[tuple[int, ...]] = [(qkv, d), (d, d), (self.ffn, d), (d, self.ffn)]
        mats += [(self.ffn, d)] if self.gated else []
        layer = norm + norm + mats + ([(m[0],) for m in mats] if self.biases else [])
        out: list[tuple[int, ...]] = [(self.vocab, d)]
        out += [(self.positions, d)] if self.positions else []
        out += layer * self.layers + norm + ([] if self.tied else [(self.vocab, d)])
        return [(max(1, s[0] // self.shard), *s[1:]) for s in out]


GPT2_124M = ModelParams("gpt2-124m", 768, 12, 3072, 50304, 768, False, True, True, 1024)
FULL = Grid(
    linear_pairs=(
        # GPT-2 small / medium, a 1.3B GPT: qkv, attn-out, fc, proj, head
        (768, 2304), (768, 768), (768, 3072), (3072, 768), (768, 50304),
        (1024, 3072), (1024, 1024), (1024, 4096), (4096, 1024), (1024, 50304),
        (2048, 6144), (2048, 2048), (2048, 8192), (8192, 2048), (2048, 50304),
        # Llama-2-7B, Llama-3-8B (GQA qkv, SwiGLU 14336, 128k vocab), Llama-2-13B
        (4096, 12288), (4096, 4096), (4096, 11008), (11008, 4096), (4096, 32000),
        (4096, 6144), (4096, 14336), (14336, 4096), (4096, 128256),
        (5120, 15360), (5120, 5120), (5120, 13824), (13824, 5120),
        # Llama-3-70B, Llama-3-405B
        (8192, 10240), (8192, 8192), (8192, 28672), (28672, 8192), (8192, 128256),
        (16384, 18432), (16384, 16384), (16384, 53248), (53248, 16384),
    ),
    tokens_first=(2048, 8192, 32768),
    tokens_later=(512, 1024, 4096, 16384),
    cube=(128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    cube_coarse=(256, 1024, 4096, 16384),
    other_dtype_pairs=((768, 3072), (3072, 768), (4096, 4096), (4096, 14336), (14336, 4096),
                       (8192, 8192)),
    other_dtype_tokens=(2048, 8192),
    bmm=tuple((b, m, n, k) for b in (8, 32, 128) for s in (512, 2048) for d in (64, 128)
              for (m, n, k) in ((s, s, d), (s, d, s))),
    seqs=(512, 1024, 2048, 4096, 8192, 16384, 32768),
    attn_tokens=16384,
    numels=tuple(2**e for e in range(16, 31)),
    warm_numels=(2**16, 2**18, 2**20, 2**22),
    hiddens=(768, 4096, 8192),
    softmax_dims=(1024, 4096),
    ce_tokens=(1024, 4096, 16384),
    vocabs=(50304, 128256),
    embeddings=((50304, 768), (128256, 4096)),
    emb_tokens=(2048, 8192, 32768),
    models=(
        GPT2_124M,
        ModelParams("gpt2-124m-fsdp8", 768, 12, 3072, 50304, 768, False, True, True, 1024, 8),
        ModelParams("llama3-8b-2layers", 4096, 2, 14336, 128256, 1024, True, False, False, 0),
    ),
    max_fp32_flops=3 * 10**12,
    more_tokens=(3072, 6144, 12288, 24576),
    more_pairs=((768, 2304), (768, 3072), (3072, 768), (4096, 6144), (4096, 4096),
                (4096, 14336), (14336, 4096), (4096, 128256)),
    moe_bmm=tuple((e, t, n, k) for e in (8, 64) for t in (512, 2048)
                  for n, k in ((2 * 14336, 4096), (4096, 14336), (2 * 1408, 2048), (2048, 1408))
                  if e * t * n * k <= 2**42),
    holdout=256,
    more_hiddens=(1024, 2048, 16384),
    more_softmax_dims=(512, 2048, 8192, 32768),
    more_vocabs=(32000, 151936),
    more_embeddings=((32000, 4096), (50304, 2048), (128256, 8192)),
    max_case_bytes=6 * 2**30,
)
SMOKE = Grid(
    linear_pairs=((64, 192), (96, 32)), tokens_first=(64,), tokens_later=(32,),
    cube=(16, 64), cube_coarse=(32,), other_dtype_pairs=((64, 96),), other_dtype_tokens=(32,),
    bmm=((2, 32, 32, 16), (2, 32, 16, 32)), seqs=(64, 128), attn_tokens=256,
    numels=(2**10, 2**12), warm_numels=(2**10,), hiddens=(64,), softmax_dims=(128,),
    ce_tokens=(16,), vocabs=(1000,), embeddings=((1000, 64),), emb_tokens=(32,),
    models=(ModelParams("tiny", 64, 2, 256, 1000, 64, False, True, True, 128),
            ModelParams("tiny-gated", 64, 1, 192, 1000, 32, True, False, False, 0, 2)),
    max_fp32_flops=10**9,
    more_tokens=(48,), more_pairs=((64, 96),), moe_bmm=((2, 32, 64, 32),), holdout=8,
    more_hiddens=(32,), more_softmax_dims=(64,), more_vocabs=(500,), more_embeddings=((500, 32),),
    max_case_bytes=2**22, conv_batches=(2,), conv_other_batch=2, image=32, unet_batch=1,
    unet_latent=8, triton_numels=(2**12,), grouped_rows=(64,), grouped_shapes=((2, 32, 64),),
    rnn_shapes=((8, 2, 16, 32, 1, 1), (4, 2, 16, 16, 2, 2)), rnn_dtypes=("fp32",),
)


# --- cases ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    """One op at one shape and dtype: what to build, and its nominal work."""

    section: str
    op: str
    dtype: str
    shape: dict[str, Any]
    flops: int
    io_bytes: int
    """Compulsory traffic: each input read once, each output written once."""
    build: Callable[[torch.device], Call]
    """Makes one input set on the device and returns the call to time."""
    cache: str = "cold"
    """``cold``: rotate input sets past the L2; ``warm``: reuse one set."""
    aten_ops: str = ""
    """What the ``aten_ops`` column says where the ops are not recorded (compiled calls, which
    a dispatch mode would make recompile)."""

    @property
    def key(self) -> str:
        """Identity in results.csv, for skipping rows a previous run already has."""
        return json.dumps([self.section, self.op, self.dtype, self.cache, self.shape],
                          sort_keys=True)

    def estimate_us(self) -> float:
        """Roofline guess of one call on an H100-class GPU."""
        tflops = EST_TFLOPS.get(self.dtype, EST_TFLOPS["bf16"]) if self.section in (
            "matmul", "attention") else math.inf
        return max(self.flops / tflops / 1e6, self.io_bytes / EST_GBS / 1e3, EST_LAUNCH_US)


def _randn(shape: Sequence[int], dtype: str | torch.dtype, device: torch.device,
           grad: bool = False) -> torch.Tensor:
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    return torch.randn(*shape, dtype=dt, device=device, requires_grad=grad)


def _operand(rows: int, cols: int, dtype: str, device: torch.device, transposed: bool,
             batch: int = 0) -> torch.Tensor:
    """A rows x cols operand, stored as the transpose of a contiguous buffer if ``transposed``
    (``dW = dY^T X`` reads dY that way, ``Y = X W^T`` reads W that way)."""
    lead = (batch,) if batch else ()
    if transposed:
        return _randn((*lead, cols, rows), dtype, device).transpose(-1, -2)
    return _randn((*lead, rows, cols), dtype, device)


def _log_int(rng: random.Random, lo: int, hi: int, multiple: int) -> int:
    """A log-uniform integer in [lo, hi], rounded to ``multiple`` (shapes are rarely odd)."""
    value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return max(multiple, round(value / multiple) * multiple)


def _holdout(case: Case) -> Case:
    """The case marked as an off-grid check point."""
    return replace(case, shape=case.shape | {"holdout": True})


def matmul_case(op: str, dtype: str, m: int, n: int, k: int, layout: str,
                batch: int = 0) -> Case:
    """``op`` in mm/addmm/linear/bmm computing [m, k] x [k, n]; ``layout`` says which operand is
    stored transposed ("nt": B, as linear's weight; "tn": A; "nn": neither)."""
    ta, tb = layout[0] == "t", layout[1] == "t"
    with_bias = op in ("addmm", "linear")
    if op == "linear" and layout != "nt":
        raise ValueError(f"linear stores its weight as [out, in]: layout must be 'nt', "
                         f"got {layout}")

    def build(device: torch.device) -> Call:
        a = _operand(m, k, dtype, device, ta, batch)
        b = _operand(k, n, dtype, device, tb, batch)
        bias = _randn((n,), dtype, device)
        if op == "mm":
            return lambda: torch.mm(a, b)
        if op == "bmm":
            return lambda: torch.bmm(a, b)
        if op == "addmm":
            return lambda: torch.addmm(bias, a, b)
        weight = b.t()  # [n, k], contiguous
        return lambda: F.linear(a, weight, bias)

    nb = max(batch, 1)
    es = ELEM_BYTES[dtype]
    shape = {"m": m, "n": n, "k": k, "layout": layout} | ({"batch": batch} if batch else {})
    return Case("matmul", op, dtype, shape,
                flops=2 * nb * m * n * k + (m * n if with_bias else 0),
                io_bytes=es * (nb * (m * k + k * n + m * n) + (n if with_bias else 0)),
                build=build)


def matmul_cases(grid: Grid) -> Iterator[Case]:
    """Linear layers of real models (their three GEMMs) first, then sweeps to interpolate in."""

    def linear_layer(dtype: str, tokens: int, fin: int, fout: int,
                     bias_row: bool) -> Iterator[Case]:
        yield matmul_case("mm", dtype, tokens, fout, fin, "nt")   # Y = X W^T (no bias)
        yield matmul_case("mm", dtype, tokens, fin, fout, "nn")   # dX = dY W
        yield matmul_case("mm", dtype, fout, fin, tokens, "tn")   # dW = dY^T X
        if bias_row:
            yield matmul_case("linear", dtype, tokens, fout, fin, "nt")  # Y = X W^T + b (addmm)

    for tokens in grid.tokens_first:
        for fin, fout in grid.linear_pairs:
            yield from linear_layer("bf16", tokens, fin, fout, True)
    for m in grid.cube:
        for n in grid.cube:
            for k in grid.cube:
                yield matmul_case("mm", "bf16", m, n, k, "nn")
    for layout in ("nt", "tn"):
        for m in grid.cube:
            for n in grid.cube:
                for k in grid.cube:
                    yield matmul_case("mm", "bf16", m, n, k, layout)
    for m in grid.cube_coarse:
        for k in grid.cube_coarse:
            yield matmul_case("addmm", "bf16", m, 4 * k, k, "nn")
    for batch, m, n, k in grid.bmm:
        yield matmul_case("bmm", "bf16", m, n, k, "nt" if n == m else "nn", batch)
    for dtype in ("fp16", "tf32", "fp32"):
        for tokens in grid.other_dtype_tokens:
            for fin, fout in grid.other_dtype_pairs:
                for case in linear_layer(dtype, tokens, fin, fout, dtype == "fp16"):
                    if dtype != "fp32" or case.flops <= grid.max_fp32_flops:
                        yield case
        for m in grid.cube_coarse:
            for n in grid.cube_coarse:
                for k in grid.cube_coarse:
                    if dtype != "fp32" or 2 * m * n * k <= grid.max_fp32_flops:
                        yield matmul_case("mm", dtype, m, n, k, "nn")
    for tokens in grid.tokens_later:
        for fin, fout in grid.linear_pairs:
            yield from linear_layer("bf16", tokens, fin, fout, False)
    # Second round.
    for tokens in grid.more_tokens:
        for fin, fout in grid.more_pairs:
            yield from linear_layer("bf16", tokens, fin, fout, False)
    for experts, tokens, fout, fin in grid.moe_bmm:  # expert weights stored [E, out, in]
        yield matmul_case("bmm", "bf16", tokens, fout, fin, "nt", experts)
    rng = random.Random(0)
    for dtype, count in (("bf16", grid.holdout), ("fp16", grid.holdout // 8),
                         ("tf32", grid.holdout // 8)):
        made = 0
        while made < count:
            m, n, k = (_log_int(rng, 64, 32768, 8) for _ in range(3))
            case = matmul_case("mm", dtype, m, n, k, rng.choice(("nn", "nt", "tn")))
            if case.io_bytes <= grid.max_case_bytes and case.flops <= 2**43:
                made += 1
                yield _holdout(case)


# "default" rows force nothing: what stock PyTorch picks (the aten_ops column names it).
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def sdpa_case(direction: str, backend: str, batch: int, heads: int, kv_heads: int, seq: int,
              head_dim: int, causal: bool) -> Case:
    """``scaled_dot_product_attention`` forward, or its backward through autograd, bf16."""
    gqa = kv_heads != heads

    def build(device: torch.device) -> Call:
        grad = direction == "bwd"
        q = _randn((batch, heads, seq, head_dim), "bf16", device, grad)
        k = _randn((batch, kv_heads, seq, head_dim), "bf16", device, grad)
        v = _randn((batch, kv_heads, seq, head_dim), "bf16", device, grad)

        def forward() -> torch.Tensor:
            forced = sdpa_kernel(BACKENDS[backend]) if backend in BACKENDS else None
            with forced or contextlib.nullcontext():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        if not grad:
            return forward
        out = forward()
        dout = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    # Scores and P.V are 2 * s^2 * d multiply-adds per head; backward recomputes the scores and
    # does four more products (dV, dP, dQ, dK): 2.5x forward. Causal does half the score matrix.
    fwd_flops = 4 * batch * heads * seq * seq * head_dim // (2 if causal else 1)
    tokens = batch * seq * head_dim * 2
    lse = 4 * batch * heads * seq
    io = (tokens * (2 * heads + 2 * kv_heads) + lse if direction == "fwd"
          else tokens * (4 * heads + 4 * kv_heads) + lse)
    shape = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "seq": seq,
             "head_dim": head_dim, "causal": causal, "backend": backend}
    return Case("attention", f"sdpa_{direction}", "bf16", shape,
                flops=fwd_flops * (5 if direction == "bwd" else 2) // 2, io_bytes=io, build=build)


def attention_cases(grid: Grid) -> Iterator[Case]:
    """Heads x head_dim of GPT-2/Llama-class models, at a GPU-filling batch and at batch 1."""
    configs = (  # (heads, kv_heads, head_dim, full batch?, backends)
        (32, 32, 128, True, ("flash", "cudnn")),
        (32, 8, 128, True, ("flash", "cudnn")),
        (16, 16, 64, True, ("flash",)),
        (8, 8, 128, False, ("flash",)),
        (12, 12, 64, True, ("flash",)),
        (64, 8, 128, True, ("flash",)),
    )
    for heads, kv_heads, head_dim, full, backends in configs:
        for backend in backends:
            for seq in grid.seqs:
                batch = max(1, grid.attn_tokens // seq) if full else 1
                for causal in (True, False):
                    for direction in ("fwd", "bwd"):
                        yield sdpa_case(direction, backend, batch, heads, kv_heads, seq,
                                        head_dim, causal)
    # Second round: PyTorch's own choice (cuDNN on Hopper with torch 2.11) for Llama-class
    # head_dim 128 and for the example models' head_dim 64 (GPT-2 124M/350M, Llama-1B with its
    # key/value heads repeated, and with GQA), then random off-grid shapes.
    default_configs = (*((h, kv, d) for h, kv, d, _, _ in configs[:2]),
                       (12, 12, 64), (16, 16, 64), (32, 32, 64), (32, 8, 64))
    for heads, kv_heads, head_dim in default_configs:
        for seq in grid.seqs:
            for causal in (True, False):
                for direction in ("fwd", "bwd"):
                    yield sdpa_case(direction, "default", max(1, grid.attn_tokens // seq), heads,
                                    kv_heads, seq, head_dim, causal)
    rng = random.Random(1)
    made = 0
    while made < grid.holdout // 4:
        heads = rng.choice((8, 12, 16, 24, 32, 40))
        case = sdpa_case(rng.choice(("fwd", "bwd")), rng.choice(("flash", "cudnn")),
                         rng.randint(1, 8), heads, rng.choice((heads, heads // 4)),
                         _log_int(rng, 256, 16384, 64), rng.choice((64, 128)),
                         rng.random() < 0.5)
        if case.io_bytes <= grid.max_case_bytes and case.flops <= 2**44:
            made += 1
            yield _holdout(case)


@dataclass(frozen=True, slots=True)
class Pointwise:
    """An op over whole tensors of one size: how to call it, and its traffic per element."""

    args: int
    """Tensor arguments, each ``numel`` elements of the case's dtype."""
    reads: int
    """Tensors of that size read..."""
    writes: int
    """...and written."""
    flops_per_elem: int
    fn: Callable[..., object]
    extra_bytes_per_elem: int = 0


POINTWISE: dict[str, Pointwise] = {
    "add": Pointwise(2, 2, 1, 1, torch.add),
    "add_scalar": Pointwise(1, 1, 1, 1, lambda x: x + 1.5),
    "mul": Pointwise(2, 2, 1, 1, torch.mul),
    "mul_scalar": Pointwise(1, 1, 1, 1, lambda x: x * 1.5),
    "copy_": Pointwise(2, 1, 1, 0, lambda dst, src: dst.copy_(src)),
    "fill_": Pointwise(1, 0, 1, 0, lambda x: x.fill_(1.5)),
    "zero_": Pointwise(1, 0, 1, 0, lambda x: x.zero_()),
    "dropout": Pointwise(1, 1, 1, 2, lambda x: F.dropout(x, 0.1, training=True), 1),  # bool mask
    "gelu": Pointwise(1, 1, 1, 20, F.gelu),
    "gelu_backward": Pointwise(2, 2, 1, 30, torch.ops.aten.gelu_backward),
    "silu": Pointwise(1, 1, 1, 5, F.silu),
    "silu_backward": Pointwise(2, 2, 1, 8, torch.ops.aten.silu_backward),
    "sum": Pointwise(1, 1, 0, 1, torch.sum),
}
# Second round: more pointwise ops at every other size.
MORE_POINTWISE: dict[str, Pointwise] = {
    "div": Pointwise(2, 2, 1, 1, torch.div),
    "pow": Pointwise(1, 1, 1, 1, lambda x: x.pow(2)),
    "addcmul_": Pointwise(3, 3, 1, 2, lambda x, a, b: x.addcmul_(a, b, value=0.5)),
    "cat": Pointwise(2, 2, 2, 0, lambda x, y: torch.cat((x, y))),
    # The head split/merge of attention: a transposing copy ([n/1024, 1024] -> its transpose).
    "contiguous_t": Pointwise(1, 1, 1, 0, lambda x: x.view(-1, 1024).t().contiguous()),
}
CASTS = (("fp32", "bf16"), ("bf16", "fp32"))


def pointwise_case(op: str, dtype: str, numel: int, cache: str) -> Case:
    """One ``POINTWISE`` op over tensors of ``numel`` elements."""
    spec = POINTWISE[op] if op in POINTWISE else MORE_POINTWISE[op]

    def build(device: torch.device) -> Call:
        args = [_randn((numel,), dtype, device) for _ in range(spec.args)]
        return lambda: spec.fn(*args)

    io = numel * (ELEM_BYTES[dtype] * (spec.reads + spec.writes) + spec.extra_bytes_per_elem)
    return Case("memory", op, dtype, {"numel": numel}, spec.flops_per_elem * numel, io, build,
                cache)


STRIDED_POINTWISE: dict[str, Callable[..., object]] = {"mul": torch.mul, "add": torch.add}
"""Binary ops timed on a strided first operand and a broadcast second one, as rotary position
embeddings call them (``x[..., :half] * cos``): PyTorch then runs its non-vectorised
``elementwise_kernel`` instead of the vectorised one the contiguous rows time."""
STRIDED_HALF = 32
"""Width of the half-row views (rotary: head_dim 64)."""


def strided_case(op: str, dtype: str, numel: int) -> Case:
    """``op(x[:, :32], b)``: ``x`` has rows of 64 elements, ``b`` is one row of 32 broadcast
    over all rows; ``numel`` output elements (``layout: strided`` in the row's shape)."""
    rows = max(1, numel // STRIDED_HALF)

    def build(device: torch.device) -> Call:
        x = _randn((rows, 2 * STRIDED_HALF), dtype, device)
        b = _randn((1, STRIDED_HALF), dtype, device)
        view = x[:, :STRIDED_HALF]
        return lambda: STRIDED_POINTWISE[op](view, b)

    io = (2 * rows * STRIDED_HALF + STRIDED_HALF) * ELEM_BYTES[dtype]
    return Case("memory", op, dtype, {"numel": rows * STRIDED_HALF, "layout": "strided"},
                rows * STRIDED_HALF, io, build)


def cast_case(src: str, dst: str, numel: int) -> Case:
    """``Tensor.to(dtype)`` (aten ``_to_copy``), the casts autocast and mixed precision add."""

    def build(device: torch.device) -> Call:
        x = _randn((numel,), src, device)
        return lambda: x.to(DTYPES[dst])

    return Case("memory", "_to_copy", f"{src}->{dst}", {"numel": numel}, numel,
                numel * (ELEM_BYTES[src] + ELEM_BYTES[dst]), build)


def rows_case(op: str, direction: str, dtype: str, rows: int, cols: int, cache: str = "cold",
              ) -> Case:
    """Row-wise ops over [rows, cols]: norms, softmax, row reductions; backward via autograd."""
    es = ELEM_BYTES[dtype]
    n = rows * cols
    params = {"layer_norm": 2, "rms_norm": 1}.get(op, 0)

    def build(device: torch.device) -> Call:
        x = _randn((rows, cols), dtype, device, direction == "bwd")
        ws = [_randn((cols,), dtype, device, direction == "bwd") for _ in range(params)]

        def forward() -> torch.Tensor:
            if op == "layer_norm":
                return F.layer_norm(x, (cols,), weight=ws[0], bias=ws[1])
            if op == "rms_norm":
                return F.rms_norm(x, (cols,), weight=ws[0])
            if op == "softmax":
                return torch.softmax(x, -1)
            if op == "sum_dim0":
                return x.sum(0)
            return x.mean(-1)

        if direction == "fwd":
            return forward
        y = forward()
        dy = torch.randn_like(y)
        return lambda: torch.autograd.grad(y, (x, *ws), dy, retain_graph=True)

    reduces = op in ("sum_dim0", "mean_dim1")
    out = rows if op == "mean_dim1" else cols if op == "sum_dim0" else n
    # Backward reads x (norms; softmax reads y instead) and dy, writes dx (+ weight grads).
    io = es * (n + out) if direction == "fwd" else es * (3 * n + 2 * params * cols)
    flops = {"layer_norm": 8, "rms_norm": 5, "softmax": 5}.get(op, 1) * n
    name = op if reduces else f"{op}_{direction}"
    return Case("memory", name, dtype, {"rows": rows, "cols": cols}, flops * (
        2 if direction == "bwd" else 1), io, build, cache)


def cross_entropy_case(direction: str, dtype: str, tokens: int, vocab: int) -> Case:
    """``F.cross_entropy`` over [tokens, vocab] logits (log_softmax + nll_loss) and its backward."""

    def build(device: torch.device) -> Call:
        logits = _randn((tokens, vocab), dtype, device, direction == "bwd")
        target = torch.randint(0, vocab, (tokens,), device=device)
        if direction == "fwd":
            return lambda: F.cross_entropy(logits, target)
        loss = F.cross_entropy(logits, target)
        one = torch.ones_like(loss)
        return lambda: torch.autograd.grad(loss, logits, one, retain_graph=True)

    n = tokens * vocab
    es = ELEM_BYTES[dtype]
    io = n * es * (1 if direction == "fwd" else 2) + tokens * INDEX_BYTES
    return Case("memory", f"cross_entropy_{direction}", dtype, {"tokens": tokens, "vocab": vocab},
                5 * n * (2 if direction == "bwd" else 1), io, build)


def embedding_case(direction: str, dtype: str, vocab: int, dim: int, tokens: int) -> Case:
    """``F.embedding`` (a gather) and its backward (``embedding_dense_backward``: zero the table's
    gradient, scatter-add the rows)."""

    def build(device: torch.device) -> Call:
        weight = _randn((vocab, dim), dtype, device, direction == "bwd")
        ids = torch.randint(0, vocab, (tokens,), device=device)
        if direction == "fwd":
            return lambda: F.embedding(ids, weight)
        out = F.embedding(ids, weight)
        dout = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, weight, dout, retain_graph=True)

    es = ELEM_BYTES[dtype]
    io = (2 * tokens * dim * es if direction == "fwd" else (tokens + vocab) * dim * es)
    return Case("memory", f"embedding_{direction}", dtype,
                {"vocab": vocab, "dim": dim, "tokens": tokens},
                0 if direction == "fwd" else tokens * dim, io + tokens * INDEX_BYTES, build)


def memory_cases(grid: Grid) -> Iterator[Case]:
    """Pointwise ops and casts over every size, then row-wise ops, cross-entropy, embedding."""
    for numel in grid.numels:
        for dtype in ("bf16", "fp32"):
            for op in POINTWISE:
                yield pointwise_case(op, dtype, numel, "cold")
            for hidden in grid.hiddens[1:2]:
                if numel >= hidden:
                    for op in ("sum_dim0", "mean_dim1"):
                        yield rows_case(op, "fwd", dtype, numel // hidden, hidden)
        for src, dst in CASTS:
            yield cast_case(src, dst, numel)
    for numel in grid.warm_numels:
        for op in ("add", "copy_", "gelu"):
            yield pointwise_case(op, "bf16", numel, "warm")
        yield rows_case("layer_norm", "fwd", "bf16", numel // grid.hiddens[0], grid.hiddens[0],
                        "warm")
    yield from norm_cases(grid.numels, grid.hiddens, grid.softmax_dims)
    for dtype in ("bf16", "fp32"):
        yield from vocab_cases(dtype, grid.vocabs, grid.ce_tokens, grid.embeddings,
                               grid.emb_tokens)
    # Second round.
    for numel in grid.numels[::2]:
        for dtype in ("bf16", "fp32"):
            for op in MORE_POINTWISE:
                yield pointwise_case(op, dtype, numel, "cold")
    yield from norm_cases(grid.numels[::2], grid.more_hiddens, grid.more_softmax_dims)
    for numel in grid.numels[::2]:
        for op in STRIDED_POINTWISE:
            yield strided_case(op, "bf16", numel)
    yield from vocab_cases("bf16", grid.more_vocabs, grid.ce_tokens, grid.more_embeddings,
                           grid.emb_tokens)
    rng = random.Random(2)
    for _ in range(grid.holdout // 4):
        numel = _log_int(rng, 2**16, 2**30, 1024)
        for op in ("add", "copy_", "gelu"):
            yield _holdout(pointwise_case(op, "bf16", numel, "cold"))
        cols = rng.choice((768, 1024, 2048, 4096, 5120, 8192))
        for op in ("layer_norm", "rms_norm"):
            for direction in ("fwd", "bwd"):
                yield _holdout(rows_case(op, direction, "bf16", max(1, numel // cols), cols))


def norm_cases(numels: Iterable[int], hiddens: Sequence[int],
               softmax_dims: Sequence[int]) -> Iterator[Case]:
    """layer_norm, rms_norm and softmax forward and backward, bf16 and fp32 (autocast runs all
    three in fp32), over [numel / cols, cols]."""
    for numel in numels:
        for dtype in ("bf16", "fp32"):
            for op, cols_list in (("layer_norm", hiddens), ("rms_norm", hiddens),
                                  ("softmax", softmax_dims)):
                for cols in cols_list:
                    if numel >= cols:
                        for direction in ("fwd", "bwd"):
                            yield rows_case(op, direction, dtype, numel // cols, cols)


def vocab_cases(dtype: str, vocabs: Sequence[int], ce_tokens: Sequence[int],
                embeddings: Sequence[tuple[int, int]], emb_tokens: Sequence[int],
                ) -> Iterator[Case]:
    """Cross-entropy over each vocabulary and embedding tables, forward and backward."""
    for vocab in vocabs:
        for tokens in ce_tokens:
            for direction in ("fwd", "bwd"):
                yield cross_entropy_case(direction, dtype, tokens, vocab)
    for vocab, dim in embeddings:
        for tokens in emb_tokens:
            for direction in ("fwd", "bwd"):
                yield embedding_case(direction, dtype, vocab, dim, tokens)


# Per element: bytes read + written, nominal FLOPs.
OPTIMIZER_OPS: dict[str, tuple[int, int]] = {
    "adamw_fused": (28, 12), "adamw_foreach": (28, 12),  # read p, g, m, v; write p, m, v
    "sgd_momentum_fused": (20, 3), "sgd_momentum_foreach": (20, 3),  # read p, g, buf; write p, buf
    "_foreach_add_": (12, 1), "_foreach_mul_": (8, 1), "_foreach_norm": (4, 2),
    "_foreach_zero_": (4, 0), "clip_grad_norm_": (12, 3),  # norm pass, then scale pass
}


def optimizer_case(op: str, model: ModelParams, dtype: str = "fp32") -> Case:
    """One optimizer step or ``_foreach_*`` call over ``model``'s parameters; fp32 is the
    mixed-precision master copy, bf16 pure-bf16 training."""

    def build(device: torch.device) -> Call:
        params = [torch.nn.Parameter(_randn(s, dtype, device)) for s in model.shapes()]
        grads = [torch.randn_like(p) for p in params]
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        if op.startswith(("adamw", "sgd")):
            fused = op.endswith("_fused")
            opt: torch.optim.Optimizer = (
                torch.optim.AdamW(params, lr=1e-4, fused=fused, foreach=not fused)
                if op.startswith("adamw")
                else torch.optim.SGD(params, lr=1e-4, momentum=0.9, fused=fused,
                                     foreach=not fused))
            return opt.step
        if op == "_foreach_add_":
            acc = [torch.randn_like(p) for p in params]
            return lambda: torch._foreach_add_(acc, grads)
        if op == "_foreach_mul_":
            return lambda: torch._foreach_mul_(grads, 0.999)
        if op == "_foreach_norm":
            return lambda: torch._foreach_norm(grads)
        if op == "_foreach_zero_":
            return lambda: torch._foreach_zero_(grads)
        return lambda: torch.nn.utils.clip_grad_norm_(params, 1e9, foreach=True)

    numel = sum(math.prod(s) for s in model.shapes())
    io_per, flops_per = OPTIMIZER_OPS[op]  # fp32 bytes per element
    shape = {"model": model.name, "tensors": len(model.shapes()), "numel": numel}
    return Case("optimizer", op, dtype, shape, flops_per * numel,
                io_per * numel * ELEM_BYTES[dtype] // 4, build)


def optimizer_cases(grid: Grid) -> Iterator[Case]:
    """Every optimizer op over every model's parameter list."""
    for model in grid.models:
        for op in OPTIMIZER_OPS:
            yield optimizer_case(op, model)
    # Second round: the largest model sharded 8 ways; bf16 parameters.
    sharded = replace(grid.models[-1], name=f"{grid.models[-1].name}-fsdp8", shard=8)
    for op in OPTIMIZER_OPS:
        yield optimizer_case(op, sharded)
    for op in ("adamw_fused", "adamw_foreach", "sgd_momentum_fused", "sgd_momentum_foreach"):
        yield optimizer_case(op, grid.models[0], "bf16")


# --- other model families (issue 15) -----------------------------------------------------------


def resnet50_convs(image: int) -> list[tuple[int, int, int, int, int]]:
    """Distinct convolutions of ResNet-50 (v1.5) at ``image`` pixels: (in channels, out
    channels, kernel, stride, input size), stem first."""
    convs = [(3, 64, 7, 2, image)]
    channels, size = 64, image // 4
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for index in range(blocks):
            s = stride if index == 0 else 1
            convs += [(channels, width, 1, 1, size), (width, width, 3, s, size),
                      (width, 4 * width, 1, 1, size // s)]
            if index == 0:
                convs.append((channels, 4 * width, 1, s, size))
            channels, size = 4 * width, size // s
    return list(dict.fromkeys(convs))


def unet_convs(latent: int) -> list[tuple[int, int, int, int, int]]:
    """3x3 convolutions of a Stable-Diffusion-style UNet at each of its resolutions."""
    return [(4, 320, 3, 1, latent), (320, 320, 3, 1, latent), (320, 640, 3, 1, latent // 2),
            (640, 640, 3, 1, latent // 2), (1280, 1280, 3, 1, latent // 4),
            (1280, 1280, 3, 1, latent // 8), (2560, 1280, 3, 1, latent // 8)]


CONV_LAYOUTS = {"nhwc": torch.channels_last, "nchw": torch.contiguous_format}


def conv_case(direction: str, dtype: str, batch: int, conv: tuple[int, int, int, int, int],
              layout: str) -> Case:
    """``conv2d`` (cuDNN, ``cudnn.benchmark`` on) forward, or ``convolution_backward`` with the
    input and weight gradients (``bwd``) or the weight gradient only (``bwd_w``: the first layer,
    whose input needs none). Padding keeps the size (``kernel // 2``), except the patch
    convolution (kernel = stride): no padding."""
    cin, cout, kernel, stride, size = conv
    pad = 0 if kernel == stride else kernel // 2
    out_size = (size + 2 * pad - kernel) // stride + 1
    fmt = CONV_LAYOUTS[layout]
    es = ELEM_BYTES[dtype]

    def build(device: torch.device) -> Call:
        torch.backends.cudnn.benchmark = True
        x = _randn((batch, cin, size, size), dtype, device).to(memory_format=fmt)
        w = _randn((cout, cin, kernel, kernel), dtype, device).to(memory_format=fmt)
        if direction == "fwd":
            return lambda: F.conv2d(x, w, stride=stride, padding=pad)
        dy = _randn((batch, cout, out_size, out_size), dtype, device).to(memory_format=fmt)
        mask = [direction == "bwd", True, False]
        return lambda: torch.ops.aten.convolution_backward(
            dy, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, mask)

    n_in, n_w, n_out = batch * cin * size * size, cout * cin * kernel * kernel, \
        batch * cout * out_size * out_size
    flops = 2 * batch * cout * out_size * out_size * cin * kernel * kernel
    if direction == "fwd":
        io, work = n_in + n_w + n_out, flops
    elif direction == "bwd":
        io, work = n_out + n_in + n_w + n_in + n_w, 2 * flops
    else:
        io, work = n_out + n_in + n_w, flops
    shape = {"n": batch, "c": cin, "k": cout, "size": size, "kernel": kernel, "stride": stride,
             "pad": pad, "layout": layout}
    return Case("conv", f"conv_{direction}", dtype, shape, work, io * es, build)


def conv_cases(grid: Grid) -> Iterator[Case]:
    """ResNet-50's convolutions (bf16 channels_last at ``conv_batches``; at one batch also fp16
    and fp32 channels_last and bf16 NCHW), ViT-B/16's patch convolution, a diffusion UNet's."""
    patch = (3, 768, 16, 16, grid.image)
    for batch in grid.conv_batches:
        for index, conv in enumerate(resnet50_convs(grid.image)):
            for direction in ("fwd", "bwd_w" if index == 0 else "bwd"):
                yield conv_case(direction, "bf16", batch, conv, "nhwc")
        for direction in ("fwd", "bwd_w"):
            yield conv_case(direction, "bf16", batch, patch, "nchw")
    for dtype, layout in (("fp16", "nhwc"), ("fp32", "nhwc"), ("bf16", "nchw")):
        for index, conv in enumerate(resnet50_convs(grid.image)):
            for direction in ("fwd", "bwd_w" if index == 0 else "bwd"):
                yield conv_case(direction, dtype, grid.conv_other_batch, conv, layout)
    for conv in unet_convs(grid.unet_latent):
        for layout in ("nhwc", "nchw"):
            for direction in ("fwd", "bwd"):
                yield conv_case(direction, "bf16", grid.unet_batch, conv, layout)


VISION_OPS: dict[str, tuple[str, Callable[..., torch.Tensor], int]] = {
    # name: (aten op the simulator records, the call, passes over the activation)
    "native_batch_norm": ("native_batch_norm",
                          lambda x, p: F.batch_norm(x, p[2], p[3], p[0], p[1], True), 2),
    "native_group_norm": ("native_group_norm",
                          lambda x, p: F.group_norm(x, 32, p[0], p[1]), 2),
    "max_pool2d_with_indices": ("max_pool2d_with_indices",
                                lambda x, p: F.max_pool2d(x, 3, 2, 1), 1),
    "upsample_nearest2d": ("upsample_nearest2d",
                           lambda x, p: F.interpolate(x, scale_factor=2.0, mode="nearest"), 1),
}
"""Normalisation, pooling and upsampling of CNNs and UNets; ``passes``: the input read plus the
output written, in multiples of the input (pooling writes a quarter, upsampling four times)."""


def vision_case(op: str, direction: str, dtype: str, batch: int, channels: int, size: int,
                layout: str) -> Case:
    """``op`` forward, or its backward through autograd, over an activation [batch, channels,
    size, size] in ``layout``. The row's ``op`` is the aten op the simulator records
    (``native_batch_norm_backward``), and its ``bytes`` what it counts for it: the activation's
    passes (norm backward: read x and dy, write dx; pooling backward: read dy and the indices,
    write dx)."""
    aten_name, fn, _ = VISION_OPS[op]
    es = ELEM_BYTES[dtype]
    fmt = CONV_LAYOUTS[layout]
    n = batch * channels * size * size
    pooled = n // 4 if op == "max_pool2d_with_indices" else 4 * n if op.startswith(
        "upsample") else n

    def build(device: torch.device) -> Call:
        x = _randn((batch, channels, size, size), dtype, device,
                   direction == "bwd").to(memory_format=fmt)
        params = [torch.ones(channels, device=device, requires_grad=direction == "bwd"),
                  torch.zeros(channels, device=device, requires_grad=direction == "bwd"),
                  torch.zeros(channels, device=device), torch.ones(channels, device=device)]
        if direction == "fwd":
            return lambda: fn(x, params)
        y = fn(x, params)
        dy = torch.randn_like(y)
        inputs = (x, *params[:2]) if "norm" in op else (x,)
        return lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True)

    if direction == "fwd":
        io = (n + pooled) * es + (pooled * INDEX_BYTES if op.startswith("max_pool") else 0)
        name = aten_name
    else:
        io = (2 * n + pooled) * es if "norm" in op else (n + pooled) * es + (
            pooled * INDEX_BYTES if op.startswith("max_pool") else 0)
        name = f"{aten_name}_backward"
    shape = {"n": batch, "c": channels, "size": size, "layout": layout}
    return Case("vision", name, dtype, shape, n, io, build)


def vision_cases(grid: Grid) -> Iterator[Case]:
    """Batch norm and ReLU-sized activations of ResNet-50 (channels_last), its max pool, and a
    UNet's group norm and nearest upsampling (NCHW), forward and backward, bf16 and fp32."""
    acts = [(64, grid.image // 2), (256, grid.image // 4), (64, grid.image // 4),
            (512, grid.image // 8), (1024, grid.image // 16), (2048, grid.image // 32)]
    for batch in (*grid.conv_batches, grid.conv_other_batch):
        for dtype in ("bf16", "fp32"):
            for channels, size in acts:
                for direction in ("fwd", "bwd"):
                    yield vision_case("native_batch_norm", direction, dtype, batch, channels,
                                      size, "nhwc")
            for direction in ("fwd", "bwd"):
                yield vision_case("max_pool2d_with_indices", direction, dtype, batch, 64,
                                  grid.image // 2, "nhwc")
    for scale in (1, 2, 4):
        for channels, size in ((320, grid.unet_latent), (640, grid.unet_latent // 2),
                               (1280, grid.unet_latent // 4)):
            for op in ("native_group_norm", "upsample_nearest2d"):
                for direction in ("fwd", "bwd"):
                    yield vision_case(op, direction, "bf16", grid.unet_batch * scale, channels,
                                      size, "nchw")


TRITON_KERNELS: dict[str, tuple[Callable[..., torch.Tensor], int, int, str]] = {
    # name: (function compiled, inputs read, outputs written, what Inductor launches)
    "triton_pointwise": (lambda x, y: torch.relu(x * y + 1.0), 2, 1, "triton_poi"),
    "triton_pointwise4": (lambda x, y, z, u: (x * y + z * u, x - u), 4, 2, "triton_poi"),
    "triton_rows": (lambda x, w: F.layer_norm(x * 2.0, x.shape[-1:], w) + x, 2, 1,
                    "triton_per"),
    "triton_sum_dim0": (lambda x, w: (x * w).sum(0), 2, 0, "triton_red"),
}
"""Inductor-generated Triton kernels: a pointwise fusion (2 in, 1 out; 4 in, 2 out), a
layer norm fused with its producer and a residual add (a persistent row reduction) and a
column reduction (the bias gradient). ``w`` is one row, broadcast (negligible bytes)."""
TRITON_ROW = 4096


def triton_case(name: str, dtype: str, numel: int) -> Case:
    """One call of ``torch.compile(fn, dynamic=False)`` over tensors of ``numel`` elements."""
    fn, reads, writes, kind = TRITON_KERNELS[name]
    es = ELEM_BYTES[dtype]
    rows = max(1, numel // TRITON_ROW)
    reduced = name == "triton_sum_dim0"

    def build(device: torch.device) -> Call:
        import torch._dynamo  # noqa: PLC0415  (only this section compiles)
        torch._dynamo.config.cache_size_limit = 4096
        compiled = torch.compile(fn, dynamic=False)
        if name.startswith("triton_pointwise"):
            args = [_randn((numel,), dtype, device) for _ in range(reads)]
        else:
            args = [_randn((rows, TRITON_ROW), dtype, device),
                    _randn((TRITON_ROW,), dtype, device)]
        return lambda: compiled(*args)

    elements = rows * TRITON_ROW if not name.startswith("triton_pointwise") else numel
    io = elements * es * (reads - (0 if name.startswith("triton_pointwise") else 1)) \
        + elements * es * writes + (TRITON_ROW * es if not name.startswith("triton_poi") else 0)
    if reduced:
        io += TRITON_ROW * es
    return Case("triton", name, dtype, {"numel": elements}, elements, io, build,
                aten_ops=kind)


def triton_cases(grid: Grid) -> Iterator[Case]:
    """Each Triton kernel at every size, bf16 and fp32."""
    for numel in grid.triton_numels:
        for dtype in ("bf16", "fp32"):
            for name in TRITON_KERNELS:
                yield triton_case(name, dtype, numel)


def grouped_case(direction: str, experts: int, rows: int, k: int, n: int) -> Case:
    """``torch._grouped_mm`` of an expert layer, rows split evenly over the experts, weights
    stored ``[E, n, k]`` (torchtitan's): forward ``[rows, k] x [E, n, k]ᵀ``, input gradient
    ``[rows, n] x [E, n, k]``, weight gradient ``[k, rows] x [rows, n] -> [E, k, n]``."""

    def build(device: torch.device) -> Call:
        ends = torch.arange(1, experts + 1, device=device, dtype=torch.int32) * (rows // experts)
        if direction == "fwd":
            x = _randn((rows, k), "bf16", device)
            w = _randn((experts, n, k), "bf16", device).transpose(-1, -2)
            return lambda: torch._grouped_mm(x, w, offs=ends)
        if direction == "dgrad":
            dy = _randn((rows, n), "bf16", device)
            w = _randn((experts, n, k), "bf16", device)
            return lambda: torch._grouped_mm(dy, w, offs=ends)
        xt = _randn((rows, k), "bf16", device).t()
        dy = _randn((rows, n), "bf16", device)
        return lambda: torch._grouped_mm(xt, dy, offs=ends)

    io = 2 * (rows * k + experts * k * n + rows * n)
    shape = {"experts": experts, "rows": rows, "k": k, "n": n, "direction": direction}
    return Case("grouped", "_grouped_mm", "bf16", shape, 2 * rows * k * n, io, build)


def grouped_cases(grid: Grid) -> Iterator[Case]:
    """Forward, input- and weight-gradient grouped GEMMs of MoE expert layers."""
    for rows in grid.grouped_rows:
        for experts, k, n in grid.grouped_shapes:
            if rows >= 16 * experts:
                for direction in ("fwd", "dgrad", "wgrad"):
                    yield grouped_case(direction, experts, rows, k, n)


RNN_MODULES = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}


def rnn_case(direction: str, cell: str, dtype: str,
             dims: tuple[int, int, int, int, int, int]) -> Case:
    """``aten::_cudnn_rnn`` (``fwd``) or its backward (``bwd``, input and weight gradients) of
    an ``nn.LSTM`` / ``nn.GRU`` in training mode, its weights flattened into cuDNN's buffer as
    ``Module.to('cuda')`` leaves them; sequence-first input, no dropout."""
    seq, batch, input_size, hidden, layers, directions = dims

    def build(device: torch.device) -> Call:
        module = RNN_MODULES[cell](input_size, hidden, layers, bidirectional=directions == 2)
        module = module.to(device=device, dtype=DTYPES[dtype])
        weights = module._flat_weights
        total = sum(w.numel() for w in weights)
        buffer = torch.empty(0, dtype=DTYPES[dtype], device=device).set_(
            weights[0].untyped_storage(), 0, (total,))
        x = _randn((seq, batch, input_size), dtype, device)
        hx = _randn((layers * directions, batch, hidden), dtype, device)
        cx = _randn((layers * directions, batch, hidden), dtype, device) if cell == "lstm" else None
        args = (weights, len(weights) // (layers * directions), buffer, hx, cx,
                CUDNN_MODES[cell], hidden, 0, layers, False, 0.0, True, directions == 2, [], None)
        if direction == "fwd":
            return lambda: torch.ops.aten._cudnn_rnn(x, *args)
        output, _hy, _cy, reserve, _ = torch.ops.aten._cudnn_rnn(x, *args)
        grad = torch.randn_like(output)
        rest = args[5:]
        return lambda: torch.ops.aten._cudnn_rnn_backward(
            x, weights, args[1], buffer, hx, cx, output, grad, None, None, *rest, reserve,
            [True, True, cx is not None, True])

    elements = seq * batch * (input_size + 2 * hidden * directions) * (2 if direction == "bwd" else 1)
    weights = sum(RNN_GATES[cell] * hidden * ((input_size if layer == 0 else hidden * directions)
                                              + hidden + 2) * directions for layer in range(layers))
    io = (elements + weights * (2 if direction == "bwd" else 1)) * ELEM_BYTES[dtype]
    shape = {"cell": cell, "seq": seq, "batch": batch, "input": input_size, "hidden": hidden,
             "layers": layers, "directions": directions, "pass": direction}
    return Case("rnn", f"{cell}_{direction}", dtype, shape,
                rnn_flops(cell, dims, seq * batch, direction == "bwd"), io, build)


def rnn_cases(grid: Grid) -> Iterator[Case]:
    """LSTM and GRU layers, forward and backward, in each dtype of ``grid.rnn_dtypes``."""
    for dims in grid.rnn_shapes:
        for dtype in grid.rnn_dtypes:
            for cell in RNN_MODULES:
                if dtype == "fp32" and rnn_flops(cell, dims, dims[0] * dims[1],
                                                 True) > grid.max_fp32_flops:
                    continue
                for direction in ("fwd", "bwd"):
                    yield rnn_case(direction, cell, dtype, dims)


CASE_SOURCES: dict[str, Callable[[Grid], Iterator[Case]]] = {
    "matmul": matmul_cases, "attention": attention_cases, "memory": memory_cases,
    "optimizer": optimizer_cases, "conv": conv_cases, "vision": vision_cases,
    "triton": triton_cases, "grouped": grouped_cases, "rnn": rnn_cases,
}


# --- timing -----------------------------------------------------------------------------------


class OpRecorder(TorchDispatchMode):
    """Names the aten ops one call dispatches, so each row says what the simulator will see."""

    def __init__(self) -> None:
        super().__init__()
        self.names: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name not in NO_KERNEL_OPS:
            self.names[name] += 1
        return func(*args, **(kwargs or {}))

    def summary(self) -> str:
        """``"mm"``, ``"native_layer_norm_backward"``, ``"_foreach_mul_x2+..."``."""
        return "+".join(n if c == 1 else f"{n}x{c}" for n, c in self.names.items())


@dataclass(slots=True)
class Timing:
    """Per-call device time of the repeats, in microseconds."""

    per_call_us: list[float]
    calls: int
    host_bound: bool


class Timer:
    """Times ``calls`` back-to-back invocations; the CUDA version hides the host behind a sleep."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.cycles_per_us = self._measure_sleep_rate() if self.cuda else 0.0

    def _measure_sleep_rate(self) -> float:
        """Cycles of ``torch.cuda._sleep`` per microsecond, read under load (boost clock)."""
        x = torch.randn(4096, 4096, device=self.device, dtype=torch.bfloat16)
        for _ in range(20):
            x @ x
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / (start.elapsed_time(end) * 1e3)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def _sleep(self, us: float) -> None:
        torch.cuda._sleep(int(us * self.cycles_per_us))

    def probe(self, calls: Sequence[Call], count: int) -> tuple[float, float]:
        """(device us, host us) per call over ``count`` calls behind a fixed sleep."""
        if not self.cuda:
            t0 = time.perf_counter()
            for i in range(count):
                calls[i % len(calls)]()
            per = (time.perf_counter() - t0) * 1e6 / count
            return per, per
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self._sleep(PROBE_SLEEP_US)
        start.record()
        t0 = time.perf_counter()
        for i in range(count):
            calls[i % len(calls)]()
        host_us = (time.perf_counter() - t0) * 1e6 / count
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / count, host_us

    def run(self, calls: Sequence[Call], count: int, repeats: int, prefill_us: float) -> Timing:
        """``repeats`` x (sleep, start event, ``count`` calls, end event, sync): the sync keeps
        the launch queue from filling, which would stall the host mid-repeat."""
        if not self.cuda:
            per_call = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for i in range(count):
                    calls[i % len(calls)]()
                per_call.append((time.perf_counter() - t0) * 1e6 / count)
            return Timing(per_call, count, False)
        per_call = []
        started_early = False
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(repeats):
            self._sleep(prefill_us)
            start.record()
            for i in range(count):
                calls[i % len(calls)]()
            started_early |= start.query()  # the GPU got here before the host queued all calls
            end.record()
            end.synchronize()
            per_call.append(start.elapsed_time(end) * 1e3 / count)
        return Timing(per_call, count, started_early)


@dataclass(slots=True)
class Row:
    """One line of results.csv; field order is the column order."""

    gpu: str
    section: str
    op: str
    dtype: str
    cache: str
    shape: str
    flops: int
    bytes: int
    time_us: float | str
    time_min_us: float | str
    time_max_us: float | str
    tflops: float | str
    gbs: float | str
    repeats: int
    calls: int
    sets: int
    aten_ops: str
    note: str


CSV_COLUMNS = tuple(f.name for f in fields(Row))


def input_sets(case: Case, l2_bytes: int) -> int:
    """How many input sets a case rotates over so that they span ``ROTATE_L2_FACTOR`` L2s."""
    if case.cache == "warm":
        return 1
    return max(1, min(MAX_SETS, math.ceil(ROTATE_L2_FACTOR * l2_bytes / max(case.io_bytes, 1))))


def measure(case: Case, timer: Timer, gpu: str, l2_bytes: int) -> Row:
    """Build, warm up and time one case; failures become a row with the error in ``note``."""
    torch.backends.cuda.matmul.allow_tf32 = case.dtype == "tf32"
    sets = input_sets(case, l2_bytes)
    row = Row(gpu, case.section, case.op, case.dtype, case.cache,
              json.dumps(case.shape, sort_keys=True), case.flops, case.io_bytes,
              "", "", "", "", "", 0, 0, sets, "", "")
    try:
        calls = [case.build(timer.device) for _ in range(sets)]
        recorder = OpRecorder()
        t0 = time.perf_counter()
        for call in calls:  # first pass: allocation, autotuning, optimizer state
            call()
        with recorder if not case.aten_ops else contextlib.nullcontext():
            calls[0]()  # second pass: steady state, which the aten_ops column describes
        for call in calls[1:]:
            call()
        timer.sync()
        row.aten_ops = case.aten_ops or recorder.summary()
        upper_us = (time.perf_counter() - t0) * 1e6 / (2 * sets)
        device_us, host_us = timer.probe(calls, max(1, min(16, int(PROBE_SLEEP_US / upper_us))))
        count = max(1, min(MAX_CALLS, round(TARGET_REPEAT_US / max(device_us, 0.1))))
        repeats = SLOW_REPEATS if device_us >= SLOW_CALL_US else REPEATS
        prefill_us = PREFILL_FACTOR * count * host_us + 50.0
        timing = timer.run(calls, count, repeats, prefill_us)
        if timing.host_bound:
            timing = timer.run(calls, count, repeats, 4 * prefill_us)
        del calls
    except (RuntimeError, ValueError, NotImplementedError) as exc:  # OOM is a RuntimeError
        row.note = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return row
    finally:
        if timer.cuda:
            torch.cuda.synchronize(timer.device)
    t = statistics.median(timing.per_call_us)
    row.time_us, row.time_min_us = round(t, 3), round(min(timing.per_call_us), 3)
    row.time_max_us = round(max(timing.per_call_us), 3)
    row.tflops = round(case.flops / t / 1e6, 3)
    row.gbs = round(case.io_bytes / t / 1e3, 3)
    row.repeats, row.calls = len(timing.per_call_us), timing.calls
    row.note = "host-bound" if timing.host_bound else ""
    return row


# --- running ----------------------------------------------------------------------------------


def system_facts(device: torch.device) -> dict[str, Any]:
    """GPU, clocks and versions, for the README of a table."""
    facts: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(), "platform": platform.platform(), "python": sys.version.split()[0],
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }
    for dist in ("nvidia-cublas", "nvidia-cudnn-cu13", "triton"):
        try:
            facts[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            facts[dist] = None
    if device.type != "cuda":
        facts["gpu"] = "cpu"
        return facts
    props = torch.cuda.get_device_properties(device)
    facts |= {"gpu": props.name, "sm_count": props.multi_processor_count,
              "memory_bytes": props.total_memory,
              "l2_bytes": getattr(props, "L2_cache_size", 50 * 2**20),
              "capability": f"{props.major}.{props.minor}"}
    facts["nvidia_smi"] = nvidia_smi()
    return facts


def nvidia_smi() -> str:
    """Clocks, power limit and temperature as nvidia-smi reads them now."""
    query = ("name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,"
             "power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active")
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable: {exc}"


def done_keys(path: Path) -> set[str]:
    """Keys of the rows a previous run measured, so a re-run skips them."""
    if not path.exists():
        return set()
    with path.open(newline="") as f:
        return {json.dumps([r["section"], r["op"], r["dtype"], r["cache"], json.loads(r["shape"])],
                           sort_keys=True) for r in csv.DictReader(f) if r["time_us"]}


def selected_cases(grid: Grid, sections: Sequence[str]) -> dict[str, list[Case]]:
    """The cases of each section, in measuring order, each once (the sweeps cross the model
    shapes)."""
    return {s: list({c.key: c for c in CASE_SOURCES[s](grid)}.values()) for s in sections}


def dry_run(cases: dict[str, list[Case]]) -> None:
    """Count the cases per section, op and dtype, with a roofline guess of the run time."""
    total_s = 0.0
    for section, items in cases.items():
        groups: Counter[tuple[str, str]] = Counter((c.op, c.dtype) for c in items)
        est_s = sum(case_wall_s(c) for c in items)
        total_s += est_s
        print(f"{section}: {len(items)} cases, ~{est_s:.0f} s")
        for (op, dtype), n in sorted(groups.items()):
            print(f"  {op:24s} {dtype:10s} {n:5d}")
    print(f"total ~{total_s:.0f} s (roofline at {EST_TFLOPS['bf16']:.0f} TFLOP/s bf16, "
          f"{EST_GBS:.0f} GB/s, + {EST_CASE_OVERHEAD_S * 1e3:.0f} ms per case)")


def case_wall_s(case: Case) -> float:
    """Wall time a case is expected to take: warm-up, probe and repeats of its calls, each
    repeat behind a sleep that covers the host's queueing."""
    t = case.estimate_us()
    host = EST_HOST_US["bwd" if case.op.endswith("_bwd") or case.section == "optimizer"
                       else "fwd"]
    count = max(1, min(MAX_CALLS, round(TARGET_REPEAT_US / t)))
    repeats = SLOW_REPEATS if t >= SLOW_CALL_US else REPEATS
    per_repeat_us = count * (t + PREFILL_FACTOR * host) + 50.0
    return EST_CASE_OVERHEAD_S + (PROBE_SLEEP_US + 3 * t + repeats * per_repeat_us) * 1e-6


def run(cases: dict[str, list[Case]], out: Path, device: torch.device, budget_s: float) -> None:
    """Measure section by section within the budget, appending each row as it is done."""
    out.mkdir(parents=True, exist_ok=True)
    facts = system_facts(device)
    timer = Timer(device)
    facts["sleep_cycles_per_us"] = timer.cycles_per_us
    (out / "system.json").write_text(json.dumps(facts, indent=2) + "\n")
    print(json.dumps(facts, indent=2), flush=True)
    l2_bytes = facts.get("l2_bytes", 2**20)
    path = out / "results.csv"
    done = done_keys(path)
    new_file = not path.exists()
    start = time.monotonic()
    section_end = start
    total = sum(SECTION_SHARE[s] for s in cases)
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        if new_file:
            writer.writeheader()
        for section, items in cases.items():
            section_end += budget_s * SECTION_SHARE[section] / total
            todo = [c for c in items if c.key not in done]
            print(f"== {section}: {len(todo)} of {len(items)} cases to measure, until "
                  f"t={section_end - start:.0f} s", flush=True)
            skipped = 0
            for i, case in enumerate(todo):
                if time.monotonic() + case_wall_s(case) > section_end:
                    skipped += 1
                    continue
                row = measure(case, timer, facts["gpu"], l2_bytes)
                writer.writerow(asdict(row))
                f.flush()
                if case.io_bytes > 2**30 and timer.cuda:
                    torch.cuda.empty_cache()
                print(f"[{section} {i + 1}/{len(todo)} {time.monotonic() - start:.0f}s] "
                      f"{row.op} {row.dtype} {row.cache} {row.shape} {row.time_us} us "
                      f"{row.tflops} TF/s {row.gbs} GB/s {row.aten_ops} {row.note}", flush=True)
            if skipped:
                print(f"== {section}: {skipped} cases skipped for lack of time", flush=True)
            section_end = max(section_end, time.monotonic())
    facts["nvidia_smi_end"] = nvidia_smi() if timer.cuda else ""
    facts["wall_s"] = round(time.monotonic() - start, 1)
    (out / "system.json").write_text(json.dumps(facts, indent=2) + "\n")


# --- reading results --------------------------------------------------------------------------


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a results.csv, stored plain or gzipped (``results.csv.gz``)."""
    return list(csv.DictReader(io.StringIO(read_text(path))))


def headline(rows: Iterable[dict[str, str]]) -> list[str]:
    """The numbers a report quotes: peak matmul rate, copy bandwidth, attention rates."""
    ok = list(clean_rows(rows).values())
    lines = [f"rows: {len(ok)} clean (measured, not host-bound, first of duplicates)"]
    for section in SECTIONS:
        lines.append(f"  {section}: {sum(r['section'] == section for r in ok)}")

    def best(col: str, section: str, dtype: str | None = None, op: str | None = None,
             numel: int | None = None) -> str:
        """The row of highest ``col`` among those that match."""
        hits = [r for r in ok if r["section"] == section and dtype in (None, r["dtype"])
                and op in (None, r["op"])
                and numel in (None, json.loads(r["shape"]).get("numel"))]
        if not hits:
            return "n/a"
        r = max(hits, key=lambda r: float(r[col]))
        return f"{float(r[col]):.1f} ({r['op']} {r['dtype']} {r['shape']})"

    for dtype in ("bf16", "fp16", "tf32", "fp32"):
        lines.append(f"peak {dtype} matmul TFLOP/s: " + best("tflops", "matmul", dtype))
    for dtype in ("bf16", "fp32"):
        lines.append(f"copy_ {dtype} GB/s (r+w), 2^30 elements: "
                     + best("gbs", "memory", dtype, "copy_", 2**30))
    lines.append("peak GB/s of any memory op: " + best("gbs", "memory"))
    for r in ok:
        s = json.loads(r["shape"])
        if (r["section"] == "attention" and s["seq"] in (2048, 8192) and s["head_dim"] == 128
                and s["heads"] == 32):
            lines.append(f"{r['op']} {s['backend']} seq {s['seq']} kv {s['kv_heads']} "
                         f"causal={s['causal']} b={s['batch']}: {float(r['tflops']):.1f} TFLOP/s "
                         f"{float(r['time_us']):.1f} us")
    for r in ok:
        if r["section"] == "optimizer" and r["op"].startswith("adamw"):
            lines.append(f"{r['op']} {r['dtype']} {json.loads(r['shape'])['model']}: "
                         f"{float(r['time_us']):.0f} us, {float(r['gbs']):.0f} GB/s")
    return lines


def row_key(row: dict[str, str]) -> tuple[str, ...]:
    """What identifies a measurement in results.csv (``Case.key`` as read back)."""
    return row["section"], row["op"], row["dtype"], row["cache"], row["shape"]


def clean_rows(rows: Iterable[dict[str, str]]) -> dict[tuple[str, ...], dict[str, str]]:
    """Rows with a clean time (no error, not host-bound), the first of each key."""
    kept: dict[tuple[str, ...], dict[str, str]] = {}
    for r in rows:
        if r["time_us"] and not r["note"]:
            kept.setdefault(row_key(r), r)
    return kept


def compare(rows: list[dict[str, str]], other: list[dict[str, str]]) -> list[str]:
    """Time ratios (this table over ``other``) of the cases both measured, per section, and per
    op for memory-bound calls over 200 us (where bandwidth, not launch latency, decides)."""
    mine, theirs = clean_rows(rows), clean_rows(other)
    common = sorted(mine.keys() & theirs.keys())

    def line(label: str, keys: list[tuple[str, ...]]) -> str:
        ratios = sorted(float(mine[k]["time_us"]) / float(theirs[k]["time_us"]) for k in keys)
        if not ratios:
            return f"{label}: none"
        n = len(ratios)
        return (f"{label}: n={n} median {statistics.median(ratios):.3f} "
                f"p10 {ratios[n // 10]:.3f} p90 {ratios[9 * n // 10]:.3f}")

    long_call = [k for k in common if float(mine[k]["time_us"]) > 200]
    lines = [f"time ratio over {len(common)} common cases"]
    lines += [line(f"  {s}, calls > 200 us", [k for k in long_call if k[0] == s])
              for s in SECTIONS]
    lines += [line(f"  {s}, calls < 20 us", [k for k in common if k[0] == s
                                             and float(mine[k]["time_us"]) < 20])
              for s in ("matmul", "memory")]
    for op in sorted({k[1] for k in long_call if k[0] == "memory"}):
        lines.append(line(f"    {op}", [k for k in long_call if k[:2] == ("memory", op)]))
    return lines


def export_clean(rows: list[dict[str, str]], dst: Path) -> int:
    """Write the clean rows (``clean_rows``) without the note column; returns their count."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    kept = list(clean_rows(rows).values())
    with dst.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[c for c in CSV_COLUMNS if c != "note"],
                                extrasaction="ignore")
        writer.writeheader()
        writer.writerows(kept)
    return len(kept)


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.parser(__doc__)
    parser.add_argument("--out", type=Path, help="directory for results.csv and system.json")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="wall-time budget, shared out by SECTION_SHARE (default 480)")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, to check code paths")
    parser.add_argument("--dry-run", action="store_true", help="list the grid and exit")
    parser.add_argument("--import-result", type=Path, help="print the headline of a results.csv")
    parser.add_argument("--export-clean", type=Path, help="with --import-result: write clean rows")
    parser.add_argument("--compare", type=Path,
                        help="with --import-result: time ratios against another results.csv")
    args = parser.parse_args(argv)

    if args.import_result:
        rows = read_rows(args.import_result)
        print("\n".join(headline(rows)))
        if args.export_clean:
            print(f"wrote {export_clean(rows, args.export_clean)} rows to {args.export_clean}")
        if args.compare:
            print("\n".join(compare(rows, read_rows(args.compare))))
        return 0
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {unknown}; expected some of {list(SECTIONS)}")
    cases = selected_cases(SMOKE if args.smoke else FULL, sections)
    if args.dry_run:
        dry_run(cases)
        return 0
    if args.out is None:
        parser.error("--out is needed to measure")
    device = torch.device(args.device)
    run(cases, args.out, device, args.budget_s)
    print("\n".join(headline(read_rows(args.out / "results.csv"))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
