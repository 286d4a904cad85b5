"""What a collective's outputs hold, from its members' input values (``ValuePayload``).

Valued tensors (integers, bools, small tensors: ``intercept.values.store``) travel with their
collectives: once every member has issued one, :func:`outputs` computes each member's output
values as NCCL (or gloo) would, and the engine returns them with the member's next reply.
A member whose inputs are unknown makes every output that depends on them unknown (``None``).
"""

from collections.abc import Sequence

import numpy as np

from phantora.collectives import CollectiveOp
from wire.messages import ValuePayload

_REDUCERS = {
    "sum": np.add, "avg": np.add, "product": np.multiply, "min": np.minimum,
    "max": np.maximum, "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor,
}

Result = dict[int, "np.ndarray | None"]
"""Group index of each member that wants values -> its flat output values."""


def outputs(op: CollectiveOp, payloads: Sequence[ValuePayload | None], root: int = 0) -> Result:
    """Every wanting member's output values of ``op`` (``payloads`` in group order; for a
    send/recv pair, ``(sender, receiver)``). ``root`` is a group index."""
    wanting = [i for i, p in enumerate(payloads) if p is not None and p.want]
    if not wanting:
        return {}
    data = [None if p is None else p.data for p in payloads]
    if op == CollectiveOp.SEND_RECV:
        return {1: data[0]} if 1 in wanting else {}
    if op == CollectiveOp.BROADCAST:
        return {i: data[root] for i in wanting}
    if any(d is None for d in data):
        return {i: None for i in wanting}
    arrays: list[np.ndarray] = [d for d in data if d is not None]
    if op in (CollectiveOp.ALL_REDUCE, CollectiveOp.REDUCE, CollectiveOp.REDUCE_SCATTER):
        reduced = _reduce(arrays, _reduce_op(payloads))
        if reduced is None:
            return {i: None for i in wanting}
        if op == CollectiveOp.REDUCE_SCATTER:
            parts = np.array_split(reduced, len(arrays))
            return {i: parts[i] for i in wanting}
        return {i: reduced for i in wanting if op == CollectiveOp.ALL_REDUCE or i == root}
    if op == CollectiveOp.ALL_GATHER:
        gathered = np.concatenate(arrays)
        return {i: gathered for i in wanting}
    if op in (CollectiveOp.ALL_TO_ALL, CollectiveOp.ALL_TO_ALLV):
        return _exchange(arrays, payloads, wanting)
    return {i: None for i in wanting}


def _reduce_op(payloads: Sequence[ValuePayload | None]) -> str:
    return next((p.reduce_op for p in payloads if p is not None), "sum")


def _reduce(arrays: list[np.ndarray], reduce_op: str) -> np.ndarray | None:
    """Elementwise reduction; ``None`` for a reduction the values cannot follow (shapes
    differ, or ``premul_sum``)."""
    reducer = _REDUCERS.get(reduce_op)
    if reducer is None or len({a.shape for a in arrays}) != 1:
        return None
    total = arrays[0].copy()
    for a in arrays[1:]:
        total = reducer(total, a)
    if reduce_op == "avg":
        total = total / len(arrays) if total.dtype.kind == "f" else total // len(arrays)
    return total


def _exchange(arrays: list[np.ndarray], payloads: Sequence[ValuePayload | None],
              wanting: list[int]) -> Result:
    """all_to_all(v): member ``j`` receives, in member order, what each member sends to it."""
    n = len(arrays)
    rows: list[list[np.ndarray]] = []
    for a, p in zip(arrays, payloads, strict=True):
        splits = p.splits if p is not None and p.splits is not None else None
        if splits is None:
            if a.size % n:
                return {i: None for i in wanting}
            splits = (a.size // n,) * n
        if len(splits) != n or sum(splits) != a.size:
            return {i: None for i in wanting}
        rows.append(np.split(a, np.cumsum(splits)[:-1]))
    return {j: np.concatenate([row[j] for row in rows]) for j in wanting}
