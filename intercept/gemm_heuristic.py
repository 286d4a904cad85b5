"""What a cuBLAS matrix product of a shape new to the process costs the host: cuBLAS's heuristic.

cuBLAS picks a kernel per shape by a heuristic query whose answer it caches. Fixed-shape
training pays it in its first step only; an MoE expert's products, sized by the tokens the
router sends the expert, pay it whenever a count comes up for the first time, and such counts
keep coming (``docs/models/host.md``). Replayed on a lent H100 host in the order an MoE step
runs them (``scripts/measure_gemm_heuristic.py``), a new row count of a product cost:

* about ``base_ns`` when the product had already run a row count a few rows away;
* milliseconds more when the nearest row count it had run was tens to hundreds of rows away,
  or when it had run none, and the more so the younger the process: the extra falls by
  ``exp(-seen / decay_shapes)`` with the row counts the product has run.

So a new row count costs ``base_ns + warm_ns[bin] * exp(-seen / decay_shapes)``, ``bin`` the
distance to the nearest row count the product ran (by ``distance_edges``; the last bin: none
yet). A product is everything but the row count: ``(op, dtype, layout, batch, n, k)``. Where
only the reduction length is new (a weight gradient, whose reduction is the routed tokens),
the product costs ``new_reduction_ns``. Fitted on one MoE replay and checked on another
(``phantora/calibration/data/gemm_heuristic.json`` with both errors).

No torch import.
"""

import bisect
import json
import math
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from phantora.calibration.tables import GEMM_HEURISTIC

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
                             {**self.provenance, "scaled_from": self.reference,
                              "scale_factor": round(factor, 4)})


def heuristic_from_json(data: dict[str, Any]) -> GemmHeuristic:
    """The costs from their JSON form; names the bad key."""
    keys = ("reference", "base_ns", "distance_edges", "warm_ns", "decay_shapes",
            "new_reduction_ns", "provenance")
    missing = [key for key in keys if key not in data]
    if missing:
        raise ValueError(f"GEMM heuristic costs: {', '.join(missing)} missing (re-fit with "
                         "scripts/measure_gemm_heuristic.py --fit)")
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


class GemmShapeCache:
    """The matrix-product shapes one process has run: :meth:`first_seen_ns` is the extra host
    cost of a product (see the module doc). Outputs and whole shapes are each remembered for
    the :data:`CUBLAS_HEURISTICS_CACHE_CAPACITY` most recently used; the row counts each
    product ran, for the distance to the nearest, all along."""

    def __init__(self, heuristic: GemmHeuristic,
                 capacity: int = CUBLAS_HEURISTICS_CACHE_CAPACITY) -> None:
        self._heuristic = heuristic
        self._capacity = capacity
        self._shapes: OrderedDict[GemmShape, None] = OrderedDict()
        self._outputs: OrderedDict[GemmShape, None] = OrderedDict()
        self._rows = ProductRows()

    def first_seen_ns(self, shape: GemmShape) -> int:
        """0 for a shape run before (still cached); else what the heuristic query costs."""
        seen_shape = self._touch(self._shapes, shape)
        seen_output = self._touch(self._outputs, (*shape[:-1], 0))
        if seen_shape:
            return 0
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
