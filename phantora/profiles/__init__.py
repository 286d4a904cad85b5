"""Real GPU profiles: PyTorch profiler (Kineto) traces recorded on real GPUs.

:mod:`.kineto` reads one rank's trace into kernels with the aten op (and shapes) that launched
each, collectives with their op and size, and the profiled steps; :mod:`.families` sorts
kernels into families by the same rules for real and simulated kernels; :mod:`.activity` turns
either side's kernels into what a comparison sees (``phantora.diff`` compares a trace with a
simulated run). Nothing here runs PyTorch: a trace is plain JSON.
"""
