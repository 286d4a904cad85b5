"""Integers and booleans derived from fake floating tensors: a declared, seeded model.

A GPU would compute router top-k indices, argmax, comparisons and finiteness checks from values
the simulator never has. They steer control flow (expert token counts, all_to_all splits), so
they come from a model instead of a constant (README, "Values"):

* **indices** (``topk``, ``argmax``/``argmin``, ``max.dim``/``min.dim``): every row picks
  distinct entries by the scenario's routing (``simulation.routing``, :class:`Routing`);
  ``sort`` indices are a random permutation per row; ``multinomial`` samples categories
  uniformly;
* **comparisons** of unknown floats (``>``, ``<``, ...) are true with probability 1/2 per
  element; a one-element comparison (a gradient norm against 0, a loss against a threshold)
  compares what the host reads instead (an unknown float reads
  :data:`~intercept.values.plausible.FLOAT_VALUE`), so it agrees with ``.item()`` and comes out the
  same on every rank (frameworks decide collectively from such checks: DeepSpeed's overflow
  check skips its step on one rank only otherwise); ``==`` is false and ``!=`` true, except a
  tensor compared with itself (values are never NaN);
* **finiteness**: fake floats are finite (``isnan``/``isinf`` false, ``isfinite`` true, AMP's
  non-finite check finds nothing).

Draws come from one generator per rank, seeded by the scenario's seed and the rank, in program
order: the same scenario and seed give the same values.
"""

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from hwmodel.errors import SimulationError
from intercept.values.plausible import plausible_value
from intercept.values.store import ValueStore, valuable
from launch.value_policy import Routing

aten = torch.ops.aten
_COMPARISONS: dict[Any, Callable[[Any, Any], bool]] = {
    aten.gt: operator.gt, aten.ge: operator.ge, aten.lt: operator.lt, aten.le: operator.le,
}


FEW_OF_MANY_MIN_N = 64
"""Rows of more entries than this pick few of them by drawing (``ValueModel._shuffled``): a
Gumbel key per entry of a ``(tokens, vocabulary)`` argmax is hundreds of millions of draws."""


class ValueModel:
    """Values of integer/bool results of ops on unknown floats (module docstring)."""

    def __init__(self, store: ValueStore, routing: Routing, seed: int, rank: int) -> None:
        self._store = store
        self._routing = routing
        self._rank = rank
        self._rng = np.random.default_rng([seed, rank])
        self._calls = 0
        self._handlers: dict[Any, Callable[..., bool]] = {
            aten.topk.default: self._topk,
            aten.argmax.default: self._argmax, aten.argmin.default: self._argmax,
            aten.max.dim: self._max_dim, aten.min.dim: self._max_dim,
            aten.sort.default: self._sort, aten.sort.stable: self._sort_stable,
            aten.multinomial.default: self._multinomial,
            aten._amp_foreach_non_finite_check_and_unscale_.default: _finite_grads,
        }
        for op, compare in _COMPARISONS.items():
            for overload in (op.Tensor, op.Scalar):
                self._handlers[overload] = self._comparison(compare)
        for overload in (aten.eq.Tensor, aten.eq.Scalar):
            self._handlers[overload] = self._equal
        for overload in (aten.ne.Tensor, aten.ne.Scalar):
            self._handlers[overload] = self._not_equal
        for op in (aten.isnan.default, aten.isinf.default, aten.isposinf.default,
                   aten.isneginf.default):
            self._handlers[op] = self._constant(False)
        self._handlers[aten.isfinite.default] = self._constant(True)

    def handles(self, func: Any, inputs: Sequence[torch.Tensor]) -> bool:
        """Whether ``func`` on these inputs is the model's (some input's values are unknown)."""
        return func in self._handlers and not all(self._store.known(t) for t in inputs)

    def apply(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> None:
        """Give ``out`` the model's values (``handles`` said yes)."""
        self._handlers[func](out, *args, **kwargs)

    # -- indices -------------------------------------------------------------------------------
    def _topk(self, out: Any, x: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
              sorted: bool = True) -> bool:
        return self._set_indices(out[1], x, dim, k, self._routed)

    def _argmax(self, out: Any, x: torch.Tensor, dim: int | None = None,
                keepdim: bool = False) -> bool:
        if dim is None:
            return self._set(out, np.array(self._rng.integers(max(x.numel(), 1))))
        return self._set_indices(out, x, dim, 1, self._routed)

    def _max_dim(self, out: Any, x: torch.Tensor, dim: int, keepdim: bool = False) -> bool:
        return self._set_indices(out[1], x, dim, 1, self._routed)

    def _sort(self, out: Any, x: torch.Tensor, dim: int = -1, descending: bool = False) -> bool:
        return self._set_indices(out[1], x, dim, x.shape[dim] if x.dim() else 1, self._shuffled)

    def _sort_stable(self, out: Any, x: torch.Tensor, *, stable: bool | None = None,
                     dim: int = -1, descending: bool = False) -> bool:
        return self._sort(out, x, dim, descending)

    def _multinomial(self, out: Any, probs: torch.Tensor, num_samples: int,
                     replacement: bool = False, *, generator: Any = None) -> bool:
        n = probs.shape[-1]
        rows = probs.numel() // max(n, 1)
        if replacement:
            picks = self._rng.integers(n, size=(rows, num_samples))
        else:
            picks = self._shuffled(rows, n, num_samples)
        return self._set(out, picks.reshape(tuple(out.shape)))

    def _set_indices(self, out: torch.Tensor, x: torch.Tensor, dim: int, k: int,
                     pick: Callable[[int, int, int], np.ndarray]) -> bool:
        """``out`` (``x``'s shape with ``k`` along ``dim``, or without ``dim``) from ``pick(rows,
        n, k)``, which gives ``k`` distinct entries of ``n`` per row."""
        if x.dim() == 0:
            return self._set(out, np.zeros(tuple(out.shape), dtype=np.int64))
        dim = dim % x.dim()
        n = x.shape[dim]
        moved = [s for i, s in enumerate(x.shape) if i != dim]
        rows = int(np.prod(moved)) if moved else 1
        picks = pick(rows, n, k).reshape(*moved, k)
        picks = np.moveaxis(picks, -1, dim)
        return self._set(out, picks.reshape(tuple(out.shape)))

    def _routed(self, rows: int, n: int, k: int) -> np.ndarray:
        """``k`` distinct entries of ``n`` per row, by the scenario's routing."""
        routing = self._routing
        self._calls += 1
        if routing.mode == "balanced":
            return (np.arange(rows)[:, None] * k + np.arange(k)[None, :]) % n
        if routing.mode == "uniform":
            return self._shuffled(rows, n, k)
        if routing.mode == "trace":
            calls = routing.calls_for(self._rank)
            counts = calls[(self._calls - 1) % len(calls)]
            if len(counts) != n:
                raise SimulationError(
                    f"simulation.routing trace has {len(counts)} experts per call, but the "
                    f"script picks top-{k} of {n}: record the trace from the same model")
            return self._exactly(counts, rows, k)
        weights = 1.0 / np.arange(1, n + 1) ** routing.zipf_s
        log_p = np.log(weights[self._rng.permutation(n)])
        return self._gumbel_top_k(np.broadcast_to(log_p, (rows, n)), k)

    def _exactly(self, counts: Sequence[int], rows: int, k: int) -> np.ndarray:
        """``k`` distinct entries per row, entry ``e`` picked exactly ``counts[e]`` times
        (scaled to ``rows * k`` picks where the call routes another number of tokens, each at
        most ``rows``): a trace's counts are replayed, not sampled around, so the expert GEMM
        shapes repeat exactly as often as in the recorded run."""
        target = _apportion(np.asarray(counts, float), rows * k, rows)
        ids = np.repeat(np.arange(target.size), target)  # sorted: each entry one run <= rows
        picks = ids.reshape(k, rows).T  # column j holds ids[j*rows:(j+1)*rows]: distinct per row
        picks = picks[self._rng.permutation(rows)]
        order = np.argsort(self._rng.random((rows, k)), axis=1)
        return np.take_along_axis(picks, order, axis=1)

    def _shuffled(self, rows: int, n: int, k: int) -> np.ndarray:
        """``k`` distinct entries of ``n`` per row, uniformly (every ordered ``k``-tuple of
        distinct entries equally likely). Few of many (a vocabulary's argmax): ``k`` draws per
        row, rows with a repeat drawn again, in time linear in ``rows * k``; otherwise Gumbel
        keys for all ``rows * n`` entries."""
        if n <= FEW_OF_MANY_MIN_N or 4 * k > n:
            return self._gumbel_top_k(np.zeros((rows, n)), k)
        picks = self._rng.integers(n, size=(rows, k))
        while k > 1:
            ordered = np.sort(picks, axis=1)
            repeats = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
            if not repeats.any():
                break
            picks[repeats] = self._rng.integers(n, size=(int(repeats.sum()), k))
        return picks

    def _gumbel_top_k(self, log_p: np.ndarray, k: int) -> np.ndarray:
        """A sample without replacement of ``k`` per row with probabilities ``exp(log_p)``."""
        keys = log_p + self._rng.gumbel(size=log_p.shape)
        top = np.argpartition(-keys, k - 1, axis=1)[:, :k] if k < keys.shape[1] else \
            np.tile(np.arange(keys.shape[1]), (keys.shape[0], 1))
        order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1)
        return np.take_along_axis(top, order, axis=1)

    # -- booleans ------------------------------------------------------------------------------
    def _comparison(self, compare: Callable[[Any, Any], bool]) -> Callable[..., bool]:
        def handler(out: torch.Tensor, a: Any, b: Any) -> bool:
            if not valuable(out):
                return False
            if out.numel() == 1:  # so is every operand: broadcasting never shrinks
                return self._set_all(out, bool(compare(self._read(a), self._read(b))))
            return self._set(out, self._rng.random(tuple(out.shape)) < 0.5)
        return handler

    def _read(self, operand: Any) -> Any:
        """What the host reads of a one-element operand: its value where known, else the
        plausible value of its dtype; a Python scalar as it is."""
        if not isinstance(operand, torch.Tensor):
            return operand
        real = self._store.real(operand)
        if real is None:
            return plausible_value(operand.dtype)
        return real.reshape(-1)[0].item()

    def _equal(self, out: torch.Tensor, a: Any, b: Any) -> bool:
        return self._set_all(out, a is b)

    def _not_equal(self, out: torch.Tensor, a: Any, b: Any) -> bool:
        return self._set_all(out, a is not b)

    def _constant(self, value: bool) -> Callable[..., bool]:
        return lambda out, *args, **kwargs: self._set_all(out, value)

    def _set_all(self, out: torch.Tensor, value: bool) -> bool:
        if not valuable(out):
            return False
        return self._set(out, np.full(tuple(out.shape), value))

    def _set(self, out: torch.Tensor, values: np.ndarray) -> bool:
        if not valuable(out):
            return False
        self._store.set_values(out, torch.from_numpy(np.array(values)).to(out.dtype))
        return True


def _apportion(shares: np.ndarray, total: int, cap: int) -> np.ndarray:
    """Integers proportional to ``shares`` summing to ``total``, none above ``cap`` (largest
    remainders first; what a capped entry cannot take goes to the others in proportion)."""
    result = np.zeros(shares.size, dtype=np.int64)
    open_ = np.ones(shares.size, dtype=bool)
    while (left := total - int(result.sum())) > 0:
        weights = np.where(open_, shares + 1e-9, 0.0)
        ideal = result + left * weights / weights.sum()
        floor = np.minimum(np.floor(ideal).astype(np.int64), cap)
        short = left - int((floor - result).sum())
        if short > 0:
            room = np.where(open_ & (floor < cap), ideal - floor, -1.0)
            floor[np.argsort(-room, kind="stable")[:short]] += 1
            floor = np.minimum(floor, cap)
        result = floor
        open_ &= result < cap
    return result


def _finite_grads(out: Any, grads: Any, found_inf: torch.Tensor, inv_scale: torch.Tensor) -> bool:
    """AMP's check of the unscaled gradients finds them finite: ``found_inf`` keeps its value."""
    return True
