"""Roofline with efficiency curves fitted from a measured table: the fallback of the model.

For a GPU without its own table (A100, B200, ...) or an op the tables do not hold, a kernel's
time is its work at the share of the GPU's peak that measured kernels of the same kind and
size reach::

    duration = max(floor, flops / (peak_flops * eff_compute(dtype, flops)),
                   bytes / (hbm_bandwidth * eff_memory(bytes)))

Each ``eff`` is the median achieved/peak of the table's rows per power-of-two bin of work,
linearly interpolated in log2(work) and flat beyond the measured range. It carries what a
single efficiency cannot: small matmuls run far below the large ones' ~80% of peak, small
copies far below the HBM rate. Matmul efficiencies are per dtype against the *bf16* peak (the
catalogue's one compute figure), so fp32 without TF32 comes out ~15x slower, as measured.
"""

from dataclasses import dataclass

import numpy as np

from phantora.cluster.catalogue import GpuSpec
from phantora.compute.table import KernelTable, attention_flops, matmul_flops


MEMORY_SECTIONS = frozenset({"memory", "optimizer"})
"""Table sections whose rows fit the memory curve: the eager ATen streaming ops (convolutions,
grouped GEMMs, Inductor's kernels and CNN layers have rows of their own)."""


@dataclass(frozen=True)
class _Curve:
    log2_work: np.ndarray
    efficiency: np.ndarray

    @classmethod
    def fit(cls, work: list[float], efficiency: list[float]) -> "_Curve":
        bins: dict[int, list[float]] = {}
        for w, e in zip(work, efficiency, strict=True):
            bins.setdefault(round(np.log2(w)), []).append(e)
        keys = sorted(bins)
        return cls(np.array(keys, dtype=float),
                   np.array([float(np.median(bins[key])) for key in keys]))

    def __call__(self, work: float) -> float:
        return float(np.interp(np.log2(max(work, 1.0)), self.log2_work, self.efficiency))


@dataclass(frozen=True)
class EfficiencyCurves:
    """Achieved share of peak by kind of kernel and amount of work, fitted from one table."""

    matmul: dict[str, _Curve]
    """dtype -> share of the bf16 tensor peak."""
    attention: dict[str, _Curve]
    """``"fwd"``/``"bwd"`` -> share of the bf16 tensor peak."""
    memory: _Curve
    """Share of the HBM bandwidth, by bytes moved."""
    floor_ns: int
    """The fastest kernel in the table: what any kernel costs at least."""
    source: str
    """Which GPU's table the curves come from."""

    @classmethod
    def fit(cls, table: KernelTable, measured_on: GpuSpec) -> "EfficiencyCurves":
        matmul: dict[str, tuple[list[float], list[float]]] = {}
        attention: dict[str, tuple[list[float], list[float]]] = {}
        memory: tuple[list[float], list[float]] = ([], [])
        peak_flop_per_ns = measured_on.bf16_tflops * 1e3
        for row in table.rows:
            if not row.cold:
                continue
            if row.section == "matmul":
                flops = matmul_flops(row.dims)
                _append(matmul.setdefault(row.dtype, ([], [])), flops,
                        flops / row.time_ns / peak_flop_per_ns)
            elif row.section == "attention":
                flops = attention_flops(row.dims, row.variant == "causal", row.backward)
                _append(attention.setdefault("bwd" if row.backward else "fwd", ([], [])), flops,
                        flops / row.time_ns / peak_flop_per_ns)
            elif row.section in MEMORY_SECTIONS and "+" not in row.aten_ops:
                _append(memory, row.bytes, row.bytes / row.time_ns / measured_on.hbm_gbs)
        floor_ns = round(min(row.time_ns for row in table.rows))
        return cls({dtype: _Curve.fit(*points) for dtype, points in matmul.items()},
                   {direction: _Curve.fit(*points) for direction, points in attention.items()},
                   _Curve.fit(*memory), floor_ns, measured_on.name)

    def compute_ns(self, flops: int, dtype: str, gpu: GpuSpec) -> int:
        """A matrix product (or any FLOP-bound kernel) of ``flops`` in ``dtype``."""
        curve = self.matmul.get(dtype) or self.matmul["bf16"]
        return self._at_least_floor(flops / (gpu.bf16_tflops * 1e3 * curve(flops)))

    def attention_ns(self, flops: int, backward: bool, gpu: GpuSpec) -> int:
        curve = self.attention["bwd" if backward else "fwd"]
        return self._at_least_floor(flops / (gpu.bf16_tflops * 1e3 * curve(flops)))

    def memory_ns(self, nbytes: int, gpu: GpuSpec) -> int:
        """A kernel bound by moving ``nbytes`` through HBM."""
        return self._at_least_floor(nbytes / (gpu.hbm_gbs * self.memory(nbytes)))

    def _at_least_floor(self, duration_ns: float) -> int:
        return max(self.floor_ns, round(duration_ns))


def _append(points: tuple[list[float], list[float]], work: float, efficiency: float) -> None:
    points[0].append(work)
    points[1].append(efficiency)
