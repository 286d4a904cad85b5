"""Every measured value phantora simulates with, each with its source, in one home.

The rule: a number that was *measured* (on a GPU, a host, or read off a published measurement)
lives in this package as a :class:`~hwmodel.measured.source.Measured` value, or, for a large
table, as a :class:`~hwmodel.measured.source.Table` naming a file of ``data/``; either
carries a :class:`~hwmodel.measured.source.Source`: the raw data it comes from (under
``scripts/data/`` or ``docs/``), the date, the GPU, and the NCCL and torch versions, with
``unknown`` where the measurement does not say. The models that *use* the values (the overlap
rule in ``phantora.engine.overlap``, the stream scheduler, the collective planner, the compute
and host-cost models) import them from here and keep their code where it was; values that
are assumed rather than measured stay beside the model that assumes them, marked so.

* :mod:`.gpu` - GPU time: the kernel-to-kernel gap, pageable host-to-GPU copies, and the
  compute/communication overlap slowdowns.
* :mod:`.collectives` - NCCL's payload efficiencies, CTA rates and latency corrections
  (combined by ``phantora.collectives.efficiency``).
* :mod:`.tables` - the measured tables in ``data/``: kernel times per GPU, the reference host's
  per-op host costs (kernel launches and collective calls included) and host-CPU speeds.

Imports nothing outside this package: every layer of either side may read it.
"""
