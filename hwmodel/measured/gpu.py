"""Measured GPU-time effects: the gap between back-to-back kernels, pageable host-to-GPU
copies, and how much a collective in flight and a kernel slow each other.

Used by ``phantora.engine.streams`` (the gap), ``hwmodel.compute.model`` (host copies) and
``phantora.engine.overlap`` (the slowdown curves; what the rule does with them and what it
misses: ``docs/models/compute.md``).
"""

from hwmodel.measured.source import NO_NCCL, Measured, Source

_OPS_H100 = dict(date="2026-11-22", gpu="NVIDIA H100 80GB HBM3 (a one-GPU cloud VM)",
                 nccl=NO_NCCL, torch="2.11.0+cu130")
"""``scripts/measure/profile_ops.py`` runs of ``scenarios/examples/gpt_single.py``, batch 8 x
1024 (``scripts/measure/data/ops/README.md``)."""

KERNEL_GAP_NS = Measured(1_800, Source(
    file="scripts/measure/data/ops/h100_gpt2-124m_b8.json, "
         "scripts/measure/data/ops/h100_gpt2-350m_b8.json",
    how="step time on the GPU minus the profiler's summed kernel time, per kernel-launching "
        "op: 2.09 us for GPT-2 124M, 1.58 us for GPT-2 350M",
    **_OPS_H100))
"""GPU time between the end of one kernel and the start of the next queued behind it on a
stream (the front end fetching and setting up the next launch), in GPU-bound training steps;
the kernel tables time kernels without it."""

HOST_LINK_GBS = Measured(7.0, Source(
    file="scripts/measure/data/ops/h100_gpt2-124m_b8.json",
    how="GPT-2 124M's model.to(\"cuda\"): 0.50 GB in 71 ms of \"Memcpy HtoD (Pageable -> "
        "Device)\"",
    **_OPS_H100))
"""GB/s of a ``cudaMemcpy`` from pageable host memory (what ``tensor.to("cuda")`` of an
ordinary CPU tensor does); pinned memory would run ~3-7x faster."""

_OVERLAP_H200X2 = dict(
    file="scripts/measure/data/overlap/h200x2/results.csv", date="2026-11-22",
    gpu="2x NVIDIA H200 (a two-GPU cloud VM, NV18)", nccl="2.28.9+cuda13.0 (RING/SIMPLE, 24 "
    "channels)", torch="2.11.0+cu130")
"""``scripts/measure/measure_overlap.py`` (``scripts/measure/data/overlap/h200x2/README.md``):
bf16 GEMMs 2048^3, 4096^3, 8192^3, layer_norm [8192, 4096] and an add of two 256 MiB tensors, beside
all_reduce/all_gather/reduce_scatter of 16 and 256 MiB on 2 ranks. The test suite checks the
points below against the file."""

KERNEL_BY_COLLECTIVE_COMPUTE = Measured(
    ((27_335, 1.691), (177_701, 1.296), (1_414_905, 1.089)),
    Source(how="(GEMM alone mean ns, its slowdown) per GEMM, each averaged over the 3 "
               "collectives x 2 sizes (k_slowdown)", **_OVERLAP_H200X2))
"""Slowdown of a compute-bound kernel while a collective is in flight, by its alone time."""

KERNEL_BY_COLLECTIVE_MEMORY = Measured(
    ((58_678, 1.310), (187_845, 1.141)),
    Source(how="layer_norm and add: (alone mean ns, slowdown), averaged the same way",
           **_OVERLAP_H200X2))
"""Slowdown of a memory-bound kernel while a collective is in flight, by its alone time."""

COLLECTIVE_BY_COMPUTE = Measured(
    ((27_335, 1.100), (177_701, 1.231), (1_414_905, 2.337)),
    Source(how="the collective's slowdown beside each GEMM, 256 MiB calls (training buckets "
               "and FSDP's per-layer calls are 10-500 MiB; 16 MiB calls were slowed 1.4-13x, "
               "starved of SMs)", **_OVERLAP_H200X2))
"""Slowdown of a collective beside a compute-bound kernel, by the kernel's alone time."""

COLLECTIVE_BY_MEMORY = Measured(
    ((58_678, 1.112), (187_845, 1.818)),
    Source(how="the collective's slowdown beside layer_norm and add, 256 MiB calls",
           **_OVERLAP_H200X2))
"""Slowdown of a collective beside a memory-bound kernel, by the kernel's alone time."""
