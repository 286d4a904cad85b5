"""``data_ptr()`` of fake tensors reads as on a GPU: each storage's address in the simulated
caching allocator (distinct while alive, reused after a free as the allocator reuses blocks),
plus the view's offset; no deprecation warning (later an error in torch)."""

from typing import Any

import pytest

from tests.intercept.device_harness import run_snippet

POINTERS = """
import warnings
warnings.simplefilter("error")  # torch's "Accessing the data pointer of FakeTensor" warning

a = torch.empty(1000, 256, device="cuda")
b = torch.empty(1000, 256, device="cuda:1")
c = torch.empty(3, device="cuda")
row = a[7]
result["pointers"] = {
    "a": a.data_ptr(), "a_again": a.data_ptr(), "a_detached": a.detach().data_ptr(),
    "a_storage": a.untyped_storage().data_ptr(), "row": row.data_ptr(),
    "b": b.data_ptr(), "c": c.data_ptr(), "empty": torch.empty(0, device="cuda").data_ptr(),
    "host_real": torch.arange(4).data_ptr() != 0,
}
freed = c.data_ptr()
del c
result["reused"] = torch.empty(3, device="cuda").data_ptr() == freed
"""


@pytest.fixture(scope="module")
def pointers() -> dict[str, Any]:
    return run_snippet(POINTERS, device_count=2)["result"]


def test_each_storage_has_an_address_of_its_own(pointers: dict[str, Any]) -> None:
    found = pointers["pointers"]
    assert found["a"] == found["a_again"] == found["a_detached"] == found["a_storage"]
    assert len({found["a"], found["b"], found["c"]}) == 3
    assert found["b"] >= found["a"] + 1000 * 256 * 4  # another GPU: a range of its own
    assert all(found[name] % 512 == 0 for name in ("a", "b", "c"))  # the allocator's blocks
    assert found["empty"] == 0  # no block: PyTorch's null pointer
    assert found["host_real"]


def test_a_view_points_into_its_storage(pointers: dict[str, Any]) -> None:
    found = pointers["pointers"]
    assert found["row"] == found["a"] + 7 * 256 * 4


def test_a_freed_block_is_handed_out_again(pointers: dict[str, Any]) -> None:
    assert pointers["reused"]
