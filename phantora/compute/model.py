"""The compute model: how long one kernel runs on the scenario's GPU, and where that came from.

Order of preference, per launch (the :class:`CostSource` it reports):

1. ``measured``: the GPU's own table holds this op, dtype and shape;
2. ``interpolated``: between measured shapes of the same op on this GPU (``table.py``);
3. ``fitted-roofline``: the op is known (a matmul, attention, or a memory-bound op of
   ``ops.py``) but not in this GPU's table, or the GPU has no table: efficiency curves fitted
   from the nearest measured GPU's table, applied to this GPU's peaks (``fitted.py``);
4. ``unknown-op``: no FLOP formula and not a known memory-bound op: costed like a memory-bound
   op of its bytes, and listed in the coverage so a measurement can be added;
5. ``host-transfer``: copies between host and GPU memory over PCIe (constants below).

Nothing is free: every kernel costs at least the fastest kernel ever measured.
"""

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from phantora.calibration.gpu import HOST_LINK_GBS
from phantora.calibration.tables import KERNEL_TABLES
from phantora.cluster.catalogue import CATALOGUE, GpuSpec
from phantora.compute.fitted import EfficiencyCurves
from phantora.compute.ops import is_memory_bound
from phantora.compute.spec import Family, KernelSpec
from phantora.compute.table import KernelTable, attention_flops

REFERENCE_GPU = "h100"
"""Whose table fits the curves for GPUs measured nowhere (same generation as most targets)."""

HOST_COPY_LATENCY_NS = 10_000
"""A ``cudaMemcpy`` from pageable host memory (what ``tensor.to("cuda")`` of an ordinary CPU
tensor does) costs this per copy (assumed) plus its bytes at the measured
``phantora.calibration.gpu.HOST_LINK_GBS``. Pinned memory would run ~3-7x faster; the model does
not tell them apart yet."""


class CostSource(str, Enum):
    """Where a kernel's duration came from (the ``compute_coverage`` of ``summary.json``)."""

    MEASURED = "measured"
    INTERPOLATED = "interpolated"
    FITTED = "fitted-roofline"
    UNKNOWN = "unknown-op"
    HOST_TRANSFER = "host-transfer"

    @property
    def from_table(self) -> bool:
        return self in (CostSource.MEASURED, CostSource.INTERPOLATED)


@dataclass(frozen=True, slots=True)
class KernelCost:
    duration_ns: int
    source: CostSource


def table_path(gpu_name: str) -> Path | None:
    """The packaged table of ``gpu_name`` (a catalogue key), if it was measured."""
    table = KERNEL_TABLES.get(gpu_name)
    return table.path if table is not None and table.path.is_file() else None


class ComputeModel:
    """Kernel durations on one GPU; :meth:`cost` is cached per distinct launch."""

    def __init__(self, gpu: GpuSpec, table: KernelTable | None,
                 curves: EfficiencyCurves) -> None:
        self.gpu = gpu
        self.table = table
        self.curves = curves
        self._cache: dict[KernelSpec, KernelCost] = {}

    @classmethod
    def for_gpu(cls, gpu: GpuSpec) -> "ComputeModel":
        """The model of ``gpu``: its own table if one was measured, else the reference's curves."""
        path = table_path(gpu.name)
        if path is not None:
            table = KernelTable.load(path)
            return cls(gpu, table, EfficiencyCurves.fit(table, gpu))
        reference = CATALOGUE[REFERENCE_GPU]
        reference_path = table_path(REFERENCE_GPU)
        assert reference_path is not None, "the reference GPU's table ships with the package"
        return cls(gpu, None, EfficiencyCurves.fit(KernelTable.load(reference_path), reference))

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
        if self.table is not None:
            estimate = self.table.estimate(spec)
            if estimate is not None:
                return KernelCost(max(self.curves.floor_ns, estimate.duration_ns),
                                  CostSource.MEASURED if estimate.exact
                                  else CostSource.INTERPOLATED)
        curves, gpu = self.curves, self.gpu
        if family in (Family.ATTENTION_FWD, Family.ATTENTION_BWD):
            backward = family is Family.ATTENTION_BWD
            flops = attention_flops(spec.dims, spec.variant == "causal", backward)
            return KernelCost(curves.attention_ns(flops, backward, gpu), CostSource.FITTED)
        # convolutions and grouped GEMMs without rows fall to the matmul curve of their FLOPs
        memory_ns = curves.memory_ns(spec.bytes, gpu)
        if spec.flops > 0:
            return KernelCost(max(memory_ns, curves.compute_ns(spec.flops, spec.dtype, gpu)),
                              CostSource.FITTED)
        return KernelCost(memory_ns, CostSource.FITTED if is_memory_bound(spec.name)
                          else CostSource.UNKNOWN)
