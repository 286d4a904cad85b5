"""What a cuBLAS matrix product of a shape new to the process costs the host.

For each shape new to the process cuBLAS runs a heuristic query, whose answer it caches; the
first time the answer is a kernel the process has never launched, cuBLAS also prepares that
kernel (its ``nvjet`` kernels), which costs milliseconds. Fixed-shape training pays both in its
first step only; an MoE expert's products, sized by the tokens the router sends the expert,
meet new row counts all along, and now and then a new kernel (``docs/models/host.md``).

Two models, by what is known of the product:

* **Kernel map** (:class:`KernelMap`, measured per GPU model by
  ``scripts/measure/measure_gemm_heuristic.py --kernel-map``): the kernels cuBLAS launches for every
  row count of a product. A new shape costs ``new_shape_ns``, plus ``new_kernel_ns`` where one
  of its kernels is new to the process.
* **Otherwise** the kernel is not known, and the mean cost is used: a new row count costs
  ``base_ns + warm_ns[bin] * exp(-seen / decay_shapes)``, ``bin`` the distance to the nearest
  row count the product ran (by ``distance_edges``; the last bin: none yet), ``seen`` how many
  it ran (far row counts pick new kernels more often, and fewer kernels are left new as the
  process ages). Where only the reduction length is new (a weight gradient, whose reduction is
  the routed tokens) the product costs ``new_reduction_ns``.

A product is everything but the routed tokens: ``(op, dtype, layout, batch, n, k)``. The costs
(``hwmodel/measured/data/gemm_heuristic.json``) are fitted on profiled MoE training runs
and checked on others.

A host (CPU) cost, not a kernel time: it lives with the other host-cost models
(``intercept.host_time``; kernel times are ``hwmodel.compute``'s). No torch import.
"""

import bisect
import json
import math
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from hwmodel.measured.tables import CUBLAS_KERNEL_MAPS, GEMM_HEURISTIC

GemmShape = tuple[str, str, str, int, int, int, int]
"""``(op, dtype, layout, batch, m, n, k)`` of one cuBLAS product (``KernelSpec`` fields)."""
CUBLAS_HEURISTICS_CACHE_CAPACITY = 8192
"""Shapes cuBLASLt keeps the heuristic's answer for (its ``CUBLASLT_HEURISTICS_CACHE_CAPACITY``
default), least recently used out first."""


@dataclass(frozen=True)
class GemmHeuristic:
    """The fitted costs of a first-seen shape (see the module doc), for ``reference``'s host."""

    reference: str
    base_ns: int
    distance_edges: tuple[int, ...]
    """Upper bounds (rows, inclusive) of the distance bins; beyond the last, one more bin."""
    warm_ns: tuple[int, ...]
    """Per distance bin, then for a product that has run no row count yet."""
    decay_shapes: float
    new_reduction_ns: int
    new_shape_ns: int
    """A new shape of a mapped product whose kernels the process has launched."""
    new_kernel_ns: int
    """Extra, where a mapped product's kernel is new to the process."""
    provenance: dict[str, Any]

    def new_output_ns(self, distance: int | None, seen: int) -> int:
        """A new row count ``distance`` rows from the nearest the product ran (None: it ran
        none), after ``seen`` new row counts of that product."""
        warm = self.warm_ns[distance_bin(self.distance_edges, distance)]
        return round(self.base_ns + warm * math.exp(-seen / self.decay_shapes))

    def scaled(self, reference: str, factor: float) -> "GemmHeuristic":
        """The costs on another reference host, ``factor`` times slower."""
        return GemmHeuristic(reference, round(self.base_ns * factor), self.distance_edges,
                             tuple(round(w * factor) for w in self.warm_ns), self.decay_shapes,
                             round(self.new_reduction_ns * factor),
                             round(self.new_shape_ns * factor), round(self.new_kernel_ns * factor),
                             {**self.provenance, "scaled_from": self.reference,
                              "scale_factor": round(factor, 4)})


def heuristic_from_json(data: dict[str, Any]) -> GemmHeuristic:
    """The costs from their JSON form; names the bad key."""
    keys = ("reference", "base_ns", "distance_edges", "warm_ns", "decay_shapes",
            "new_reduction_ns", "new_shape_ns", "new_kernel_ns", "provenance")
    missing = [key for key in keys if key not in data]
    if missing:
        raise ValueError(f"GEMM heuristic costs: {', '.join(missing)} missing (re-fit with "
                         "scripts/measure/measure_gemm_heuristic.py --fit)")
    edges = tuple(int(e) for e in data["distance_edges"])
    warm = tuple(int(w) for w in data["warm_ns"])
    if len(warm) != len(edges) + 2 or list(edges) != sorted(set(edges)):
        raise ValueError(f"GEMM heuristic costs: {len(edges)} increasing distance_edges need "
                         f"{len(edges) + 2} warm_ns (one per bin, one for none yet); got "
                         f"edges {list(edges)}, {len(warm)} warm_ns")
    if float(data["decay_shapes"]) <= 0:
        raise ValueError(f"GEMM heuristic costs: decay_shapes {data['decay_shapes']} must be > 0")
    return GemmHeuristic(str(data["reference"]), int(data["base_ns"]), edges, warm,
                         float(data["decay_shapes"]), int(data["new_reduction_ns"]),
                         int(data["new_shape_ns"]), int(data["new_kernel_ns"]),
                         dict(data["provenance"]))


@cache
def load_gemm_heuristic(path: Path = GEMM_HEURISTIC.path) -> GemmHeuristic:
    """The shipped costs (cached)."""
    return heuristic_from_json(json.loads(path.read_text()))


def distance_bin(edges: tuple[int, ...], distance: int | None) -> int:
    """The bin of ``distance`` among ``edges`` (inclusive upper bounds; one bin beyond the
    last), or the bin after that for None (the product ran no row count yet)."""
    return len(edges) + 1 if distance is None else bisect.bisect_left(edges, distance)


class ProductRows:
    """The row counts each product has run, for the distance to the nearest and their number."""

    def __init__(self) -> None:
        self._rows: dict[Any, list[int]] = {}

    def place(self, product: Any, m: int) -> tuple[int | None, int]:
        """(distance from ``m`` to the nearest row count ``product`` ran, None if none; how
        many it ran), then ``m`` is one of them."""
        rows = self._rows.setdefault(product, [])
        at = bisect.bisect_left(rows, m)
        distance = min((abs(rows[i] - m) for i in (at - 1, at) if 0 <= i < len(rows)),
                       default=None)
        seen = len(rows)
        if distance != 0:
            rows.insert(at, m)
        return distance, seen


ProductKey = tuple[str, str, str, int, int | None, int | None, int | None]
"""A mapped product: ``(op, dtype, layout, batch, m, n, k)`` with None for the routed tokens
(the rows of a forward or input-gradient product, the reduction of a weight gradient)."""


@dataclass(frozen=True)
class MappedProduct:
    """One product's kernels over its routed-token counts, run-length encoded."""

    starts: tuple[int, ...]
    """The first count of each run (the first is 1)."""
    kernels: tuple[tuple[int, ...], ...]
    """Per run, the indices (into :attr:`KernelMap.kernels`) of the kernels launched."""
    rows_max: int
    """The largest count measured."""


@dataclass(frozen=True)
class KernelMap:
    """The kernels cuBLAS launches for each routed-token count of the products measured on one
    GPU model (``scripts/measure/measure_gemm_heuristic.py --kernel-map``)."""

    gpu: str
    kernels: tuple[str, ...]
    """Kernel names; only their identity matters here."""
    products: dict[ProductKey, MappedProduct]
    provenance: dict[str, Any]

    def kernels_for(self, shape: GemmShape) -> tuple[int, ...] | None:
        """The kernels of ``shape``, or None where its product or count was not measured."""
        op, dtype, layout, batch, m, n, k = shape
        for key, count in (((op, dtype, layout, batch, None, n, k), m),
                           ((op, dtype, layout, batch, m, n, None), k)):
            product = self.products.get(key)
            if product is not None and 1 <= count <= product.rows_max:
                return product.kernels[bisect.bisect_right(product.starts, count) - 1]
        return None


def kernel_map_from_json(gpu: str, data: dict[str, Any]) -> KernelMap:
    """A kernel map from the form ``--kernel-map`` writes; names the bad entry."""
    missing = [key for key in ("kernels", "products", "provenance") if key not in data]
    if missing:
        raise ValueError(f"cuBLAS kernel map for {gpu}: {', '.join(missing)} missing (re-measure "
                         "with scripts/measure/measure_gemm_heuristic.py --kernel-map)")
    products = {}
    for index, entry in enumerate(data["products"]):
        dims = [entry[d] for d in ("m", "n", "k")]
        runs = entry["runs"]
        if dims.count(None) != 1 or not runs or runs[0][0] != 1:
            raise ValueError(f"cuBLAS kernel map for {gpu}: product {index} needs exactly one of "
                             f"m, n, k null (got {dims}) and runs from count 1")
        key = (entry["op"], entry["dtype"], entry["layout"], int(entry["batch"]), *dims)
        products[key] = MappedProduct(tuple(run[0] for run in runs),
                                      tuple(tuple(run[1:]) for run in runs),
                                      int(entry["rows_max"]))
    return KernelMap(gpu, tuple(data["kernels"]), products, dict(data["provenance"]))


@cache
def load_kernel_map(gpu: str) -> KernelMap | None:
    """The shipped kernel map of catalogue GPU ``gpu``, or None where none was measured."""
    table = CUBLAS_KERNEL_MAPS.get(gpu)
    return None if table is None else kernel_map_from_json(gpu, json.loads(table.path.read_text()))


class LaunchedKernels:
    """The kernels (:attr:`KernelMap.kernels` indices) one process has launched."""

    def __init__(self) -> None:
        self._launched: set[int] = set()

    def launch(self, kernels: tuple[int, ...]) -> bool:
        """Whether one of ``kernels`` is new to the process; all are launched afterwards."""
        new = not self._launched.issuperset(kernels)
        self._launched.update(kernels)
        return new


class GemmShapeCache:
    """The matrix-product shapes and kernels one process has run: :meth:`first_seen_ns` is the
    extra host cost of a product (see the module doc). Outputs and whole shapes are each
    remembered for the :data:`CUBLAS_HEURISTICS_CACHE_CAPACITY` most recently used; kernels, and
    the row counts each product ran (for the distance to the nearest), all along."""

    def __init__(self, heuristic: GemmHeuristic, kernel_map: KernelMap | None = None,
                 capacity: int = CUBLAS_HEURISTICS_CACHE_CAPACITY) -> None:
        self._heuristic = heuristic
        self._kernel_map = kernel_map
        self._capacity = capacity
        self._shapes: OrderedDict[GemmShape, None] = OrderedDict()
        self._outputs: OrderedDict[GemmShape, None] = OrderedDict()
        self._kernels = LaunchedKernels()
        self._rows = ProductRows()

    def first_seen_ns(self, shape: GemmShape) -> int:
        """0 for a shape run before (still cached); else what the heuristic query costs, and
        preparing a kernel new to the process where the kernel map knows the shape's. An empty
        product (no routed tokens) does not reach cuBLAS."""
        if 0 in shape[4:]:
            return 0
        seen_shape = self._touch(self._shapes, shape)
        seen_output = self._touch(self._outputs, (*shape[:-1], 0))
        if seen_shape:
            return 0
        kernels = None if self._kernel_map is None else self._kernel_map.kernels_for(shape)
        if kernels is not None:
            return self._heuristic.new_shape_ns + (self._heuristic.new_kernel_ns
                                                   if self._kernels.launch(kernels) else 0)
        if seen_output:
            return self._heuristic.new_reduction_ns
        op, dtype, layout, batch, m, n, k = shape
        return self._heuristic.new_output_ns(*self._rows.place((op, dtype, layout, batch, n, k),
                                                               m))

    def _touch(self, cache: OrderedDict[GemmShape, None], key: GemmShape) -> bool:
        """Whether ``key`` was cached; it is the most recent entry afterwards."""
        if key in cache:
            cache.move_to_end(key)
            return True
        cache[key] = None
        if len(cache) > self._capacity:
            cache.popitem(last=False)
        return False
