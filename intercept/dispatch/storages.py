"""Fake storages that behave as a GPU's: an address in the simulated allocator, a resize it
knows of, and ``from_buffer`` making a real host storage (listed in
``intercept.dispatch.patches.PATCHES``).
"""

import functools
from collections.abc import Callable
from typing import Any

import torch

from intercept.dispatch.cuda_devices import installed


def storage_resize_reallocating(original: Callable[..., Any]) -> Callable[..., Any]:
    """``UntypedStorage.resize_`` of a fake CUDA storage gets a new block first (FSDP2 frees
    and re-allocates unsharded parameters this way; no op reaches the dispatcher)."""

    @functools.wraps(original)
    def resize_(self: torch.UntypedStorage, size: int) -> Any:
        installed().memory.resize(self, int(size))
        return original(self, size)

    return resize_


def storage_from_buffer_real(original: Callable[..., Any]) -> Callable[..., Any]:
    """``UntypedStorage.from_buffer`` makes a real CPU storage, as without a fake mode (under
    one it makes a meta storage, which ``torch.ByteTensor(storage)`` then refuses): object
    collectives pickle into one."""

    @functools.wraps(original)
    def from_buffer(*args: Any, **kwargs: Any) -> Any:
        with torch.utils._python_dispatch._disable_current_modes():
            return original(*args, **kwargs)

    return from_buffer


def fake_data_ptr(self: torch.Tensor) -> int:
    """``Tensor.data_ptr()`` of a fake tensor: where its first element lies, as on a GPU (a
    fake storage's own pointer is null, so every tensor would alias every other, and torch
    warns that reading it will become an error). A GPU storage's address is its block's in
    the simulated allocator; a fake host storage's is the storage object's own (unique while
    it lives); a meta or empty one's is null."""
    storage = self.untyped_storage()
    address = installed().memory.address(storage)
    if address is None:
        address = 0 if self.device.type == "meta" or not storage.nbytes() else storage._cdata
    return address + self.storage_offset() * self.element_size()


def storage_data_ptr_simulated(original: Callable[..., int]) -> Callable[..., int]:
    """``UntypedStorage.data_ptr()`` of a fake GPU storage: its address in the simulated
    allocator (see :func:`fake_data_ptr`); other storages keep their own."""

    @functools.wraps(original)
    def data_ptr(self: torch.UntypedStorage) -> int:
        address = installed().memory.address(self)
        return original(self) if address is None else address

    return data_ptr
