"""The compute model: how long one kernel runs on the scenario's GPU, and where that came from.

Order of preference, per launch (the :class:`CostSource` it reports):

1. ``measured``: the GPU's own table holds this op, dtype and shape;
2. ``interpolated``: between measured shapes of the same op on this GPU (``table.py``);
3. ``moved-from-reference``: this GPU's table lacks the op (or the shape is beyond its rows)
   but the reference GPU's (H100) table has it: that time, moved to this GPU by the spec
   sheets (:func:`moved`);
4. ``fitted-roofline``: the op is known (a matmul, attention, or a memory-bound op of
   ``ops.py``) but not in this GPU's table, or the GPU has no table: efficiency curves fitted
   from the nearest measured GPU's table, applied to this GPU's peaks (``fitted.py``);
5. ``unknown-op``: no FLOP formula and not a known memory-bound op: costed like a memory-bound
   op of its bytes, and listed in the coverage so a measurement can be added;
6. ``host-transfer``: copies between host and GPU memory over PCIe (constants below).

With a calibration (``cluster.calibration``: a table built by ``phantora-ns3 calibrate`` from
real profiler traces, :mod:`.calibrated`), its rows and the roofline fitted to them take the
place of the packaged table and curves: ``calibrated``, ``calibrated-interpolated`` and
``calibrated-roofline`` stand for 1, 2 and 4 (unknown ops and host copies as above). A
calibration of another GPU than the scenario's is moved to it by the spec sheets (:func:`moved`).

Nothing is free: every kernel costs at least the fastest kernel ever measured.
"""

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from hwmodel.measured.gpu import HOST_LINK_GBS
from hwmodel.measured.tables import KERNEL_TABLES
from hwmodel.catalogue import CATALOGUE, GpuSpec, lookup_gpu
from hwmodel.compute.calibrated import Calibration
from hwmodel.compute import inductor
from hwmodel.compute.fitted import EfficiencyCurves
from hwmodel.compute.ops import is_memory_bound
from hwmodel.compute.spec import Family, KernelSpec
from hwmodel.compute.table import KernelTable, attention_flops

REFERENCE_GPU = "h100"
"""Whose table fits the curves for GPUs measured nowhere (same generation as most targets)."""

HOST_COPY_LATENCY_NS = 10_000
"""A ``cudaMemcpy`` from pageable host memory (what ``tensor.to("cuda")`` of an ordinary CPU
tensor does) costs this per copy (assumed) plus its bytes at the measured
``hwmodel.measured.gpu.HOST_LINK_GBS``. Pinned memory would run ~3-7x faster; the model does
not tell them apart yet."""


class CostSource(str, Enum):
    """Where a kernel's duration came from (the ``compute_coverage`` of ``summary.json``)."""

    MEASURED = "measured"
    INTERPOLATED = "interpolated"
    MOVED = "moved-from-reference"
    FITTED = "fitted-roofline"
    UNKNOWN = "unknown-op"
    HOST_TRANSFER = "host-transfer"
    CALIBRATED = "calibrated"
    CALIBRATED_INTERPOLATED = "calibrated-interpolated"
    CALIBRATED_ROOFLINE = "calibrated-roofline"

    @property
    def from_table(self) -> bool:
        return self in (CostSource.MEASURED, CostSource.INTERPOLATED, CostSource.CALIBRATED,
                        CostSource.CALIBRATED_INTERPOLATED)


@dataclass(frozen=True)
class _Sources:
    """What a table's exact rows, its interpolation and its fitted roofline are reported as."""

    exact: CostSource
    interpolated: CostSource
    roofline: CostSource


MEASURED_TABLES = _Sources(CostSource.MEASURED, CostSource.INTERPOLATED, CostSource.FITTED)
CALIBRATION = _Sources(CostSource.CALIBRATED, CostSource.CALIBRATED_INTERPOLATED,
                       CostSource.CALIBRATED_ROOFLINE)


@dataclass(frozen=True, slots=True)
class KernelCost:
    duration_ns: int
    source: CostSource


def table_path(gpu_name: str) -> Path | None:
    """The packaged table of ``gpu_name`` (a catalogue key), if it was measured."""
    table = KERNEL_TABLES.get(gpu_name)
    return table.path if table is not None and table.path.is_file() else None


class ComputeModel:
    """Kernel durations on one GPU; :meth:`cost` is cached per distinct launch.

    ``table`` holds times measured on ``measured_on`` (default ``gpu``); ``sources`` says what
    its rows and ``curves`` are reported as."""

    def __init__(self, gpu: GpuSpec, table: KernelTable | None, curves: EfficiencyCurves,
                 measured_on: GpuSpec | None = None,
                 sources: _Sources = MEASURED_TABLES,
                 reference: KernelTable | None = None) -> None:
        self.gpu = gpu
        self.table = table
        self.curves = curves
        self.measured_on = measured_on or gpu
        self.sources = sources
        self.reference = reference
        """The reference GPU's table, for what ``table`` lacks (``moved-from-reference``)."""
        self._cache: dict[KernelSpec, KernelCost] = {}

    @classmethod
    def for_gpu(cls, gpu: GpuSpec, calibration: Path | None = None) -> "ComputeModel":
        """The model of ``gpu``: the ``calibration`` file's table and roofline if given, else
        its own measured table if there is one, else the reference's curves."""
        if calibration is not None:
            calibrated = Calibration.load(calibration)
            return cls(gpu, calibrated.table(), calibrated.roofline,
                       lookup_gpu(calibrated.gpu), CALIBRATION)
        reference_path = table_path(REFERENCE_GPU)
        assert reference_path is not None, "the reference GPU's table ships with the package"
        path = table_path(gpu.name)
        if path is not None:
            table = KernelTable.load(path)
            reference = None if gpu.name == REFERENCE_GPU else KernelTable.load(reference_path)
            return cls(gpu, table, EfficiencyCurves.fit(table, gpu), reference=reference)
        return cls(gpu, None, EfficiencyCurves.fit(KernelTable.load(reference_path),
                                                   CATALOGUE[REFERENCE_GPU]))

    def cost(self, spec: KernelSpec) -> KernelCost:
        cost = self._cache.get(spec)
        if cost is None:
            cost = self._cache[spec] = self._cost(spec)
        return cost

    def _cost(self, spec: KernelSpec) -> KernelCost:
        if spec.flops < 0 or spec.bytes < 0:
            raise ValueError(f"{spec.name}: flops ({spec.flops}) and bytes ({spec.bytes}) "
                             "must be >= 0")
        family = spec.family
        if family is Family.HOST_TRANSFER:
            return KernelCost(HOST_COPY_LATENCY_NS + round(spec.bytes / HOST_LINK_GBS.value),
                              CostSource.HOST_TRANSFER)
        sources = self.sources
        if self.table is not None:
            estimate = self.table.estimate(spec)
            if estimate is not None:
                return KernelCost(max(self.curves.floor_ns, moved(estimate.duration_ns, spec,
                                                                  self.measured_on, self.gpu)),
                                  sources.exact if estimate.exact else sources.interpolated)
        if self.reference is not None:
            estimate = self.reference.estimate(spec)
            if estimate is not None:
                return KernelCost(max(self.curves.floor_ns, moved(
                    estimate.duration_ns, spec, CATALOGUE[REFERENCE_GPU], self.gpu)),
                    CostSource.MOVED)
        curves, gpu = self.curves, self.gpu
        if family in (Family.ATTENTION_FWD, Family.ATTENTION_BWD):
            backward = family is Family.ATTENTION_BWD
            flops = attention_flops(spec.dims, spec.variant == "causal", backward)
            return KernelCost(curves.attention_ns(flops, backward, gpu), sources.roofline)
        if family is Family.RNN:
            return KernelCost(curves.recurrence_ns(spec, gpu), sources.roofline)
        # convolutions and grouped GEMMs without rows fall to the matmul curve of their FLOPs
        memory_ns = curves.memory_ns(spec.bytes, gpu, streaming=inductor.is_pointwise(spec.name))
        if spec.flops > 0:
            return KernelCost(max(memory_ns, curves.compute_ns(spec.flops, spec.dtype, gpu)),
                              sources.roofline)
        return KernelCost(memory_ns, sources.roofline if is_memory_bound(spec.name)
                          else CostSource.UNKNOWN)


def moved(duration_ns: int, spec: KernelSpec, source: GpuSpec, target: GpuSpec) -> int:
    """A time measured on ``source``, on ``target``: the launch's roofline bound,
    ``max(flops / tensor peak, bytes / HBM bandwidth)``, moves from one GPU's spec sheet to the
    other's, and the time beyond the bound (launch latency, a kernel's own inefficiency) stays.
    So a copy at 90% of the HBM rate speeds up by nearly the bandwidth ratio, a batch norm at
    20% of it hardly (as measured between the H100 and the H200); never by more than the
    bound's ratio."""
    if source == target:
        return duration_ns
    before, after = _roofline_ns(spec, source), _roofline_ns(spec, target)
    if before <= 0:
        return duration_ns
    return round(max(duration_ns * min(1.0, after / before), duration_ns + after - before))


def _roofline_ns(spec: KernelSpec, gpu: GpuSpec) -> float:
    return max(spec.flops / (gpu.tensor_tflops * 1e3), spec.bytes / gpu.hbm_gbs)
