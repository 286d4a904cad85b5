"""Scaled dot-product attention on fake CUDA tensors: the kernel a CUDA build would pick, where a
CPU build only knows the math path (listed in ``intercept.dispatch.patches.PATCHES``).
"""

import torch
from torch.nn.attention import SDPBackend

from intercept.process import shim


def sdpa_cuda(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
              is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False) -> torch.Tensor:
    """Pick the kernel a CUDA build picks: the first backend in torch's priority order
    (``torch.nn.attention.sdpa_kernel(..., set_priority=True)`` changes it; by default flash,
    memory-efficient, math, cuDNN) that is enabled and takes these inputs.

    A CPU build's composite SDPA only knows the math path (bmm, softmax, bmm) for 'cuda'.
    NB: grouped-query attention is expanded with repeat_interleave (copies real kernels skip).
    """
    # The selection stands in for C++ code: the simulator's time; the kernels dispatch as usual.
    with shim.simulator_time():
        aten = torch.ops.aten
        if enable_gqa and key.size(-3) != query.size(-3):
            repeats = query.size(-3) // key.size(-3)
            key = key.repeat_interleave(repeats, -3)
            value = value.repeat_interleave(repeats, -3)
        backend = _sdpa_backend(query, attn_mask)
        if backend == SDPBackend.FLASH_ATTENTION:  # pybind enums: equal, not identical
            return aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        needs_logsumexp = torch.is_grad_enabled() and any(
            t.requires_grad for t in (query, key, value))
        if backend == SDPBackend.EFFICIENT_ATTENTION:
            return aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, needs_logsumexp, dropout_p, is_causal,
                scale=scale)[0]
        if backend == SDPBackend.CUDNN_ATTENTION:
            return aten._scaled_dot_product_cudnn_attention(
                query, key, value, attn_mask, needs_logsumexp, dropout_p, is_causal, False,
                scale=scale)[0]
        return aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale)[0]


def _sdpa_backend(query: torch.Tensor, attn_mask: torch.Tensor | None) -> SDPBackend:
    """The backend of :func:`sdpa_cuda`: flash and cuDNN take half precision without a mask
    (head size up to 256 and 128), memory-efficient any 4-D input whose mask needs no gradient,
    math anything. A mask that needs one (T5's learned position bias) took the math path on an
    H100 (torch 2.11: the 12 self-attention calls of T5-small's step, where its 6
    cross-attention calls, whose bias is a constant, took a fused kernel; the profile in
    ``scripts/data/traces/h100x1/h100x1_hf-t5/``). Raises as torch does when the enabled
    backends take none."""
    backends = torch.backends.cuda
    four_d, head = query.dim() == 4, query.size(-1)
    half = query.dtype in (torch.float16, torch.bfloat16)
    mask_fits = attn_mask is None or not attn_mask.requires_grad
    takes = {
        SDPBackend.FLASH_ATTENTION: backends.flash_sdp_enabled() and four_d and half
        and attn_mask is None and head <= 256,
        SDPBackend.EFFICIENT_ATTENTION: backends.mem_efficient_sdp_enabled() and four_d
        and mask_fits,
        SDPBackend.CUDNN_ATTENTION: backends.cudnn_sdp_enabled() and four_d and half
        and attn_mask is None and head <= 128,
        SDPBackend.MATH: backends.math_sdp_enabled(),
    }
    for code in torch._C._get_sdp_priority_order():
        backend = SDPBackend(code)
        if takes.get(backend, False):
            return backend
    raise RuntimeError("No available kernel. Aborting execution. (phantora: no enabled "
                       "scaled_dot_product_attention backend takes these inputs)")
