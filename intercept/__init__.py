"""The live-rank side: runs inside each rank process, one subpackage per model.

* :mod:`.process` - fork server, rank main, coordinator client, fake-CUDA shim
* :mod:`.dispatch` - fake-tensor dispatch that records kernels, torch patches, Inductor kernels
* :mod:`.values` - which values are real, the value model, what the host reads
* :mod:`.memory` - the CUDA caching allocator
* :mod:`.host_time` - the virtual clock and what the reference host's CPU is charged
* :mod:`.distributed` - the process-group backend
* :mod:`.runtime` - the rank's composition root: the seam between the fake device and the
  distributed side

Imports ``launch``, ``wire`` and the shared models of ``hwmodel`` (errors, measured values,
GPU catalogue, kernel-time model); the coordinator never imports this package.
"""
