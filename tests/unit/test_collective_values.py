"""Collective output values follow the members' inputs as NCCL would compute them."""

import numpy as np
import pytest

from phantora.engine.collective_values import outputs
from wire.messages import ValuePayload


def _members(*arrays: list[int] | None, want: bool = True, reduce_op: str = "sum",
             splits: list[tuple[int, ...] | None] | None = None) -> list[ValuePayload]:
    return [ValuePayload(i, None if a is None else np.array(a, dtype=np.int64), want, reduce_op,
                         None if splits is None else splits[i])
            for i, a in enumerate(arrays)]


def _as_lists(found: dict[int, np.ndarray | None]) -> dict[int, list[int] | None]:
    return {i: None if v is None else v.tolist() for i, v in found.items()}


@pytest.mark.parametrize(("reduce_op", "expected"), [
    ("sum", [5, 7]), ("max", [4, 5]), ("min", [1, 2]), ("product", [4, 10]), ("avg", [2, 3])])
def test_all_reduce(reduce_op: str, expected: list[int]) -> None:
    found = outputs("all_reduce", _members([1, 2], [4, 5], reduce_op=reduce_op))
    assert _as_lists(found) == {0: expected, 1: expected}


def test_reduce_reaches_the_root_only() -> None:
    assert _as_lists(outputs("reduce", _members([1, 2], [4, 5], [0, 1]), root=2)) == {2: [5, 8]}


def test_broadcast_needs_only_the_root() -> None:
    assert _as_lists(outputs("broadcast", _members(None, [7, 8]), root=1)) == {0: [7, 8],
                                                                             1: [7, 8]}


def test_all_gather_and_reduce_scatter() -> None:
    assert _as_lists(outputs("all_gather", _members([1], [2], [3]))) == {0: [1, 2, 3],
                                                                        1: [1, 2, 3],
                                                                        2: [1, 2, 3]}
    found = outputs("reduce_scatter", _members([1, 2, 3, 4], [10, 20, 30, 40]))
    assert _as_lists(found) == {0: [11, 22], 1: [33, 44]}


def test_all_to_all_even_and_uneven() -> None:
    even = outputs("all_to_all", _members([1, 2], [3, 4]))
    assert _as_lists(even) == {0: [1, 3], 1: [2, 4]}
    uneven = outputs("all_to_allv", _members([1, 2, 3], [4, 5, 6, 7],
                                             splits=[(1, 2), (3, 1)]))
    assert _as_lists(uneven) == {0: [1, 4, 5, 6], 1: [2, 3, 7]}


def test_send_recv_and_unknown_inputs() -> None:
    pair = [ValuePayload(1, np.array([9]), False), ValuePayload(2, None, True)]
    assert _as_lists(outputs("send_recv", pair)) == {1: [9]}
    assert _as_lists(outputs("all_reduce", _members([1], None))) == {0: None, 1: None}


def test_nobody_wanting_values_gets_none() -> None:
    assert outputs("all_reduce", _members([1], [2], want=False)) == {}


def test_splits_that_do_not_add_up_are_unknown() -> None:
    found = outputs("all_to_allv", _members([1, 2], [3], splits=[(1, 2), (1, 0)]))
    assert found == {0: None, 1: None}
