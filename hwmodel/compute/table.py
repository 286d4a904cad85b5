"""Measured kernel times of one GPU, and interpolation between the measured shapes.

The tables (``data/kernels_<gpu>.csv``, see ``data/README.md``) hold the device time of one
call of an aten op per dtype and shape, measured on H100 and H200 cloud VMs by
``scripts/measure/measure_kernels.py``. A launch whose shape was measured gets that time; otherwise:

* matmul, attention, convolutions, grouped GEMMs and cuDNN's recurrent layers: the achieved
  rate (FLOP per ns) of the nearest measured shapes, in log-space of the dimensions,
  inverse-distance weighted, times the launch's FLOPs. A kernel's
  efficiency varies smoothly with its shape (tile quantisation aside), its time does not.
* everything else: piecewise linear in log(time) over log(bytes) of the same op (same dtype
  where measured), since those ops stream memory; outside the measured sizes the bandwidth
  of the nearest measured size holds (small sizes then reach the kernel floor of the model),
  except far above an op whose largest row is too small to stream through HBM (a launch-bound
  time says nothing of a large kernel's bandwidth): that is left to the fitted roofline.

The model (``model.py``) keeps every estimate at or above the fastest kernel measured.

A table built from profiler traces (a calibration, ``calibrated.py``) holds only the shapes its
scripts ran, often only small ones of an op: built with ``extrapolate=False`` it answers only
within :data:`REACH_OCTAVES` of the work (FLOPs, bytes) its rows of that kind span, or at any
larger size where its largest row already saturates the GPU (:data:`SATURATING_BYTES`,
:data:`SATURATING_WORK`), and for a product, attention or convolution only near a shape it
holds (:data:`SHAPE_REACH_OCTAVES`: a ViT's patch convolution says nothing of a ResNet's);
the rest is left to the roofline fitted over all its rows.
"""

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hwmodel.compute import inductor
from hwmodel.compute.ops import SAME_KERNEL_AS, base_name
from hwmodel.compute.spec import GROUPED_CONV, Family, KernelSpec

REACH_OCTAVES = 1.0
"""How far (log2 of the work) a table without extrapolation estimates beyond its rows."""
SHAPE_REACH_OCTAVES = 4.0
"""How far (log2 of the shape features, Euclidean) the nearest measured shape may be."""
SATURATING_BYTES = 2**26
"""A memory-bound op moving this much streams through HBM (the H100's and H200's L2 hold 50
MiB): its bandwidth holds for any larger size."""
SATURATING_WORK = 2**36
"""A matrix product or attention of this many FLOPs (on whole tiles) fills the GPU: the
measured bf16 efficiency is flat beyond it (``fitted.py``'s curves, 2^36 to 2^46)."""

NEIGHBOURS = 8
"""How many measured shapes an interpolated matmul/attention time is weighted from."""

PRIOR_DISTANCE = 1.0
"""In log2 units of the shape: measured shapes this far away weigh as much as "no correction"."""

MATMUL_TILE = (256, 256, 64)
ATTENTION_BLOCK = 128
"""A kernel's work is counted on its dimensions rounded up to whole tiles (m, n, k for matmuls,
the sequence for attention): a 1000-row matmul costs what a 1024-row one does. With these
tiles, the H100 table's 320 random off-grid matmuls are predicted with a median error of 7.5%
(17% without rounding; ``scripts/validate/validate_compute.py``)."""

BACKEND_OF_DEFAULT_SDPA = "cudnn"
"""The attention kernels stock PyTorch picks on Hopper: the tables' ``default`` rows (no backend
forced) dispatched ``_scaled_dot_product_cudnn_attention`` on both GPUs. The simulated rank sees
whatever its CPU build dispatches, so every SDPA launch is costed from these rows (``cudnn`` and
``default``), and from the ``flash`` rows only where those are missing."""


ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4}
ALIGNED_BYTES = 16
"""cuBLAS's fast tensor-core kernels need every matrix's leading dimension to be a multiple of
16 bytes. A product with a dimension that is not one (BERT's vocabulary of 30522, Whisper's of
51865) runs other kernels, 3-6x slower on an H100: such products are costed only from rows of
the same alignment, where the table has them (:func:`matmul_alignment`)."""

CROSS_ENTROPY_SPLIT: dict[str, tuple[tuple[str, int, float], ...]] = {
    "cross_entropy_fwd": (("_log_softmax", 2, 1.0),),
    "cross_entropy_bwd": (("_log_softmax_backward_data", 3, 0.75),
                          ("nll_loss_backward", 2, 0.25)),
}
"""``F.cross_entropy`` was timed as a whole (two kernels per direction); its time goes to the
ops that move the ``tokens x vocab`` matrix, each with the bytes the rank side counts for it
(in passes over the matrix): ``nll_loss_forward`` only gathers one element per token (left to
the fitted curve); backward splits by traffic, 3 passes for ``_log_softmax_backward_data``
(read two, write one) to 1 for ``nll_loss_backward`` (fill the gradient; its input is not
read), an assumption: the pair was not timed apart."""


@dataclass(frozen=True, slots=True)
class Estimate:
    duration_ns: int
    exact: bool
    """The shape itself was measured (else interpolated between measured shapes)."""


def matmul_flops(dims: tuple[int, ...]) -> int:
    batch, m, n, k = dims
    return 2 * batch * m * n * k


def matmul_work(dims: tuple[int, ...]) -> int:
    """FLOPs on dimensions rounded up to whole :data:`MATMUL_TILE` tiles."""
    batch, m, n, k = dims
    tm, tn, tk = MATMUL_TILE
    return 2 * batch * _round_up(m, tm) * _round_up(n, tn) * _round_up(k, tk)


def attention_work(dims: tuple[int, ...], causal: bool, backward: bool) -> int:
    """FLOPs on sequences rounded up to whole :data:`ATTENTION_BLOCK` blocks."""
    batch, heads, kv_heads, seq_q, seq_kv, head_dim = dims
    return attention_flops((batch, heads, kv_heads, _round_up(seq_q, ATTENTION_BLOCK),
                            _round_up(seq_kv, ATTENTION_BLOCK), head_dim), causal, backward)


def matmul_alignment(dims: tuple[int, ...], dtype: str) -> int:
    """The largest power of two, up to :data:`ALIGNED_BYTES`, that divides the size in bytes of
    each of a matmul's ``m``, ``n`` and ``k`` (any of them is some operand's leading dimension
    in one of a linear layer's three products)."""
    element = ELEMENT_BYTES.get(dtype, 2)
    alignment = ALIGNED_BYTES
    for dim in dims[1:]:
        while (dim * element) % alignment:
            alignment //= 2
    return alignment


def _matmul_pool_key(op: str, dtype: str, dims: tuple[int, ...]) -> tuple[str, ...]:
    """Where a matmul's rows are pooled: by op kind and dtype, unaligned ones (see
    :data:`ALIGNED_BYTES`) apart by their alignment."""
    alignment = matmul_alignment(dims, dtype)
    return (op, dtype) if alignment == ALIGNED_BYTES else (op, dtype, f"align{alignment}")


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def attention_flops(dims: tuple[int, ...], causal: bool, backward: bool) -> int:
    """As the tables count them: 4*b*h*s_q*s_kv*d forward, half of it causal, backward 2.5x."""
    batch, heads, _, seq_q, seq_kv, head_dim = dims
    forward = 4 * batch * heads * seq_q * seq_kv * head_dim // (2 if causal else 1)
    return forward * 5 // 2 if backward else forward


@dataclass(frozen=True)
class MeasuredRow:
    """One row of a table, parsed once: the fields the model and its checks use."""

    section: str
    """``matmul``, ``attention``, ``memory`` or ``optimizer``."""
    op: str
    """What was called (``sdpa_bwd``, ``cross_entropy_fwd``, ...)."""
    aten_ops: str
    dtype: str
    cold: bool
    """Inputs streamed from HBM (the ``warm`` rows reused them from L2)."""
    shape: dict[str, Any]
    dims: tuple[int, ...]
    """As in :class:`KernelSpec`: matmul ``(batch, m, n, k)``, attention
    ``(batch, heads, kv_heads, seq, seq, head_dim)``, else empty."""
    variant: str
    """Matmul layout; attention ``causal`` / ``full``."""
    bytes: int
    time_ns: float
    flops: int = 0

    @classmethod
    def parse(cls, row: Mapping[str, Any]) -> "MeasuredRow":
        """A row of a table: a CSV row's strings (``shape`` as JSON text), or the typed values
        of a calibration file's row (``shape`` an object, ``hwmodel.compute.calibrated``)."""
        shape = row["shape"] if isinstance(row["shape"], dict) else json.loads(row["shape"])
        dims: tuple[int, ...] = ()
        variant = ""
        if row["section"] == "matmul":
            dims = (shape.get("batch", 1), shape["m"], shape["n"], shape["k"])
            variant = shape["layout"]
        elif row["section"] == "attention":
            dims = (shape["batch"], shape["heads"], shape["kv_heads"], shape["seq"],
                    shape.get("seq_kv", shape["seq"]), shape["head_dim"])
            variant = "causal" if shape["causal"] else "full"
        elif row["section"] == "conv":
            dims = (shape["n"], shape["c"], shape["k"], shape["size"], shape["kernel"],
                    shape["stride"])
            variant = shape["layout"]
        elif row["section"] == "grouped":
            dims = (shape["experts"], shape["rows"], shape["n"], shape["k"])
            variant = shape["direction"]
        elif row["section"] == "rnn":
            dims = (shape["seq"], shape["batch"], shape["input"], shape["hidden"],
                    shape["layers"], shape["directions"])
            variant = shape["cell"]
        else:
            variant = shape.get("layout", "")
        return cls(row["section"], row["op"], row["aten_ops"], row["dtype"],
                   row["cache"] == "cold", shape, dims, variant, int(row["bytes"]),
                   float(row["time_us"]) * 1e3, int(row["flops"]))

    @property
    def backward(self) -> bool:
        """An attention row timing the backward kernel."""
        return self.op.endswith("_bwd")

    @property
    def holdout(self) -> bool:
        """A random off-grid shape, kept for checking an interpolation."""
        return bool(self.shape.get("holdout"))


@dataclass
class _RatePool:
    """Measured shapes of one op family and dtype: log2 shape features and achieved rates.

    A launch's rate is the pool's typical rate at its amount of work (median per power of two
    of work, interpolated, kept non-decreasing in work) corrected by how its nearest measured
    shapes deviate from that typical rate, inverse-distance weighted; a prior weight pulls the
    correction to zero when no measured shape is near (:data:`PRIOR_DISTANCE`).
    """

    features: np.ndarray
    variants: np.ndarray
    log2_work: np.ndarray
    log_rate: np.ndarray
    curve_x: np.ndarray
    curve_y: np.ndarray

    @classmethod
    def build(cls, points: list[tuple[list[float], str, int, float]]) -> "_RatePool":
        log2_work = np.log2(np.array([p[2] for p in points], dtype=float))
        log_rate = np.log(np.array([p[2] / p[3] for p in points]))
        bins: dict[float, list[float]] = {}
        for x, y in zip(np.round(log2_work), log_rate, strict=True):
            bins.setdefault(float(x), []).append(float(y))
        curve_x = np.array(sorted(bins))
        # Non-decreasing in work: a bin whose rows happen to be slow shapes (small heads, GQA)
        # must not make every launch of that size slow; the residuals keep the shapes apart.
        curve_y = np.maximum.accumulate(np.array([np.median(bins[x]) for x in curve_x]))
        return cls(np.array([p[0] for p in points]), np.array([p[1] for p in points]),
                   log2_work, log_rate, curve_x, curve_y)

    def reaches(self, work: int, features: np.ndarray) -> bool:
        """Whether ``work`` lies within :data:`REACH_OCTAVES` of the pool's measured work (or
        above it where the largest saturates the GPU) and a measured shape lies within
        :data:`SHAPE_REACH_OCTAVES` of ``features``."""
        x, low, high = np.log2(max(work, 1)), self.curve_x[0], self.curve_x[-1]
        nearest = float(np.sqrt(((self.features - features) ** 2).sum(axis=1)).min())
        return bool(low - REACH_OCTAVES <= x
                    and (x <= high + REACH_OCTAVES or high >= np.log2(SATURATING_WORK))
                    and nearest <= SHAPE_REACH_OCTAVES)

    def typical(self, log2_work: np.ndarray | float) -> np.ndarray:
        return np.interp(log2_work, self.curve_x, self.curve_y)

    def estimate(self, features: np.ndarray, variant: str, work: int) -> int:
        same = self.variants == variant
        rows = same if same.any() else np.ones_like(same)
        distance = np.sqrt(((self.features[rows] - features) ** 2).sum(axis=1))
        nearest = np.argsort(distance, kind="stable")[:NEIGHBOURS]
        residual = (self.log_rate[rows][nearest]
                    - self.typical(self.log2_work[rows][nearest]))
        weights = 1.0 / (distance[nearest] ** 2 + 1e-9)
        correction = float((weights * residual).sum()
                           / (weights.sum() + 1.0 / PRIOR_DISTANCE**2))
        log_rate = float(self.typical(np.log2(max(work, 1)))) + correction
        return round(work / np.exp(log_rate))


@dataclass
class _BytesCurve:
    """Measured (bytes, ns) points of one memory-bound op, sorted by bytes."""

    log_bytes: np.ndarray
    log_ns: np.ndarray

    def reaches(self, nbytes: int) -> bool:
        """Whether ``nbytes`` lies within :data:`REACH_OCTAVES` of the measured sizes, or above
        them where the largest streams through HBM."""
        x, low, high = np.log(max(nbytes, 1)), self.log_bytes[0], self.log_bytes[-1]
        reach = REACH_OCTAVES * np.log(2)
        return bool(low - reach <= x and (x <= high + reach or high >= np.log(SATURATING_BYTES)))

    def above_reach(self, nbytes: int) -> bool:
        """Whether ``nbytes`` lies more than :data:`REACH_OCTAVES` above the measured sizes and
        the largest of them does not stream through HBM: its time is the launch's, and its
        bandwidth would say nothing of a kernel this much larger."""
        reach = REACH_OCTAVES * np.log(2)
        return bool(np.log(max(nbytes, 1)) > self.log_bytes[-1] + reach
                    and self.log_bytes[-1] < np.log(SATURATING_BYTES))

    def estimate(self, nbytes: int) -> int:
        if nbytes <= 0:
            return round(float(np.exp(self.log_ns[0])))
        x = np.log(nbytes)
        if x > self.log_bytes[-1]:  # beyond the largest measured size: its bandwidth holds
            return round(float(np.exp(self.log_ns[-1] + x - self.log_bytes[-1])))
        if x < self.log_bytes[0]:  # below the smallest: at most its bandwidth (the model
            return round(float(np.exp(self.log_ns[0] + x - self.log_bytes[0])))  # floors it)
        return round(float(np.exp(np.interp(x, self.log_bytes, self.log_ns))))


class _Builder:
    """Accumulates table rows into the pools :class:`KernelTable` interpolates over."""

    def __init__(self) -> None:
        self.rates: dict[tuple[str, ...], list[tuple[list[float], str, int, float]]] = {}
        self.curves: dict[tuple[str, str], dict[int, list[float]]] = {}
        self.exact: dict[tuple[Any, ...], list[float]] = {}

    def add_rate(self, key: tuple[str, ...], features: list[float], variant: str, work: int,
                 time_ns: float) -> None:
        self.rates.setdefault(key, []).append((features, variant, work, time_ns))

    def add_bytes(self, op: str, dtype: str, nbytes: int, time_ns: float) -> None:
        for key in ((op, dtype), (op, "")):
            self.curves.setdefault(key, {}).setdefault(nbytes, []).append(time_ns)
        self.exact.setdefault((op, dtype, nbytes), []).append(time_ns)

    def pools(self) -> dict[tuple[str, ...], _RatePool]:
        return {key: _RatePool.build(points) for key, points in self.rates.items()}

    def bytes_curves(self) -> dict[tuple[str, str], _BytesCurve]:
        curves = {}
        for key, by_size in self.curves.items():
            sizes = sorted(by_size)
            curves[key] = _BytesCurve(np.log(np.array(sizes, dtype=float)),
                                      np.array([np.mean(np.log(by_size[s])) for s in sizes]))
        return curves

    def exact_times(self) -> dict[tuple[Any, ...], int]:
        return {key: round(float(np.exp(np.mean(np.log(times)))))
                for key, times in self.exact.items()}


class KernelTable:
    """One GPU's measured kernel times; :meth:`estimate` answers for a launch or ``None``.

    ``extrapolate=False``: no estimate beyond the reach of the rows (see the module's text)."""

    def __init__(self, rows: list[MeasuredRow], extrapolate: bool = True) -> None:
        self.rows = rows
        self.extrapolate = extrapolate
        builder = _Builder()
        for row in rows:
            _add_row(builder, row)
        self._pools = builder.pools()
        self._curves = builder.bytes_curves()
        self._exact = builder.exact_times()

    @classmethod
    def load(cls, path: Path, *, holdout: bool = True) -> "KernelTable":
        """The table in ``path``; ``holdout=False`` leaves out the rows kept for checking."""
        with path.open(newline="") as stream:
            rows = [MeasuredRow.parse(row) for row in csv.DictReader(stream)]
        rows = [row for row in rows if holdout or not row.holdout]
        if not rows:
            raise ValueError(f"{path}: no kernel rows")
        return cls(rows)

    def estimate(self, spec: KernelSpec) -> Estimate | None:
        """The launch's time from the measured rows, or ``None`` if none describe its op."""
        family = spec.family
        if family is Family.MATMUL:
            return self._matmul(spec)
        if family in (Family.ATTENTION_FWD, Family.ATTENTION_BWD):
            return self._attention(spec, family is Family.ATTENTION_BWD)
        if family is Family.CONV:
            return self._by_rate(("conv", conv_pass(spec.name, spec.dims, spec.flops),
                                  spec.dtype), spec, conv_features(spec.dims))
        if family is Family.GROUPED_MATMUL:
            return self._by_rate(("grouped", spec.dtype), spec, _log2(list(spec.dims)))
        if family is Family.RNN:
            return self._by_rate(("rnn", rnn_pass(spec.name), spec.dtype), spec,
                                 _log2(list(spec.dims)))
        if family is Family.OTHER:
            return self._by_bytes(spec)
        return None

    def _matmul(self, spec: KernelSpec) -> Estimate | None:
        batch, m, n, k = spec.dims
        op = base_name(spec.name)
        batched = op in ("bmm", "baddbmm")
        exact_op = "bmm" if batched else op
        exact = self._exact.get((exact_op, spec.dtype, spec.dims, spec.variant))
        if exact is not None:
            return Estimate(exact, True)
        work = matmul_work(spec.dims)
        pool = self._matmul_pool("bmm", spec) if batched else None
        if pool is not None:
            features = _log2([batch, m, n, k])
            return Estimate(pool.estimate(features, spec.variant, work), False) \
                if self._pool_reaches(pool, work, features) else None
        pool = self._matmul_pool("mm", spec)
        work, features = matmul_work((1, batch * m, n, k)), _log2([batch * m, n, k])
        if pool is None or not self._pool_reaches(pool, work, features):
            return None
        return Estimate(pool.estimate(features, spec.variant, work), False)

    def _matmul_pool(self, op: str, spec: KernelSpec) -> _RatePool | None:
        """The rows of the launch's alignment where the table has them, else the aligned ones
        (which make an unaligned product look as fast as its aligned neighbours)."""
        return (self._pools.get(_matmul_pool_key(op, spec.dtype, spec.dims))
                or self._pools.get((op, spec.dtype)))

    def _attention(self, spec: KernelSpec, backward: bool) -> Estimate | None:
        causal = spec.variant == "causal"
        direction = "bwd" if backward else "fwd"
        exact = self._exact.get(("sdpa", direction, spec.dims, spec.variant))
        if exact is not None:
            return Estimate(exact, True)
        pool = (self._pools.get(("sdpa", direction, BACKEND_OF_DEFAULT_SDPA))
                or self._pools.get(("sdpa", direction, "flash")))
        work, features = attention_work(spec.dims, causal, backward), _attention_features(spec.dims)
        if pool is None or not self._pool_reaches(pool, work, features):
            return None
        return Estimate(pool.estimate(features, spec.variant, work), False)

    def _by_rate(self, key: tuple[str, ...], spec: KernelSpec,
                 features: np.ndarray) -> Estimate | None:
        """Convolutions, grouped GEMMs and recurrent layers: the measured time of this shape, else the rate of the
        nearest measured shapes of the same kind and dtype times the launch's FLOPs."""
        exact = self._exact.get((*key, spec.dims, spec.variant))
        if exact is not None:
            return Estimate(exact, True)
        pool = self._pools.get(key)
        if pool is None or spec.flops <= 0 or not self._pool_reaches(pool, spec.flops, features):
            return None
        return Estimate(pool.estimate(features, spec.variant, spec.flops), False)

    def _by_bytes(self, spec: KernelSpec) -> Estimate | None:
        op = base_name(spec.name)
        op = SAME_KERNEL_AS.get(op, op)
        if spec.variant == GROUPED_CONV:
            op = _layout_key(op, spec.variant)  # only its own rows: a dense conv's say nothing
        elif spec.variant and (_layout_key(op, spec.variant), "") in self._curves:
            op = _layout_key(op, spec.variant)  # measured in that layout; else as contiguous
        exact = self._exact.get((op, spec.dtype, spec.bytes))
        if exact is not None:
            return Estimate(exact, True)
        curve = self._curves.get((op, spec.dtype)) or self._curves.get((op, ""))
        if (curve is None or curve.above_reach(spec.bytes)
                or not (self.extrapolate or curve.reaches(spec.bytes))):
            return None
        return Estimate(curve.estimate(spec.bytes), False)

    def _pool_reaches(self, pool: _RatePool, work: int, features: np.ndarray) -> bool:
        return self.extrapolate or pool.reaches(work, features)


def _log2(values: list[int]) -> np.ndarray:
    return np.log2(np.array(values, dtype=float))


def _attention_features(dims: tuple[int, ...]) -> np.ndarray:
    batch, heads, kv_heads, seq_q, seq_kv, head_dim = dims
    return _log2([batch * heads, seq_q, seq_kv, head_dim, heads // max(1, kv_heads)])


def conv_features(dims: tuple[int, ...]) -> np.ndarray:
    """log2 of (output pixels over the batch, in channels, out channels, kernel area, stride)."""
    batch, cin, cout, size, kernel, stride = dims
    out = max(1, size // stride)
    return _log2([batch * out * out, cin, cout, kernel * kernel, stride])


def conv_pass(name: str, dims: tuple[int, ...], flops: int) -> str:
    """``fwd``; ``bwd`` (input and weight gradients); ``bwd_w`` (one gradient only, e.g. the
    first layer's weight gradient): told apart by FLOPs, 2x or 1x the forward's."""
    if not name.rsplit("::", 1)[-1].startswith("convolution_backward"):
        return "fwd"
    batch, cin, cout, size, kernel, stride = dims
    out = max(1, size // stride)
    forward = 2 * batch * out * out * cin * cout * kernel * kernel
    return "bwd" if flops > 1.5 * forward else "bwd_w"


def rnn_pass(name: str) -> str:
    """``fwd`` for ``_cudnn_rnn``, ``bwd`` for its backward (input and weight gradients)."""
    return "bwd" if base_name(name).endswith("_backward") else "fwd"


TRITON_ROWS: dict[str, str] = {"triton_pointwise": inductor.POINTWISE,
                               "triton_pointwise4": inductor.POINTWISE,
                               "triton_rows": inductor.PERSISTENT_REDUCTION,
                               "triton_sum_dim0": inductor.REDUCTION}
"""Measured Inductor kernels (``section`` triton) -> the kind of generated kernel they time
(:mod:`.inductor`)."""


def _add_row(builder: _Builder, row: MeasuredRow) -> None:
    if not row.cold:
        return  # inputs reused from L2: faster than a training step's streams through HBM
    dtype, dims, variant, time_ns = row.dtype, row.dims, row.variant, row.time_ns
    if row.section == "conv":
        key = ("conv", row.op.removeprefix("conv_"), dtype)
        builder.exact.setdefault((*key, dims, variant), []).append(time_ns)
        builder.add_rate(key, list(conv_features(dims)), variant, row.flops, time_ns)
    elif row.section == "grouped":
        key = ("grouped", dtype)
        builder.exact.setdefault((*key, dims, variant), []).append(time_ns)
        builder.add_rate(key, list(_log2(list(dims))), variant, row.flops, time_ns)
    elif row.section == "rnn":
        key = ("rnn", row.shape["pass"], dtype)
        builder.exact.setdefault((*key, dims, variant), []).append(time_ns)
        builder.add_rate(key, list(_log2(list(dims))), variant, row.flops, time_ns)
    elif row.section == "vision":
        builder.add_bytes(row.op, dtype, row.bytes, time_ns)
    elif row.section == "triton":
        builder.add_bytes(TRITON_ROWS[row.op], dtype, row.bytes, time_ns)
    elif row.section == "matmul":
        op = base_name(row.aten_ops)
        work = matmul_work(dims)
        builder.exact.setdefault((op, dtype, dims, variant), []).append(time_ns)
        if op == "bmm":
            builder.add_rate(_matmul_pool_key("bmm", dtype, dims), list(_log2(list(dims))),
                             variant, work, time_ns)
        else:
            batch, m, n, k = dims
            builder.add_rate(_matmul_pool_key("mm", dtype, dims), list(_log2([batch * m, n, k])),
                             variant, work, time_ns)
    elif row.section == "attention":
        direction = "bwd" if row.backward else "fwd"
        backend = row.shape["backend"]
        backend = BACKEND_OF_DEFAULT_SDPA if backend == "default" else backend
        work = attention_work(dims, variant == "causal", row.backward)
        if backend == BACKEND_OF_DEFAULT_SDPA:
            builder.exact.setdefault(("sdpa", direction, dims, variant), []).append(time_ns)
        builder.add_rate(("sdpa", direction, backend), list(_attention_features(dims)), variant,
                         work, time_ns)
    elif row.op in CROSS_ENTROPY_SPLIT:
        elements = row.shape["tokens"] * row.shape["vocab"] * ELEMENT_BYTES[dtype]
        for op, passes, share in CROSS_ENTROPY_SPLIT[row.op]:
            builder.add_bytes(op, dtype, passes * elements, share * time_ns)
    else:
        op = _single_op(row.aten_ops)
        if op is not None:
            builder.add_bytes(_layout_key(op, row.variant), dtype, row.bytes, time_ns)


def _layout_key(op: str, layout: str) -> str:
    """Where rows of ``op`` timed in a memory ``layout`` (``strided``) are kept: apart from its
    contiguous rows, e.g. ``mul@strided``."""
    return f"{op}@{layout}" if layout else op


def _single_op(aten_ops: str) -> str | None:
    """The op a row times on its own: a single op, or a fused optimizer step (whose other
    launch, the step counter's ``_foreach_add_`` over one-element tensors, is negligible)."""
    ops = aten_ops.split("+")
    if len(ops) == 1 and not ops[0].rsplit("x", 1)[-1].isdigit():
        return base_name(ops[0])
    if ops[-1].startswith("_fused_"):
        return base_name(ops[-1])
    return None
