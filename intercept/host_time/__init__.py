"""A rank's host (CPU) time: what a reference GPU host's CPU would spend on the script.

:mod:`.clock` is the rank's virtual clock (and the ``time.*`` patches that read it). Intercepted
operations are charged from the host-cost table measured on the reference hosts
(:mod:`.host_cost`, ``hwmodel/measured/data/host_costs.json``), with cuBLAS's per-shape
heuristic (:mod:`.gemm_heuristic`, fitted on profiled MoE runs) and the constants fitted on
real training steps (:mod:`.host_fit`); c10d's Python wrappers count as that table's
(:mod:`.c10d_host`). The script's own Python between them is counted (:mod:`.python_work`,
reference-host ns per line and call) or measured and made robust (:mod:`.residual`), scaled by
the host-speed benchmark (:mod:`.host_benchmark`, :mod:`.host_speed`) against the reference
hosts of ``hwmodel.measured.host_references``.
"""
