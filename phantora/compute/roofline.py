"""Kernel durations from the GPU catalogue: a roofline with sustained (not peak) rates.

    duration = KERNEL_FLOOR_NS + max(flops / (peak_flops * COMPUTE_EFFICIENCY),
                                     bytes / (hbm_bandwidth * MEMORY_EFFICIENCY))

The fixed term is what a kernel costs on the GPU however little it does (launch, ramp-up,
tail); the roofline term is what its work costs at the rate a well-tuned kernel sustains.
Every kernel therefore takes at least ``KERNEL_FLOOR_NS``: nothing is ever free.

Sources of the constants (all measured on the lent machines with PyTorch 2.11 + CUDA 13,
back-to-back calls timed with CUDA events; see ``../shared/research/validation_anchors.md``
and ``/work/.library/device/KINDS.md``):

* 8192^3 bf16 GEMM: 798-800 TFLOP/s on the H100, 788 on the H200, ~80% of the 989 TFLOP/s
  dense peak in the catalogue.
* Device-to-device copy: ~3.0 TB/s on the H100 (of 3.35) and ~4.3 TB/s on the H200 (of 4.8),
  counting bytes read and written: ~90% of the HBM peak on both. An fp32 ``add`` of 2^28
  elements reached 3.05 TB/s on the H100.
* Tiny kernels (``add_``/``fill_`` of one element) back to back: 1.79-1.94 us each on the H100.

NB: a single efficiency per rate is a first-order model. Small matrix products run far below
80% (1024^3 bf16: 327 TFLOP/s on the H100) and data that fits in L2 moves faster than HBM;
the measured-table compute model is its own issue. FLOPs are charged at the bf16 tensor
rate whatever the dtype (the kernel record carries none): fp32 matrix products without TF32
would run several times slower.
"""

from dataclasses import dataclass
from enum import Enum
from math import ceil

from phantora.cluster.catalogue import GpuSpec
from phantora.compute.ops import is_memory_bound

COMPUTE_EFFICIENCY = 0.80
"""Sustained share of the dense tensor-core peak (8192^3 bf16 GEMM, 788-800 / 989 TFLOP/s)."""

MEMORY_EFFICIENCY = 0.90
"""Sustained share of the HBM peak (D2D copy 3.0 / 3.35 TB/s on H100, 4.3 / 4.8 on H200)."""

KERNEL_FLOOR_NS = 1_900
"""GPU time of a kernel that does almost nothing (1.79-1.94 us back to back on the H100)."""


class CostSource(str, Enum):
    """Which term decided a kernel's duration (the coverage section of ``summary.json``)."""

    COMPUTE = "roofline-compute"
    """FLOPs at the sustained tensor rate dominate."""
    MEMORY = "roofline-memory"
    """Bytes at the sustained HBM rate dominate."""
    FLOOR = "kernel-floor"
    """A known op whose roofline time is below the fixed per-kernel cost (launch-bound)."""
    UNKNOWN = "unknown-op"
    """No FLOP count and not a known memory-bound op: costed by its bytes, and reported."""


@dataclass(frozen=True, slots=True)
class KernelCost:
    duration_ns: int
    source: CostSource


def kernel_cost(name: str, flops: int, nbytes: int, gpu: GpuSpec) -> KernelCost:
    """The duration of one kernel and which term decided it; ``flops``/``nbytes`` >= 0."""
    if flops < 0 or nbytes < 0:
        raise ValueError(f"{name}: flops ({flops}) and bytes ({nbytes}) must be >= 0")
    # TFLOP/s x 1e3 = FLOP per ns; GB/s = bytes per ns.
    compute_ns = ceil(flops / (gpu.bf16_tflops * 1e3 * COMPUTE_EFFICIENCY))
    memory_ns = ceil(nbytes / (gpu.hbm_gbs * MEMORY_EFFICIENCY))
    duration_ns = KERNEL_FLOOR_NS + max(compute_ns, memory_ns)
    if flops == 0 and not is_memory_bound(name):
        return KernelCost(duration_ns, CostSource.UNKNOWN)
    if max(compute_ns, memory_ns) < KERNEL_FLOOR_NS:
        return KernelCost(duration_ns, CostSource.FLOOR)
    return KernelCost(duration_ns,
                      CostSource.COMPUTE if compute_ns >= memory_ns else CostSource.MEMORY)


def kernel_duration_ns(name: str, flops: int, nbytes: int, gpu: GpuSpec) -> int:
    """The duration of one kernel in ns (never below ``KERNEL_FLOOR_NS``)."""
    return kernel_cost(name, flops, nbytes, gpu).duration_ns
