"""Roofline with efficiency curves fitted from a measured table: the fallback of the model.

For a GPU without its own table (A100, B200, ...) or an op the tables do not hold, a kernel's
time is its work at the share of the GPU's peak that measured kernels of the same kind and
size reach::

    duration = max(floor, flops / (peak_flops * eff_compute(dtype, flops)),
                   bytes / (hbm_bandwidth * eff_memory(bytes)))

``peak_flops`` is the GPU's ``tensor_tflops``: its datasheet peak, or less where its board power
cap cannot feed that rate (``hwmodel.catalogue.TFLOPS_PER_WATT_4N``).

Each ``eff`` is the median achieved/peak of the table's rows per power-of-two bin of work,
linearly interpolated in log2(work) and flat beyond the measured range. It carries what a
single efficiency cannot: small matmuls run far below the large ones' ~80% of peak, small
copies far below the HBM rate. Matmul efficiencies are per dtype against the *bf16* peak (the
catalogue's one compute figure), so fp32 without TF32 comes out ~15x slower, as measured.

Curves fitted from a calibration (``phantora-ns3 calibrate``) may lack a kind the traces did not
run: a missing matmul dtype takes bf16's (else any dtype's), a missing attention direction the
other's (else the bf16 matmul curve), so any FLOP-bound row fits all FLOP-bound kernels. Such
a calibration also has no rows of the kernels Inductor generates (a trace gives no bytes for
them): its generated element-wise kernels take the curve of the eager ops that only stream
their bytes (``streaming``) rather than the typical op's. The curves are saved with the
calibration (:meth:`EfficiencyCurves.to_dict`).
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from hwmodel.catalogue import GpuSpec
from hwmodel.compute.ops import base_name
from hwmodel.compute.spec import RNN_GATES, KernelSpec
from hwmodel.compute.table import KernelTable, attention_flops, matmul_flops, rnn_pass


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

    def to_dict(self) -> dict[str, list[float]]:
        return {"log2_work": self.log2_work.tolist(), "efficiency": self.efficiency.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, list[float]]) -> "_Curve":
        return cls(np.array(data["log2_work"], dtype=float),
                   np.array(data["efficiency"], dtype=float))


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
    streaming: _Curve | None = None
    """Share of the HBM bandwidth of ops that only stream their bytes, for the element-wise
    kernels Inductor generates; ``None``: :attr:`memory` (a table with rows of those kernels)."""

    @classmethod
    def fit(cls, table: KernelTable, measured_on: GpuSpec,
            streaming_ops: frozenset[str] = frozenset()) -> "EfficiencyCurves":
        """The curves of ``table``'s rows measured on ``measured_on``; ``streaming_ops``: the
        memory-bound ops (base names) that fit :attr:`streaming` too (none: no such curve)."""
        matmul: dict[str, tuple[list[float], list[float]]] = {}
        attention: dict[str, tuple[list[float], list[float]]] = {}
        memory: tuple[list[float], list[float]] = ([], [])
        streaming: tuple[list[float], list[float]] = ([], [])
        peak_flop_per_ns = measured_on.tensor_tflops * 1e3
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
                efficiency = row.bytes / row.time_ns / measured_on.hbm_gbs
                _append(memory, row.bytes, efficiency)
                if base_name(row.aten_ops) in streaming_ops:
                    _append(streaming, row.bytes, efficiency)
        floor_ns = round(min(row.time_ns for row in table.rows))
        return cls({dtype: _Curve.fit(*points) for dtype, points in matmul.items()},
                   {direction: _Curve.fit(*points) for direction, points in attention.items()},
                   _Curve.fit(*memory), floor_ns, measured_on.name,
                   _Curve.fit(*streaming) if streaming[0] else None)

    def compute_ns(self, flops: int, dtype: str, gpu: GpuSpec) -> int:
        """A matrix product (or any FLOP-bound kernel) of ``flops`` in ``dtype``."""
        curve = self._matmul_curve(dtype)
        return self._at_least_floor(flops / (gpu.tensor_tflops * 1e3 * curve(flops)))

    def attention_ns(self, flops: int, backward: bool, gpu: GpuSpec) -> int:
        directions = ("bwd", "fwd") if backward else ("fwd", "bwd")
        curve = next((self.attention[d] for d in directions if d in self.attention), None) \
            or self._matmul_curve("bf16")
        return self._at_least_floor(flops / (gpu.tensor_tflops * 1e3 * curve(flops)))

    def _matmul_curve(self, dtype: str) -> _Curve:
        curve = self.matmul.get(dtype) or self.matmul.get("bf16")
        if curve is None and self.matmul:
            curve = self.matmul[min(self.matmul)]
        return curve or self.attention.get("fwd") or self.attention["bwd"]

    def recurrence_ns(self, spec: KernelSpec, gpu: GpuSpec) -> int:
        """A cuDNN recurrent layer (``spec.dims``: seq, batch, input, hidden, layers,
        directions): its time steps run one after another. Per layer, one product of the whole
        sequence's inputs with the gate weights, then one small product of the hidden state per
        step (both directions side by side); backward twice that. fp32 runs on TF32 cores, as
        cuDNN does by default."""
        seq, batch, input_size, hidden, layers, directions = spec.dims
        dtype = "tf32" if spec.dtype == "fp32" else spec.dtype
        width = RNN_GATES[spec.variant] * hidden
        step = self.compute_ns(2 * batch * width * hidden * directions, dtype, gpu)
        total = sum(self.compute_ns(2 * seq * batch * width * directions
                                    * (input_size if layer == 0 else hidden * directions),
                                    dtype, gpu) + seq * step
                    for layer in range(layers))
        return total * (2 if rnn_pass(spec.name) == "bwd" else 1)

    def memory_ns(self, nbytes: int, gpu: GpuSpec, streaming: bool = False) -> int:
        """A kernel bound by moving ``nbytes`` through HBM; ``streaming``: one that only streams
        them (a generated element-wise kernel)."""
        curve = self.streaming if streaming and self.streaming is not None else self.memory
        return self._at_least_floor(nbytes / (gpu.hbm_gbs * curve(nbytes)))

    def _at_least_floor(self, duration_ns: float) -> int:
        return max(self.floor_ns, round(duration_ns))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form a calibration file keeps (:meth:`from_dict` reads it)."""
        return {"source": self.source, "floor_ns": self.floor_ns,
                "matmul": {dtype: curve.to_dict() for dtype, curve in self.matmul.items()},
                "attention": {d: curve.to_dict() for d, curve in self.attention.items()},
                "memory": self.memory.to_dict(),
                "streaming": None if self.streaming is None else self.streaming.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EfficiencyCurves":
        return cls({dtype: _Curve.from_dict(c) for dtype, c in data["matmul"].items()},
                   {d: _Curve.from_dict(c) for d, c in data["attention"].items()},
                   _Curve.from_dict(data["memory"]), int(data["floor_ns"]), str(data["source"]),
                   _Curve.from_dict(data["streaming"]) if data.get("streaming") else None)


def _append(points: tuple[list[float], list[float]], work: float, efficiency: float) -> None:
    points[0].append(work)
    points[1].append(efficiency)
