"""What a script does on its fake GPUs: every aten op dispatched on fake CUDA tensors and every
kernel it would launch, recorded and never run.

:mod:`.device` is the entry point (the fork server prepares it, each rank enters it);
:mod:`.patches` makes a CPU-only torch look like a CUDA host of the scenario's GPU (its table
lists every patch point; the replacements live by job: :mod:`.cuda_devices`, :mod:`.cuda_streams`,
:mod:`.cuda_memory`, :mod:`.cuda_rng`, :mod:`.storages`, :mod:`.tensors`, :mod:`.parameter_moves`,
:mod:`.dispatch_modes`, :mod:`.sdpa_choice`, :mod:`.compile_backend`);
:mod:`.fake_mode` records each op's kernels, described by :mod:`.op_costs` as
``hwmodel.compute.spec.KernelSpec`` records (their durations come from the kernel-time model,
``hwmodel.compute``, fed by the measured tables in ``hwmodel/measured/data/``);
:mod:`.compiled` launches, for ``torch.compile``, the kernels Inductor would generate, as
:mod:`.inductor_plan` plans them;
:mod:`.cuda_ops`, :mod:`.cudnn_rnn`, :mod:`.unknown_shapes`, :mod:`.cpp_extensions` cover ops a CPU
build handles otherwise; :mod:`.dispatch_glue` measures the CPU time the clock deducts
(per-op dispatch glue, timed sections).
"""
