"""The CUDA random-number state of the simulated GPUs: fake random ops produce no values, so only
the seed bookkeeping is kept, one seed for every GPU (listed in
``intercept.dispatch.patches.PATCHES``).
"""

from collections.abc import Sequence
from typing import Any

import torch

from intercept.dispatch.cuda_devices import installed

DEFAULT_CUDA_SEED = 67280421310721
"""What ``torch.cuda.initial_seed()`` reports before any seeding (c10's default seed)."""

_seed = DEFAULT_CUDA_SEED


def manual_seed(seed: int) -> None:
    global _seed
    _seed = int(seed)


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    manual_seed(torch.initial_seed())


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return _seed


def get_rng_state(device: Any = "cuda") -> torch.Tensor:
    """16 bytes like a CUDA generator's state: the seed, then a zero offset (little endian)."""
    state = (_seed % 2**64).to_bytes(8, "little") + bytes(8)
    with torch.utils._python_dispatch._disable_current_modes():
        return torch.tensor(list(state), dtype=torch.uint8)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(installed().device_count)]


def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
    with torch.utils._python_dispatch._disable_current_modes():
        manual_seed(int.from_bytes(bytes(new_state[:8].tolist()), "little"))


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for state in new_states:
        set_rng_state(state)


class CudaGenerator:
    """A GPU's default generator (``torch.cuda.default_generators[i]``; a CPU build has none).
    Its state is the simulator's one CUDA seed; a cloned state is a snapshot of it."""

    def __init__(self, index: int, snapshot: int | None = None) -> None:
        self.device = torch.device("cuda", index)
        self._snapshot = snapshot

    def manual_seed(self, new_seed: int) -> "CudaGenerator":
        manual_seed(new_seed)
        return self

    def seed(self) -> int:
        seed()
        return _seed

    def initial_seed(self) -> int:
        return _seed

    def get_state(self) -> torch.Tensor:
        return get_rng_state(self.device)

    def set_state(self, new_state: torch.Tensor) -> "CudaGenerator":
        set_rng_state(new_state)
        return self

    def clone_state(self) -> "CudaGenerator":
        return CudaGenerator(self.device.index or 0, _seed)

    def graphsafe_get_state(self) -> "CudaGenerator":
        return self.clone_state()

    def graphsafe_set_state(self, state: "CudaGenerator") -> "CudaGenerator":
        manual_seed(_seed if state._snapshot is None else state._snapshot)
        return self


class DefaultGenerators(Sequence[CudaGenerator]):
    """``torch.cuda.default_generators``: one :class:`CudaGenerator` per simulated GPU."""

    def __getitem__(self, index: Any) -> Any:
        return tuple(CudaGenerator(i) for i in range(installed().device_count))[index]

    def __len__(self) -> int:
        return installed().device_count
