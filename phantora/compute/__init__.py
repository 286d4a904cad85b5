"""The kernel-time model: how long a GPU kernel runs, from its FLOPs and bytes.

For now a roofline from the GPU catalogue (:mod:`.roofline`), with a list of ops known to be
memory-bound (:mod:`.ops`) so that ops without a FLOP formula are told apart from unknown ones,
and a coverage record (:mod:`.coverage`) saying where the simulated GPU time came from.
"""

from phantora.compute.coverage import Coverage
from phantora.compute.roofline import (
    COMPUTE_EFFICIENCY,
    KERNEL_FLOOR_NS,
    MEMORY_EFFICIENCY,
    CostSource,
    KernelCost,
    kernel_cost,
    kernel_duration_ns,
)

__all__ = [
    "COMPUTE_EFFICIENCY",
    "KERNEL_FLOOR_NS",
    "MEMORY_EFFICIENCY",
    "CostSource",
    "Coverage",
    "KernelCost",
    "kernel_cost",
    "kernel_duration_ns",
]
