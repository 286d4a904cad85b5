"""GPU memory of a simulated device: PyTorch's CUDA caching allocator, modelled.

:mod:`.allocator` is the allocator (pure Python: pools, block rounding and splitting, caching
and fragmentation, as PyTorch's ``CUDACachingAllocator`` does them); :mod:`.device_memory`
allocates each live fake CUDA storage from its GPU's allocator, and the cuBLAS workspaces
PyTorch would. The GPU's capacity comes from the scenario's GPU (``hwmodel.catalogue``).
"""
