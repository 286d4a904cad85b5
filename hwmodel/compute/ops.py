"""Which aten ops are memory-bound by nature, so a zero FLOP count is expected of them.

The rank side counts FLOPs with ``torch.utils.flop_counter``'s formulas, which exist only for
the matrix-product family (mm, addmm, bmm, baddbmm, convolution, attention). Every other
kernel-launching op arrives with ``flops == 0``: the ops named here are then costed by the
bytes they move (that is what bounds them on a GPU); any other name is an *unknown op*, still
costed by its bytes but reported in the coverage so a formula or a measurement can be added.
"""

MEMORY_BOUND_OPS: frozenset[str] = frozenset({
    # pointwise arithmetic, comparisons, activations and their backward kernels
    "abs", "add", "addcdiv", "addcmul", "bitwise_and", "bitwise_not", "bitwise_or", "clamp",
    "clamp_max", "clamp_min", "div", "eq", "exp", "fill", "ge", "gelu", "gelu_backward", "gt",
    "isinf", "isnan", "le", "lerp", "log", "logical_and", "logical_not", "logical_or", "lt",
    "masked_fill", "maximum", "minimum", "mul", "ne", "neg", "pow", "reciprocal", "relu",
    "rsqrt", "rsub", "sigmoid", "sigmoid_backward", "sign", "silu", "silu_backward", "sqrt", "sub",
    "tanh", "tanh_backward", "threshold_backward", "where", "zero", "zeros", "ones",
    "full", "zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "new_full",
    "arange", "sgn", "erf", "cos", "sin", "floor_divide", "remainder", "polar", "scalar_tensor",
    "__and__", "__or__",
    # copies, casts, layout changes and indexing
    "_to_copy", "clone", "copy", "cat", "stack", "index", "index_put", "index_select",
    "gather", "scatter", "scatter_add", "embedding", "embedding_dense_backward", "repeat",
    "constant_pad_nd", "slice_backward", "select_backward", "masked_scatter", "_unsafe_view",
    "tril", "triu", "flip", "roll", "split_with_sizes_copy", "all_gather_copy_in", "chunk_cat",
    "_chunk_cat", "repeat_interleave",
    # normalisation, softmax, losses, dropout, random fills
    "native_layer_norm", "native_layer_norm_backward", "_fused_rms_norm",
    "_fused_rms_norm_backward", "native_group_norm", "native_batch_norm",
    "native_group_norm_backward", "native_batch_norm_backward", "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training",
    # pooling and resampling (CNNs, UNets)
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
    "avg_pool2d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
    "upsample_nearest2d", "upsample_nearest2d_backward", "upsample_bilinear2d",
    "upsample_bilinear2d_backward", "index_add", "bincount", "histc",
    "_softmax", "_safe_softmax", "_softmax_backward_data", "_log_softmax",
    "_log_softmax_backward_data",
    "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
    "native_dropout", "native_dropout_backward", "bernoulli", "uniform", "normal",
    "exponential", "random",
    # reductions
    "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "norm",
    "linalg_vector_norm", "var_mean", "var", "std", "cumsum", "all", "any", "topk", "sort",
})
"""Op names without the ``aten::`` namespace, overload or in-place ``_`` suffix."""

MEMORY_BOUND_PREFIXES: tuple[str, ...] = ("_foreach_", "_fused_adam", "_fused_sgd", "triton_")
"""Optimizer kernels: multi-tensor loops that stream parameters, grads and states once; the
kernels Inductor generates for ``torch.compile`` (fused element-wise ops and reductions)."""


SAME_KERNEL_AS: dict[str, str] = {
    "zeros": "zero", "zeros_like": "zero", "new_zeros": "zero",
    "ones": "fill", "ones_like": "fill", "full": "fill", "full_like": "fill",
    "new_ones": "fill", "new_full": "fill", "scalar_tensor": "fill",
    "__and__": "bitwise_and", "__or__": "bitwise_or",
    # SDPA's math path (fp32 attention): softmax that gives 0, not NaN, on fully masked rows
    "_safe_softmax": "_softmax",
    # FSDP2's copies into and out of its flat all-gather / reduce-scatter buffers
    "all_gather_copy_in": "copy", "split_with_sizes_copy": "copy", "chunk_cat": "cat",
    "_chunk_cat": "cat",
    "_native_batch_norm_legit": "native_batch_norm",
    "_native_batch_norm_legit_functional": "native_batch_norm",
}
"""Ops that launch the kernel of a measured op: factories fill their output, FSDP2's buffer
ops copy or concatenate."""


def base_name(name: str) -> str:
    """``"aten::add_.Tensor"`` -> ``"add"``: the op family a kernel belongs to."""
    op = name.rsplit("::", 1)[-1].split(".", 1)[0]
    return op[:-1] if op.endswith("_") and not op.endswith("__") else op


def is_memory_bound(name: str) -> bool:
    """Whether ``name`` is a known memory-bound op (its cost is the bytes it moves)."""
    op = base_name(name)
    return op in MEMORY_BOUND_OPS or op.startswith(MEMORY_BOUND_PREFIXES)
