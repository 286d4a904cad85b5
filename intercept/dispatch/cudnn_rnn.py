"""Recurrent layers on fake CUDA tensors take cuDNN's path, as on a CUDA build.

``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` call ``aten::lstm`` / ``gru`` / ``rnn_tanh`` /
``rnn_relu``, composite ops that choose their kernel in C++. A CUDA build hands an input of
fp16, bf16, fp32 or fp64 to cuDNN when ``torch.backends.cudnn.enabled``: one
``aten::_cudnn_rnn`` launch for the whole sequence and all layers, and one
``aten::_cudnn_rnn_backward``. A CPU build has no cuDNN and runs one fused cell per layer and
time step (``_thnn_fused_lstm_cell``: 3,072 launches a step for a 2-layer LSTM over 1,536
tokens). Other dtypes take the cell path on both builds, so they are left to it.

The kernels registered here for ``AutogradCUDA`` make that choice as the CUDA build does and
call ``_cudnn_rnn`` under autograd; :func:`cudnn_rnn_meta` and :func:`cudnn_rnn_backward_meta`
give the outputs. ``Module.to('cuda')`` flattens the weights into one buffer
(:func:`flatten_weight`). Under autocast, a CUDA build's autocast wrapper of ``_cudnn_rnn`` runs
it in fp16 (whatever the autocast dtype), on the weights copied into a new fp16 buffer each
call (:func:`_autocast_copies`).

The cuDNN dropout state (dropout between layers) is cached once per device in a CUDA build; it
is not modelled (its one-off initialisation kernel is not charged).
"""

from typing import Any

import torch
from torch._meta_registrations import _cudnn_rnn as _torch_cudnn_rnn_meta

from hwmodel.compute.spec import CUDNN_MODES, RNN_CELLS

aten = torch.ops.aten

CUDNN_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""The input dtypes a CUDA build's ``at::cudnn_is_acceptable`` hands to cuDNN (torch 2.11 on an
H100 took bf16 too); others run the cell path."""


def cudnn_takes(input: torch.Tensor) -> bool:
    """``at::cudnn_is_acceptable`` of a CUDA build, which picks the recurrent layers' kernel."""
    return torch.backends.cudnn.enabled and input.dtype in CUDNN_DTYPES


def is_acceptable(tensor: torch.Tensor) -> bool:
    """``torch.backends.cudnn.is_acceptable`` of a CUDA build, which ``nn.LSTM`` asks before it
    flattens its weights (a CPU build says no, with a warning). Its dtypes are Python's own
    list, without bf16: a bf16 LSTM keeps its weights apart and cuDNN copies them each call."""
    return (torch.backends.cudnn.enabled and tensor.device.type == "cuda"
            and tensor.dtype in torch.backends.cudnn.CUDNN_TENSOR_DTYPES)


def cudnn_mode(mode: str) -> int:
    """``torch.backends.cudnn.rnn.get_cudnn_mode`` (``"LSTM"`` -> 2): it reads cuDNN's enum."""
    return CUDNN_MODES[mode.lower()]


def use_flatten_weight() -> bool:
    """``torch._use_cudnn_rnn_flatten_weight`` of a CUDA build."""
    return True


def flatten_weight(weights: list[torch.Tensor], weight_stride0: int, input_size: int, mode: int,
                   hidden_size: int, proj_size: int, num_layers: int, batch_first: bool,
                   bidirectional: bool) -> torch.Tensor:
    """``_cudnn_rnn_flatten_weight``, which ``Module.to('cuda')`` runs: one buffer holds every
    weight, and the parameters become views of it (cuDNN then reads them in place)."""
    flat = torch.zeros(sum(w.numel() for w in weights), dtype=weights[0].dtype,
                       device=weights[0].device)
    offset = 0
    for w in weights:
        flat[offset:offset + w.numel()].view_as(w).copy_(w)
        w.set_(flat.untyped_storage(), offset, w.shape)
        offset += w.numel()
    return flat


def _weight_buffer(params: list[torch.Tensor]) -> torch.Tensor:
    """``try_get_weight_buf``: the storage of the first weight, which holds every weight where
    the module flattened them (else ``_cudnn_rnn`` copies them into a buffer of its own)."""
    first = params[0]
    return torch.empty(0, dtype=first.dtype, device=first.device).set_(first.untyped_storage())


def _autocast_copies(params: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The CUDA build's autocast wrapper of ``_cudnn_rnn``: a new fp16 buffer, each weight
    copied into its ``[numel, 1]`` view (autograd carries the gradients back through the
    copies, cast to the weights' dtype)."""
    half = torch.float16
    flat = torch.zeros(sum(p.numel() for p in params), dtype=half, device=params[0].device)
    views, offset = [], 0
    for p in params:
        views.append(torch.empty(0, dtype=half, device=flat.device).set_(
            flat.untyped_storage(), offset, (p.numel(), 1)))
        offset += p.numel()
    for view, p in zip(views, params, strict=True):
        view.copy_(p.view(p.numel(), 1))
    return views, flat


def _run_cudnn(mode: str, input: torch.Tensor, hx: torch.Tensor, cx: torch.Tensor | None,
               params: list[torch.Tensor], num_layers: int, dropout: float, train: bool,
               bidirectional: bool, batch_first: bool,
               batch_sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_cudnn_impl`` of a CUDA build: output, hy and cy (empty without a cell state)."""
    hidden_size, proj_size = hx.shape[2], 0
    if cx is not None and cx.shape[2] != hx.shape[2]:
        hidden_size, proj_size = cx.shape[2], hx.shape[2]
    weight_stride0 = len(params) // (num_layers * (2 if bidirectional else 1))
    weight_buf = _weight_buffer(params)
    if torch.is_autocast_enabled("cuda") and params[0].dtype == torch.float32:
        params, weight_buf = _autocast_copies(params)
        half = torch.float16
        hx = hx.to(half)
        cx = cx.to(half) if cx is not None else None
        input = input.to(half)
    output, hy, cy, _reserve, _buf = aten._cudnn_rnn(
        input, params, weight_stride0, weight_buf, hx, cx, CUDNN_MODES[mode], hidden_size,
        proj_size, num_layers, batch_first, dropout, train, bidirectional, batch_sizes, None)
    return output, hy, cy


def _sequence_kernel(mode: str) -> Any:
    """The ``AutogradCUDA`` kernel of ``aten::<mode>.input`` (padded or unpacked input)."""

    def kernel(input: torch.Tensor, hx: Any, params: list[torch.Tensor], has_biases: bool,
               num_layers: int, dropout: float, train: bool, bidirectional: bool,
               batch_first: bool) -> tuple[torch.Tensor, ...]:
        h, c = (hx[0], hx[1]) if mode == "lstm" else (hx, None)
        if not cudnn_takes(input):
            return _cell_path(mode, "input")(input, hx, params, has_biases, num_layers, dropout,
                                             train, bidirectional, batch_first)
        output, hy, cy = _run_cudnn(mode, input, h, c, list(params), num_layers, dropout,
                                    train, bidirectional, batch_first, [])
        return (output, hy, cy) if mode == "lstm" else (output, hy)

    kernel.__name__ = f"{mode}_cudnn"
    return kernel


def _packed_kernel(mode: str) -> Any:
    """The ``AutogradCUDA`` kernel of ``aten::<mode>.data`` (a PackedSequence's data)."""

    def kernel(data: torch.Tensor, batch_sizes: torch.Tensor, hx: Any,
               params: list[torch.Tensor], has_biases: bool, num_layers: int, dropout: float,
               train: bool, bidirectional: bool) -> tuple[torch.Tensor, ...]:
        h, c = (hx[0], hx[1]) if mode == "lstm" else (hx, None)
        if not cudnn_takes(data):
            return _cell_path(mode, "data")(data, batch_sizes, hx, params, has_biases,
                                            num_layers, dropout, train, bidirectional)
        output, hy, cy = _run_cudnn(mode, data, h, c, list(params), num_layers, dropout, train,
                                    bidirectional, False, batch_sizes.tolist())
        return (output, hy, cy) if mode == "lstm" else (output, hy)

    kernel.__name__ = f"{mode}_packed_cudnn"
    return kernel


def _cell_path(mode: str, overload: str) -> Any:
    """The op's composite kernel (one fused cell per layer and step), as the build has it."""
    op = getattr(getattr(aten, mode), overload)
    return lambda *args: op._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, *args)


RESERVE_PER_STATE = {"lstm": 5.5, "gru": 6.0, "rnn_tanh": 5.5, "rnn_relu": 5.5}
"""cuDNN's training reserve (what backward reads) per layer and direction, in elements per
token and hidden unit, before rounding. LSTM and GRU: fitted exactly to the four
``_cudnn_rnn`` reserves of ``tests/intercept/data/cuda_reference.json`` (H100, cuDNN 9, fp32,
fp16 and bf16) with :data:`RESERVE_ALIGN`; the plain RNN cells were not measured and take the
LSTM's."""
RESERVE_ALIGN = 128
"""Bytes: each layer and direction's reserve is its elements' bytes plus half this, rounded up
to a multiple of it."""


def reserve_bytes(cell: str, tokens: int, hidden: int, layers: int, directions: int,
                  element_size: int) -> int:
    """Bytes of the reserve ``_cudnn_rnn`` returns in training (:data:`RESERVE_PER_STATE`)."""
    per_layer = RESERVE_PER_STATE[cell] * tokens * hidden * element_size + RESERVE_ALIGN // 2
    return layers * directions * -(-int(per_layer) // RESERVE_ALIGN) * RESERVE_ALIGN


def _sequence_first(t: torch.Tensor) -> torch.Tensor:
    """A new tensor of ``t``'s batch-first shape laid out sequence-first, as cuDNN writes it."""
    return t.new_empty((t.shape[1], t.shape[0], *t.shape[2:])).transpose(0, 1)


def cudnn_rnn_meta(input: torch.Tensor, weight: list[torch.Tensor], weight_stride0: int,
                   weight_buf: torch.Tensor | None, hx: torch.Tensor, cx: torch.Tensor | None,
                   mode: int, hidden_size: int, proj_size: int, num_layers: int,
                   batch_first: bool, dropout: float, train: bool, bidirectional: bool,
                   batch_sizes: list[int], dropout_state: torch.Tensor | None,
                   ) -> tuple[torch.Tensor, ...]:
    """PyTorch's meta kernel of ``_cudnn_rnn``, with the training reserve cuDNN allocates
    (PyTorch's says 0 bytes: the memory backward holds would go uncounted), and a batch-first
    output laid out as cuDNN leaves it: a transposed view of a sequence-first tensor."""
    output, hy, cy, _, buffer = _torch_cudnn_rnn_meta(
        input, weight, weight_stride0, weight_buf, hx, cx, mode, hidden_size, proj_size,
        num_layers, batch_first, dropout, train, bidirectional, batch_sizes, dropout_state)
    total = sum(w.numel() for w in weight)
    if buffer is None or buffer.numel() != total:
        buffer = weight[0].new_empty(total)  # weights not flattened: cuDNN copies them
    tokens = input.shape[0] if batch_sizes else input.shape[0] * input.shape[1]
    size = reserve_bytes(RNN_CELLS[mode], tokens, hidden_size, num_layers,
                         2 if bidirectional else 1, input.element_size()) if train else 0
    if batch_first and not batch_sizes:
        output = _sequence_first(output)
    return output, hy, cy, input.new_empty(size, dtype=torch.uint8), buffer


def cudnn_rnn_backward_meta(input: torch.Tensor, weight: list[torch.Tensor], weight_stride0: int,
                            weight_buf: torch.Tensor, hx: torch.Tensor, cx: torch.Tensor | None,
                            output: torch.Tensor, grad_output: torch.Tensor | None,
                            grad_hy: torch.Tensor | None, grad_cy: torch.Tensor | None,
                            mode: int, hidden_size: int, proj_size: int, num_layers: int,
                            batch_first: bool, dropout: float, train: bool, bidirectional: bool,
                            batch_sizes: list[int], dropout_state: torch.Tensor | None,
                            reserve: torch.Tensor, output_mask: list[bool],
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None,
                                       list[torch.Tensor]]:
    """Shapes of ``_cudnn_rnn_backward``'s gradients (PyTorch has no meta kernel for it):
    the input's (laid out as the forward's output), the hidden and cell states', and one per
    weight tensor."""
    batch_major = batch_first and not batch_sizes  # computed sequence-first, as the output
    grad_input = _sequence_first(input) if batch_major else input.new_empty(input.shape)
    grad_hx = hx.new_empty(hx.shape)
    grad_cx = cx.new_empty(cx.shape) if cx is not None else None
    grad_weights = [w.new_empty(w.shape) for w in weight] if output_mask[3] else []
    return grad_input, grad_hx, grad_cx, grad_weights


def registrations() -> list[tuple[str, str, Any]]:
    """``(op, dispatch key, kernel)`` for every op this module replaces."""
    sequence = [(f"{mode}.input", "AutogradCUDA", _sequence_kernel(mode)) for mode in CUDNN_MODES]
    packed = [(f"{mode}.data", "AutogradCUDA", _packed_kernel(mode)) for mode in CUDNN_MODES]
    return [*sequence, *packed, ("_cudnn_rnn_flatten_weight", "AutogradCUDA", flatten_weight),
            ("_cudnn_rnn", "Meta", cudnn_rnn_meta),
            ("_cudnn_rnn_backward", "Meta", cudnn_rnn_backward_meta)]
