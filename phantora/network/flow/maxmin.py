"""Max-min fair rates by progressive filling, for a batch of flows over shared resources.

Each round finds the lowest fair share (remaining capacity / unfrozen flows crossing it) over
the resources, freezes every unfrozen flow that crosses a resource at that share, and takes the
frozen rates off the capacities. Shares never decrease from one round to the next, so one round
per distinct bottleneck level suffices.

Two implementations of the same rounds: plain Python for small batches (most batches in a
desynchronised collective hold a handful of flows, where numpy's per-call overhead dominates)
and numpy for large ones. Both do the same floating-point operations in the same order, so
they return bit-identical rates and the switch-over point never changes a simulation.
"""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

_TIE = 1e-9
"""Relative tolerance under which two fair shares count as the same bottleneck level, so that
symmetric flows are frozen in one round and get identical rates."""

Path = tuple[int, ...]
"""Indices of the resources one flow crosses (at least one, no repeats)."""


class MaxMinSolver:
    """Max-min fair sharing of fixed resource capacities (any rate unit, all positive)."""

    def __init__(self, capacity: npt.NDArray[np.float64],
                 vectorise_from_entries: int = 128) -> None:
        """``vectorise_from_entries``: batches with at least this many (flow, resource) pairs
        use numpy, smaller ones plain Python (measured crossover: 100 to 200 pairs)."""
        self._capacity = capacity.astype(np.float64, copy=True)
        self._capacity_list: list[float] = self._capacity.tolist()
        self._vectorise_from = vectorise_from_entries

    def rates(self, paths: Sequence[Path]) -> list[float]:
        """Max-min fair rate of each flow, given the resources each crosses."""
        entries = sum(map(len, paths))
        if entries >= self._vectorise_from:
            return self._rates_numpy(paths, entries)
        return self._rates_python(paths)

    def _rates_python(self, paths: Sequence[Path]) -> list[float]:
        capacity = self._capacity_list
        count: dict[int, int] = {}
        for path in paths:
            for resource in path:
                count[resource] = count.get(resource, 0) + 1
        remaining = {resource: capacity[resource] for resource in count}
        rates = [0.0] * len(paths)
        unfrozen = list(range(len(paths)))
        while unfrozen:
            share = {resource: remaining[resource] / n for resource, n in count.items() if n}
            level = min(share.values())
            limit = level * (1.0 + _TIE)
            saturated = {resource for resource, value in share.items() if value <= limit}
            leaving: dict[int, int] = {}
            staying = []
            for flow in unfrozen:
                path = paths[flow]
                if saturated.isdisjoint(path):
                    staying.append(flow)
                    continue
                rates[flow] = level
                for resource in path:
                    leaving[resource] = leaving.get(resource, 0) + 1
            for resource, n in leaving.items():
                remaining[resource] = max(remaining[resource] - level * n, 0.0)
                count[resource] -= n
            unfrozen = staying
        return rates

    def _rates_numpy(self, paths: Sequence[Path], entries: int) -> list[float]:
        n_flows = len(paths)
        global_ids = np.fromiter((r for path in paths for r in path), dtype=np.int64,
                                 count=entries)
        used, resources = np.unique(global_ids, return_inverse=True)
        flows = np.repeat(np.arange(n_flows), np.fromiter(map(len, paths), dtype=np.int64,
                                                          count=n_flows))
        remaining = self._capacity[used]
        rates = np.zeros(n_flows, dtype=np.float64)
        share = np.empty(used.size, dtype=np.float64)
        while flows.size:
            count = np.bincount(resources, minlength=used.size)
            share.fill(np.inf)
            np.divide(remaining, count, out=share, where=count > 0)
            level = share.min()
            frozen = np.zeros(n_flows, dtype=bool)
            frozen[flows[share[resources] <= level * (1.0 + _TIE)]] = True
            rates[frozen] = level
            leaving = frozen[flows]
            remaining -= level * np.bincount(resources[leaving], minlength=used.size)
            np.maximum(remaining, 0.0, out=remaining)
            staying = ~leaving
            flows, resources = flows[staying], resources[staying]
        return rates.tolist()
