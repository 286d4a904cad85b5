"""The simulated GPUs of this process, and what ``torch.cuda`` says about them.

:func:`set_up` (called by ``intercept.dispatch.patches.install``) makes the process's
:class:`FakeDevices` once; the other patch modules reach them through :func:`installed` and check
a device argument with :func:`index_of`. The functions after them stand in for the device
queries of ``torch.cuda`` (listed in ``intercept.dispatch.patches.PATCHES``).
"""

from dataclasses import dataclass
from typing import Any

import torch

from hwmodel.catalogue import GpuSpec
from hwmodel.errors import SimulationError
from intercept.memory import device_memory
from intercept.process import shim


@dataclass(frozen=True)
class DeviceProperties:
    """What ``torch.cuda.get_device_properties()`` reports, from the GPU catalogue."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    uuid: str
    warp_size: int = 32
    is_integrated: int = 0
    is_multi_gpu_board: int = 0

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB, "
                f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid})")


@dataclass(frozen=True)
class FakeDevices:
    """The simulated devices of this process, as :func:`set_up` made them."""

    gpu: GpuSpec
    device_count: int
    memory: device_memory.DeviceMemory

    def properties(self, device: Any = None) -> DeviceProperties:
        index = index_of(device)
        return DeviceProperties(
            name=self.gpu.marketing_name, major=self.gpu.sm_arch // 10,
            minor=self.gpu.sm_arch % 10, total_memory=self.gpu.memory_bytes,
            multi_processor_count=self.gpu.sm_count,
            uuid=f"GPU-00000000-0000-0000-0000-{index:012d}")


_installed: FakeDevices | None = None


def installed() -> FakeDevices:
    """The devices :func:`set_up` made."""
    if _installed is None:
        raise SimulationError("the fake CUDA devices are not installed; call "
                              "intercept.dispatch.device.prepare() first")
    return _installed


def already_installed(gpu: GpuSpec, device_count: int) -> FakeDevices | None:
    """The devices :func:`set_up` made (None: none yet); raises where they are not
    ``device_count`` GPUs of kind ``gpu``."""
    if _installed is not None and (_installed.gpu, _installed.device_count) != (gpu, device_count):
        raise SimulationError(f"fake CUDA devices already installed as "
                              f"{_installed.device_count} x {_installed.gpu.name}")
    return _installed


def set_up(gpu: GpuSpec, device_count: int) -> FakeDevices:
    """Make this process's ``device_count`` GPUs of kind ``gpu`` and tell the shim their count."""
    global _installed
    if device_count < 1:
        raise SimulationError(f"a simulated host needs at least one GPU, got {device_count}")
    shim.library().fakecuda_set_device_count(device_count)
    _installed = FakeDevices(gpu, device_count,
                             device_memory.DeviceMemory(gpu.memory_bytes, gpu.sm_arch))
    return _installed


def index_of(device: Any = None) -> int:
    """A CUDA device index that exists on the simulated host (None: the current device)."""
    index = torch.cuda._utils._get_device_index(device, optional=True)
    count = installed().device_count
    if not 0 <= index < count:
        raise RuntimeError(f"CUDA error: invalid device ordinal {index} "
                           f"(the simulated host has {count} GPUs)")
    return index


# --- the device queries of torch.cuda --------------------------------------------------------

def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def lazy_init() -> None:
    """Nothing to initialise: the shim's hooks are always ready."""


def init() -> None:
    """``torch.cuda.init()``: nothing to initialise."""


def device_count() -> int:
    return installed().device_count


def set_device(device: Any) -> None:
    index = torch.cuda._utils._get_device_index(device)
    if index >= 0:
        shim.library().fakecuda_set_device(index_of(index))


def current_device() -> int:
    return int(shim.library().fakecuda_current_device())


def exchange_device(device: int) -> int:
    """Make ``device`` current and return the previous one (-1 leaves it unchanged)."""
    if device < 0:
        return -1
    previous = current_device()
    set_device(device)
    return previous


def maybe_exchange_device(device: int) -> int:
    return exchange_device(device)


def get_device_properties(device: Any = None) -> DeviceProperties:
    return installed().properties(device)


def get_device_name(device: Any = None) -> str:
    return installed().properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    properties = installed().properties(device)
    return properties.major, properties.minor


def get_arch_list() -> list[str]:
    return [f"sm_{installed().gpu.sm_arch}"]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return installed().gpu.sm_arch >= 80  # BF16 tensor cores since Ampere


def is_tf32_supported() -> bool:
    return installed().gpu.sm_arch >= 80
