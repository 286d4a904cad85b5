"""The ``phantora`` process-group backend: every collective and p2p of the script goes to the
simulator instead of NCCL.

:func:`installed` registers :class:`PhantomProcessGroup` as backend ``"phantora"`` and makes
``torch.distributed`` use it for every group, whatever backend the script names (``"nccl"``,
``"gloo"``, ``"cpu:gloo,cuda:nccl"``, none), through ``init_process_group``, ``new_group`` and
``DeviceMesh`` alike. Rendezvous needs no network: each rank gets its own in-memory
``HashStore``, and rank and world size come from the arguments or, as ``env://`` does, from
``RANK``/``WORLD_SIZE``. Nothing is ever exchanged between ranks through the store.

A collective is described to :meth:`RankRuntime.collective` (sizes as nccl-tests counts them)
and returns a :class:`PhantomWork` at once. Fake floating tensors carry no data; tensors with
real values (``intercept.values.store``: integers, bools, small and CPU tensors) send them along,
and their outputs receive what the other members sent once every member has issued the
collective (delivered with a later host sync; ``wait()`` on real CPU tensors blocks the host
for them, as gloo does). As with ProcessGroupNCCL, ``work.wait()`` makes the caller's current stream
wait for the collective and does not block the CPU (``barrier`` alone also blocks the host). Futures
are completed at once with the outputs; where PyTorch's CUDA futures would make streams wait
(``fut.wait()``, ``fut.then``; DDP's reducer at the end of backward) the current stream waits
for the collective event instead.

Functional collectives (``torch.ops._c10d_functional.*``: DTensor, tensor parallel, FSDP2's
``clip_grad_norm_``) never reach a process group under ``FakeTensorMode``, which answers them
from meta kernels; the fake mode passes each to :func:`handle_functional_collective`.

Checked against torch 2.13.0 (method names of the ``ProcessGroup`` trampoline and of
``distributed_c10d``, ``_c10d_functional`` schemas, the DDP entry points patched below).
"""

# The backend methods share their names with the Python-facing ProcessGroup API whose stubs
# declare other signatures; the trampoline calls ours with the backend signatures.
# mypy: disable-error-code="override"

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.distributed.utils as dist_utils
import torch.nn.parallel.distributed as ddp_module
from torch._C._distributed_c10d import Work
from torch.autograd import Variable
from torch.futures import Future
from torch.utils.weak import WeakTensorKeyDictionary

import numpy as np

from intercept.dispatch import fake_mode
from intercept.runtime import RankRuntime
from intercept.values.store import is_real, valuable
from wire.messages import ValuePayload
from wire.ops import IssuedOp

BACKEND_NAME = "phantora"

BARRIER_NBYTES = 4
"""NB: ProcessGroupNCCL's barrier all-reduces a one-element tensor; we take it as float32."""

def _current_stream_id() -> int:
    """The caller's current CUDA stream; 0 (the default stream) where there is no fake device."""
    if torch.accelerator.is_available():
        return torch.accelerator.current_stream().stream_id
    return 0


def _current_stream_waits(runtime: RankRuntime, event: int) -> None:
    """What ``work.wait()`` does on NCCL: the caller's stream waits, the CPU does not."""
    runtime.wait_event(_current_stream_id(), event)


def _runtime() -> RankRuntime:
    runtime = RankRuntime.current()
    if runtime is None:
        raise RuntimeError("a phantora collective outside a simulated rank: no RankRuntime")
    return runtime


_REDUCE_OPS = {"SUM": "sum", "AVG": "avg", "PRODUCT": "product", "MIN": "min", "MAX": "max",
               "BAND": "band", "BOR": "bor", "BXOR": "bxor"}


def _reduce_op(opts: Any) -> str:
    """The values' name of a c10d reduce op (``premul_sum`` and unknown ones: unknown)."""
    op = getattr(opts, "reduceOp", None)
    for name, value in _REDUCE_OPS.items():
        if op == getattr(dist.ReduceOp, name):
            return value
    return "unknown" if op is not None else "sum"


def _numpy_dtype(tensors: Sequence[torch.Tensor]) -> np.dtype:
    """The wire dtype of an empty contribution (what the outputs hold)."""
    dtype = tensors[0].dtype if tensors else torch.int64
    return np.dtype("float32") if dtype == torch.bfloat16 else \
        torch.empty(0, dtype=dtype, device="cpu").numpy().dtype


def _blocking(opts: object) -> bool:
    """Whether c10d issued the call with ``async_op=False`` (``opts.asyncOp``, torch 2.8 on):
    ProcessGroupNCCL then runs it on the caller's stream, and its host path is shorter
    (``intercept.host_time.host_cost``, ``collective_async_extra_ns``). Calls from C++ (DDP's
    reducer) and functional collectives are async."""
    return getattr(opts, "asyncOp", True) is False


def _nbytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _flat(tensor_lists: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    return [t for tensors in tensor_lists for t in tensors]


class PhantomFuture(Future):
    """A future completed at once with ``value``; like a CUDA future, ``wait()`` and ``then``
    callbacks first make the current stream wait for the collective ``event``."""

    def __init__(self, runtime: RankRuntime, event: int, value: object) -> None:
        super().__init__()
        self._runtime = runtime
        self._event = event
        self.set_result(value)

    def wait(self) -> Any:
        _current_stream_waits(self._runtime, self._event)
        return super().wait()

    def then(self, callback: Callable[[Future], Any]) -> Future:
        def synced(fut: Future) -> Any:
            _current_stream_waits(self._runtime, self._event)
            return callback(fut)
        return super().then(synced)


class PhantomWork(Work):
    """The handle of one simulated collective; see the module docstring for its semantics."""

    def __init__(self, runtime: RankRuntime, event: int, outputs: list[torch.Tensor], *,
                 host_sync: bool = False) -> None:
        """``host_sync``: ``wait()`` blocks the host until the collective is done (barrier, and
        real CPU outputs taking values, as with gloo)."""
        super().__init__()
        self._runtime = runtime
        self.event = event
        """The event that completes with the collective."""
        self._outputs = outputs
        self._host_sync = host_sync

    def wait(self, timeout: object = None) -> bool:
        """The current stream waits for the collective (a barrier also blocks the CPU)."""
        _current_stream_waits(self._runtime, self.event)
        if self._host_sync:
            self._runtime.sync("event", self.event)
        return True

    def synchronize(self) -> None:
        self.wait()

    def is_completed(self) -> bool:
        """Whether the collective has completed at this rank's current virtual time."""
        return bool(self._runtime.sync("query", self.event))

    def result(self) -> list[torch.Tensor]:
        return self._outputs

    def get_future(self) -> Future:
        """A future completed with the outputs; asked for during backward (DDP's reducer, whose
        C++ code waits on it without our help), the end of backward waits for the collective."""
        runtime, event = self._runtime, self.event
        if torch._C._current_graph_task_id() != -1:
            Variable._execution_engine.queue_callback(
                lambda: _current_stream_waits(runtime, event))
        return PhantomFuture(runtime, event, self._outputs)


class PhantomProcessGroup(dist.ProcessGroup):
    """One process group of the simulated job; method names are those torch 2.13's
    ``ProcessGroup`` trampoline and ``distributed_c10d`` call."""

    def __init__(self, group_rank: int, group_size: int, global_ranks: Sequence[int],
                 group_name: str) -> None:
        super().__init__(group_rank, group_size)  # type: ignore[call-arg]  # (rank, size) exists
        self._group_rank = group_rank
        self._group_size = group_size
        self.global_ranks = tuple(global_ranks) or tuple(range(group_size))
        """Global rank of each group rank."""
        self._group_name = group_name

    @property
    def group_name(self) -> str:
        # C++ getGroupName() only knows registered C++ backends; functional collectives need it.
        return self._group_name

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def rank(self) -> int:
        return self._group_rank

    def size(self) -> int:
        return self._group_size

    # -- the one place a collective is issued ------------------------------------------------
    def issue(self, op: IssuedOp, nbytes: int, dtype_bytes: int, outputs: list[torch.Tensor], *,
              inputs: Sequence[torch.Tensor] = (), root: int = 0,
              splits: tuple[int, ...] | None = None,
              recv_splits: tuple[int, ...] | None = None, peer: int | None = None,
              host_sync: bool = False, reduce_op: str = "sum",
              element_splits: tuple[int, ...] | None = None,
              blocking: bool = False) -> PhantomWork:
        """Issue ``op`` on this group from the caller's current stream; ``peer`` is the group
        rank at the other end of a send or recv. ``inputs`` are the tensors whose values the
        collective moves into ``outputs`` (``element_splits``: elements of the inputs to each
        group rank, where uneven). ``splits``/``recv_splits``: an all_to_allv's bytes to and
        from each group rank. ``blocking``: c10d's ``async_op=False`` (:func:`_blocking`)."""
        runtime = _runtime()
        with runtime.excluded():
            if peer is None:
                ranks = self.global_ranks
            else:
                me, other = self.global_ranks[self._group_rank], self.global_ranks[peer]
                ranks = (me, other) if op == IssuedOp.SEND else (other, me)
            values = _values_of(runtime, inputs, outputs, reduce_op, element_splits)
            if values is not None and values.want and any(is_real(t) for t in outputs):
                host_sync = True
            event = runtime.collective(group=self._group_name, ranks=ranks, op=op,
                                       nbytes=nbytes, dtype_bytes=dtype_bytes,
                                       stream=_current_stream_id(), root=root, splits=splits,
                                       recv_splits=recv_splits, values=values,
                                       blocking=blocking)
            return PhantomWork(runtime, event, outputs, host_sync=host_sync)

    def _all_to_allv(self, send_elements: Sequence[int], recv_elements: Sequence[int],
                     element_bytes: int, inputs: list[torch.Tensor],
                     outputs: list[torch.Tensor], blocking: bool = False) -> PhantomWork:
        """An all-to-all with ``send_elements[j]`` to and ``recv_elements[j]`` from group rank
        ``j``. Always an all_to_allv, even where this rank's row is even: whether the whole
        split matrix is even only the coordinator can tell (a rank may send even rows and
        receive uneven ones, or send other totals than another rank)."""
        return self.issue(IssuedOp.ALL_TO_ALLV, sum(send_elements) * element_bytes,
                          element_bytes, outputs, inputs=inputs,
                          splits=tuple(n * element_bytes for n in send_elements),
                          recv_splits=tuple(n * element_bytes for n in recv_elements),
                          element_splits=tuple(send_elements), blocking=blocking)

    # -- collectives ---------------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: object = None) -> PhantomWork:
        return self.issue(IssuedOp.ALL_REDUCE, _nbytes(tensors), tensors[0].element_size(), tensors,
                          inputs=tensors, reduce_op=_reduce_op(opts), blocking=_blocking(opts))

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: object = None) -> PhantomWork:
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> PhantomWork:
        return self.issue(IssuedOp.BROADCAST, _nbytes(tensors), tensors[0].element_size(), tensors,
                          inputs=tensors, root=opts.rootRank, blocking=_blocking(opts))

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> PhantomWork:
        return self.issue(IssuedOp.REDUCE, _nbytes(tensors), tensors[0].element_size(), tensors,
                          inputs=tensors, root=opts.rootRank, reduce_op=_reduce_op(opts),
                          blocking=_blocking(opts))

    def allgather(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: object = None) -> PhantomWork:
        return self.all_gather_single_coalesced(_flat(output_lists), inputs, opts)

    def allgather_coalesced(self, output_lists: list[list[torch.Tensor]],
                            inputs: list[torch.Tensor], opts: object = None) -> PhantomWork:
        return self.all_gather_single_coalesced(_flat(output_lists), inputs, opts)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts: object = None) -> PhantomWork:
        return self.all_gather_single_coalesced([output], [input], opts)

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor],
                                    inputs: list[torch.Tensor], opts: object = None) -> PhantomWork:
        # nccl-tests counts an all-gather by its gathered output
        return self.issue(IssuedOp.ALL_GATHER, _nbytes(outputs), outputs[0].element_size(), outputs,
                          inputs=inputs, blocking=_blocking(opts))

    def reduce_scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                       opts: object = None) -> PhantomWork:
        return self.reduce_scatter_single_coalesced(outputs, _flat(input_lists), opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts: object = None) -> PhantomWork:
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor],
                                        opts: object = None) -> PhantomWork:
        # nccl-tests counts a reduce-scatter by its full input
        return self.issue(IssuedOp.REDUCE_SCATTER, _nbytes(inputs), inputs[0].element_size(),
                          outputs, inputs=inputs, reduce_op=_reduce_op(opts),
                          blocking=_blocking(opts))

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_splits: list[int], input_splits: list[int],
                          opts: object = None) -> PhantomWork:
        """Without split sizes an even all_to_all; with them (either side) an all_to_allv of
        ``split * row`` elements, dim 0 of the side without them divided evenly."""
        if not input_splits and not output_splits:
            return self.issue(IssuedOp.ALL_TO_ALL, _nbytes([input]), input.element_size(), [output],
                              inputs=[input], blocking=_blocking(opts))
        return self._all_to_allv(self._dim0_elements(input, input_splits),
                                 self._dim0_elements(output, output_splits),
                                 input.element_size(), [input], [output], _blocking(opts))

    def _dim0_elements(self, tensor: torch.Tensor, splits: Sequence[int]) -> list[int]:
        """Elements of ``tensor`` for each group rank: ``splits`` rows of dim 0 (none given:
        dim 0 split evenly, as c10d does)."""
        row = tensor.numel() // max(tensor.shape[0], 1)
        rows = list(splits) or [tensor.shape[0] // self._group_size] * self._group_size
        return [int(s) * row for s in rows]

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                 opts: object = None) -> PhantomWork:
        return self._all_to_allv([t.numel() for t in inputs], [t.numel() for t in outputs],
                                 inputs[0].element_size(), inputs, outputs, _blocking(opts))

    def gather(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
               opts: Any = None) -> PhantomWork:
        # NCCL gathers by grouped send/recv to the root: an all_to_allv with one column.
        elements = [0] * self._group_size
        elements[opts.rootRank] = sum(t.numel() for t in inputs)
        received = [t.numel() for t in _flat(output_lists)] or [0] * self._group_size
        return self._all_to_allv(elements, received, inputs[0].element_size(), inputs,
                                 _flat(output_lists), _blocking(opts))

    def scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                opts: Any = None) -> PhantomWork:
        # NCCL scatters by grouped send/recv from the root: an all_to_allv with one row.
        inputs = _flat(input_lists)
        elements = [t.numel() for t in inputs] or [0] * self._group_size
        received = [0] * self._group_size
        received[opts.rootRank] = sum(t.numel() for t in outputs)
        return self._all_to_allv(elements, received, outputs[0].element_size(), inputs, outputs,
                                 _blocking(opts))

    def barrier(self, opts: object = None) -> PhantomWork:
        return self.issue(IssuedOp.ALL_REDUCE, BARRIER_NBYTES, BARRIER_NBYTES, [], host_sync=True)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> PhantomWork:
        return self.issue(IssuedOp.SEND, _nbytes(tensors), tensors[0].element_size(), [],
                          inputs=tensors, peer=dst)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> PhantomWork:
        return self.issue(IssuedOp.RECV, _nbytes(tensors), tensors[0].element_size(), tensors,
                          peer=src)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> PhantomWork:
        raise NotImplementedError("recv from any source: NCCL does not support it either")


def _values_of(runtime: RankRuntime, inputs: Sequence[torch.Tensor],
               outputs: Sequence[torch.Tensor], reduce_op: str,
               element_splits: tuple[int, ...] | None) -> ValuePayload | None:
    """The values a collective moves, if any input has or output takes them; queues the
    outputs' fill."""
    mode = fake_mode.active()
    if mode is None:
        return None
    store = mode.values
    known = any(store.hinted(t) for t in inputs)
    if not known and not any(t.numel() and valuable(t) for t in outputs):
        return None
    value_id = runtime.new_event()
    if inputs:
        data, pending = store.payload(value_id, inputs)
    else:
        data, pending = np.empty(0, dtype=_numpy_dtype(outputs)), False
    want = store.expect(value_id, outputs)
    if not want and data is None and not pending:
        return None
    return ValuePayload(value_id, data, want, reduce_op, element_splits, pending=pending)


def _create(options: Any, backend_options: object) -> PhantomProcessGroup:
    """``Backend.register_backend`` creator (extended API: ``_DistributedBackendOptions``)."""
    return PhantomProcessGroup(options.group_rank, options.group_size,
                               list(options.global_ranks_in_group), options.group_id)


# -- functional collectives -------------------------------------------------------------------
_PENDING: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
"""Output tensor of a functional collective -> its event, until ``wait_tensor``."""


def _bind(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict[str, Any]:
    names = [a.name for a in func._schema.arguments]
    return {**dict(zip(names, args, strict=False)), **kwargs}


def _functional_group(group_name: object) -> PhantomProcessGroup:
    pg = group_name if isinstance(group_name, dist.ProcessGroup) else \
        c10d._resolve_process_group(c10d.GroupName(str(group_name)))
    if not isinstance(pg, PhantomProcessGroup):
        raise TypeError(f"functional collective on {pg!r}, which is not a phantora group")
    return pg


def _as_list(value: object) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (list, tuple)) else [value]  # type: ignore[list-item]


def handle_functional_collective(func: torch._ops.OpOverload, args: tuple, kwargs: dict,
                                 out: object) -> None:
    """Issue the ``_c10d_functional`` op ``func`` whose (fake) result the fake mode computed
    as ``out``; ``wait_tensor`` makes the current stream wait for the collective of its tensor.
    Raises ``NotImplementedError`` for an op it does not know (rather than leaving it unsimulated).
    """
    name = func._schema.name.split("::")[-1]
    if name == "wait_tensor":
        event = _PENDING.pop(args[0], None)
        if event is not None:
            _current_stream_waits(_runtime(), event)
        return
    bound = _bind(func, args, kwargs)
    pg = _functional_group(bound["group_name"])
    outputs = _as_list(out)
    if name in ("all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_"):
        # out-of-place: the reduced values belong in the new outputs, not in the inputs
        work = pg.issue(IssuedOp.ALL_REDUCE, _nbytes(outputs), outputs[0].element_size(), outputs,
                        inputs=_as_list(bound.get("input", bound.get("inputs"))),
                        reduce_op=_REDUCE_OPS.get(str(bound["reduce_op"]).upper(), "unknown"))
    elif name in ("all_gather_into_tensor", "all_gather_into_tensor_out",
                  "all_gather_into_tensor_coalesced"):
        work = pg.all_gather_single_coalesced(
            outputs, _as_list(bound.get("input", bound.get("inputs"))))
    elif name in ("reduce_scatter_tensor", "reduce_scatter_tensor_out",
                  "reduce_scatter_tensor_coalesced"):
        work = pg.reduce_scatter_single_coalesced(
            outputs, _as_list(bound.get("input", bound.get("inputs"))))
    elif name in ("broadcast", "broadcast_"):
        work = pg.issue(IssuedOp.BROADCAST, _nbytes(outputs), outputs[0].element_size(), outputs,
                        inputs=_as_list(bound.get("input")), root=bound["src"])
    elif name == "all_to_all_single":
        work = pg.all_to_all_single(outputs[0], bound["input"], bound["output_split_sizes"],
                                    [int(s) for s in bound["input_split_sizes"]])
    elif name in ("isend", "irecv"):
        send = name == "isend"
        work = (pg.send if send else pg.recv)([bound["tensor"]],
                                              bound["dst" if send else "src"], bound["tag"])
    elif name == "batch_p2p_ops":
        works = [(pg.send if op == "isend" else pg.recv)([tensor], peer, tag)
                 for op, peer, tag, tensor in zip(bound["op_list"], bound["peer_list"],
                                                  bound["tag_list"], bound["tensors"],
                                                  strict=True)]
        for tensor, w in zip(outputs, works, strict=True):
            _PENDING[tensor] = w.event
        return
    else:
        raise NotImplementedError(f"phantora does not simulate functional collective {func}")
    for tensor in outputs:
        _PENDING[tensor] = work.event


# -- installation -----------------------------------------------------------------------------
def _rendezvous(url: str, rank: int = -1, world_size: int = -1,
                **kwargs: object) -> Iterator[tuple[dist.Store, int, int]]:
    """Replaces ``distributed_c10d.rendezvous``: a private ``HashStore``, no network."""
    if rank < 0:
        rank = _env_int("RANK")
    if world_size < 0:
        world_size = _env_int("WORLD_SIZE")
    yield dist.HashStore(), rank, world_size


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise ValueError(f"init_process_group: {name} is not set and was not passed; phantora "
                         "sets it for every rank, as torchrun does")
    return int(value)


def _new_process_group_helper(original: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``_new_process_group_helper``: every group is a phantora group, bound to no device
    (a bound device would make ``DeviceMesh`` ask the backend for NCCL communicator splits)."""
    def helper(group_size: int, group_rank: int, global_ranks_in_group: list[int],
               backend: object, *args: Any, **kwargs: Any) -> Any:
        kwargs["device_id"] = None
        return original(group_size, group_rank, global_ranks_in_group, BACKEND_NAME, *args,
                        **kwargs)
    return helper


class _DDPLogger(dist.Logger):
    """DDP's logger, minus runtime stats: the C++ reducer of a CPU build has no CUDA timer
    (``reducer_->timer_ INTERNAL ASSERT FAILED`` on the first forward)."""

    def set_runtime_stats_and_log(self) -> None:
        return None


def _no_param_check(*args: object, **kwargs: object) -> None:
    """DDP's parameter shape check reads tensor data, which fake tensors do not have."""
    return None


@contextmanager
def installed() -> Iterator[None]:
    """While inside, ``torch.distributed`` runs on the phantora backend (see the module doc).

    The fork server enters it once for good; tests enter and leave it.
    """
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True,
                                      devices=["cpu", "cuda"])
    patches: list[tuple[object, str, object]] = [
        (c10d, "_new_process_group_helper",
         _new_process_group_helper(c10d._new_process_group_helper)),
        (c10d, "rendezvous", _rendezvous),
        # The CPU build has no NCCL timeout constant and warns when asked for one.
        (c10d, "default_pg_nccl_timeout", c10d.default_pg_timeout),
        (dist, "is_nccl_available", lambda: True),
        (dist, "Logger", _DDPLogger),
        (dist_utils, "_verify_param_shape_across_processes", _no_param_check),
        (ddp_module, "_verify_param_shape_across_processes", _no_param_check),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
