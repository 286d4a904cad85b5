"""Real GPU profiles: reading PyTorch profiler (Kineto) traces recorded on real GPUs, and
comparing them with a simulated run of the same script.

:mod:`.kineto` reads one rank's trace into kernels with the aten op (and shapes) that launched
each, collectives with their op and size, and the profiled steps; :mod:`.families` sorts
kernels into families the same way for real and simulated kernels; :mod:`.simulated` reads a
run folder's outputs into the same shape; :mod:`.diff` compares the two. Nothing here runs
PyTorch: a trace is plain JSON.
"""
