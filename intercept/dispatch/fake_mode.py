"""SimFakeMode: every CUDA tensor is a FakeTensor, every GPU kernel is recorded, never run.

One mode per rank process, entered before the user's script starts (``intercept.dispatch.device``).
For each aten op it

* runs small all-CPU work **for real** (data pipelines, DDP's bucket indices, step counters):
  an op whose tensor inputs are all real CPU tensors, or a CPU factory op whose output has at
  most :data:`REAL_CPU_MAX_NUMEL` elements; big CPU tensors (a model built on the CPU before
  ``.to('cuda')``) stay fake;
* otherwise executes it on fake tensors (shapes, dtypes, devices; no data) and, when it touches
  a CUDA tensor and would launch a kernel, calls ``runtime.kernel(spec, stream)`` with the
  current CUDA stream of the op's device; ``spec`` (``intercept.dispatch.op_costs.kernel_spec``)
  names the aten op (``aten::mm``), or :data:`MEMCPY_HTOD` / :data:`MEMCPY_DTOH` for copies between
  host and device, whose ``bytes`` is the size moved;
* treats reading a CUDA value on the host (``.item()``, ``float()``, ``.tolist()``,
  ``print``, format, ``.cpu()``, data-dependent output shapes) and blocking copies between
  host and device as a host sync: ``runtime.sync("stream", current stream)``, then reads the
  value;
* keeps the real values of the tensors that steer control flow (integers, bools, small
  tensors: ``intercept.values.store``) and derives the integers of ops on fake floats (router top-k,
  comparisons) from the seeded value model (``intercept.values.value_model``).

What a host reads: a valued tensor's values, else a plausible value
(``intercept.values.plausible``). Data-dependent shapes (``nonzero``, ``masked_select``, boolean
indexing, ``unique``, ``bincount``, ``repeat_interleave``) follow the values; of unknown values they
stop the run, or follow ``intercept.dispatch.unknown_shapes`` with
``simulation.unknown_shapes: half``.

Device memory (``torch.cuda.memory_allocated`` and friends, out-of-memory errors) comes from a
model of PyTorch's caching allocator per GPU (``intercept.memory.allocator``) that fake CUDA
storages allocate from while they live (``intercept.memory.device_memory``).

The interceptor's own CPU time (fake execution, recording) runs inside
``runtime.excluded()``; calls into the runtime (kernel, sync) and into the process group
(c10d and functional collectives) happen outside it, so the runtime never sees nesting.
Around all of it, the shim excludes the whole call from torch's C++ into
``__torch_dispatch__`` (and every ``prim.device`` query), and takes a measured deduction off
each op dispatch for the C++ glue outside that call (``intercept.dispatch.dispatch_glue``): what is
left of an op in the rank's virtual time is about a plain Python call, plus the runtime's
modelled launch overhead. Real CPU work run on the script's behalf stays the script's, and so
does the dispatch of tensor subclasses (DTensor) and DTensor's shape propagation, which a real
host runs too.
"""

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, ContextManager, Protocol

import torch
from torch._subclasses.fake_tensor import _DISPATCH_META_HANDLERS, FakeTensor, FakeTensorMode

from hwmodel.compute.spec import MEMCPY_DTOH, MEMCPY_HTOD, KernelSpec
from hwmodel.errors import SimulationError
from intercept.dispatch import op_costs
from intercept.dispatch.unknown_shapes import DATA_DEPENDENT, SHAPE_FROM_VALUES, fake_empty
from intercept.host_time.host_cost import (EMBEDDING_BACKWARD_SMALL, INDEX_PUT_ACCUMULATE,
                                 SMALL_EMBEDDING_BACKWARD_MAX, SMALL_SORT_MAX, SORT_SMALL)
from intercept.memory.device_memory import BLAS_OPS, DeviceMemory
from intercept.process import shim
from intercept.values import plausible
from intercept.values.store import ValueStore
from intercept.values.value_model import ValueModel
from launch.value_policy import ValuePolicy

aten = torch.ops.aten

SHAPED_BY_HOST_ARGUMENTS: frozenset[Any] = frozenset({aten._pack_padded_sequence.default})
"""Ops whose output shapes follow a real CPU argument (``pack_padded_sequence``'s lengths) that
FakeTensorMode refuses as data-dependent; one launch each, as on a CUDA build."""

REAL_CPU_MAX_NUMEL = 65536
VALUES_SOON_S = 2.0
VALUES_TIMEOUT_S = 120.0
"""How long a host read waits (wall time) for a collective's values: after its stream sync,
then after a device sync, before it gives up."""

NO_KERNEL_OPS: frozenset[Any] = frozenset({
    # allocation without initialisation: the caching allocator, not a kernel
    aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
    aten.new_empty.default, aten.new_empty_strided.default, aten.resize_.default,
    # aliasing and metadata (in-place view ops are not flagged ``is_view``)
    aten._unsafe_view.default, aten.set_.source_Storage, aten.set_.source_Storage_storage_offset,
    aten.set_.source_Tensor, aten.set_.default, aten.as_strided_.default, aten.detach_.default,
    aten.squeeze_.default, aten.squeeze_.dim, aten.squeeze_.dims, aten.unsqueeze_.default,
    aten.t_.default, aten.transpose_.default, aten.swapdims_.default, aten.swapaxes_.default,
    aten.is_same_size.default, aten._has_compatible_shallow_copy_type.default,
    aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
    aten.sym_storage_offset.default, aten.is_contiguous.default, aten.is_contiguous.memory_format,
    aten.is_non_overlapping_and_dense.default,
})
"""Ops that launch no kernel although they are not flagged ``is_view`` (views never do)."""

COLLECTIVE_NAMESPACE = "c10d"
FUNCTIONAL_COLLECTIVE_NAMESPACE = "_c10d_functional"
WAIT_TENSOR = torch.ops._c10d_functional.wait_tensor.default
NO_KERNEL_NAMESPACES = frozenset({"prim", "profiler", FUNCTIONAL_COLLECTIVE_NAMESPACE})
"""Namespaces with no kernels of their own (collectives are the process group's to record)."""
HOST_DEVICE_COPIES = frozenset({aten._to_copy.default, aten.copy_.default})
_METADATA_QUERIES: dict[Any, Callable[[Any], Any]] = dict(_DISPATCH_META_HANDLERS)
"""prim.device, aten.size/stride/storage_offset: answered from the FakeTensor's metadata."""


class Runtime(Protocol):
    """What the mode needs of ``intercept.runtime.RankRuntime``."""

    counts_work: bool

    def excluded(self) -> ContextManager[None]: ...
    def autograd(self, *, recorded: bool, node: object | None) -> None: ...
    def tensor_subclass(self) -> None: ...
    def kernel(self, spec: KernelSpec, stream: int, tensors: int = 1,
               host_key: str | None = None) -> None: ...
    def host_op(self, name: str) -> None: ...
    def sync(self, kind: str, target: int = 0) -> int: ...


FunctionalCollectiveHandler = Callable[[Any, tuple[Any, ...], dict[str, Any], Any], None]
"""``handler(func, args, kwargs, out)``: a ``_c10d_functional`` op FakeTensorMode answered."""


Launch = tuple[KernelSpec, int, bool]
"""``(the kernel, device index, host waits for it)``."""
_RUN_REAL = object()
"""Marks an op to run for real once the mode has left ``runtime.excluded()``."""


class SimFakeMode(FakeTensorMode):
    """FakeTensorMode that records kernels to a runtime (see the module docstring)."""

    # Higher-order operators (DTensor RNG, flex_attention, ...) look their mode rule up by
    # exact ``type(mode)``; with this flag they come to __torch_dispatch__ and are forwarded to
    # FakeTensorMode's rule.
    supports_higher_order_operators = True

    def __init__(self, runtime: Runtime, memory: DeviceMemory,
                 on_functional_collective: FunctionalCollectiveHandler | None = None,
                 policy: ValuePolicy = ValuePolicy(), rank: int = 0) -> None:
        super().__init__(allow_non_fake_inputs=True)
        self.runtime = runtime
        self.memory = memory
        self.on_functional_collective = on_functional_collective
        self.policy = policy
        generator = torch.Generator().manual_seed(policy.seed * 1_000_003 + rank)
        self.values = ValueStore(generator)
        """Real values of the valued fake tensors (``intercept.values.store``)."""
        self.value_model = ValueModel(self.values, policy.routing, policy.seed, rank)
        self._thread = threading.local()
        self._current_stream = shim.library().fakecuda_current_stream
        self._names: dict[Any, str] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> "SimFakeMode":
        # A deep copy of a fake tensor (copy.deepcopy of a model, as TorchTitan's pipeline split
        # does) stays in the rank's one mode: the mode holds the rank's runtime, locks and
        # value store, which are not the tensor's to copy.
        return self

    @property
    def avoid_device_init(self) -> bool:
        # torch.cuda.is_available() is patched to True, which would make FakeTensorMode
        # constant-propagate small real CPU tensors for real across .to('cuda') (there is no
        # CUDA kernel to run them). Keep the behaviour of a machine without a device.
        return True

    def host_sync(self, t: torch.Tensor) -> None:
        """The host waits for the GPU before reading ``t`` (if ``t`` lives on a GPU)."""
        if t.device.type == "cuda":
            self.runtime.sync("stream", self._current_stream(t.device.index or 0))

    def host_values(self, t: torch.Tensor) -> torch.Tensor:
        """What the host reads of ``t`` after its host sync: its values where known, else
        a plausible value everywhere (a real CPU tensor, no memory per element)."""
        self._await_values([t])
        with self.runtime.excluded():
            real = self.values.real(t)
            if real is not None:
                return real.detach()
            if not (t.dtype.is_floating_point or t.dtype.is_complex):
                plausible.warn_unknown(t)
        return plausible.stand_in(t)

    def _await_values(self, inputs: list[torch.Tensor]) -> None:
        """Values a collective has yet to deliver are needed now. The caller synchronised the
        stream that waits for the collective, as a real host does, so they are on their way
        (computed from other ranks' values): wait for them, in wall time only. If they do not
        come soon, that stream did not wait for the collective: synchronise the whole device
        (the collective's stream included), as the read would need on a GPU, and wait on."""
        if not any(self.values.pending(t) for t in inputs):
            return
        with self.runtime.excluded():
            arrived = self.values.wait(inputs, VALUES_SOON_S)
        if arrived:
            return
        self.runtime.sync("device")
        with self.runtime.excluded():
            if not self.values.wait(inputs, VALUES_TIMEOUT_S):
                raise SimulationError(
                    f"the values of a tensor read{plausible.script_line()} did not arrive "
                    f"within {VALUES_TIMEOUT_S:.0f} s: a collective that produces them never "
                    "completed on every member (or a member exited before sending them)")

    @contextlib.contextmanager
    def kernels_replaced(self) -> Iterator[None]:
        """Ops run inside make their outputs and take device memory as usual but launch no
        kernels: a compiled graph, whose kernels ``intercept.dispatch.compiled`` launches
        instead."""
        state = self._thread
        previous = getattr(state, "replaced", False)
        state.replaced = True
        try:
            yield
        finally:
            state.replaced = previous

    @contextlib.contextmanager
    def shapes_only(self) -> Iterator[None]:
        """Ops run inside only derive shapes, like the ops FakeTensorMode issues itself: they
        take no device memory and launch no kernel (DTensor's sharding propagation, which on
        a GPU runs in a private FakeTensorMode). Unlike those, their dispatch is the script's
        CPU time: a real host runs that FakeTensorMode too."""
        state = self._thread
        previous = getattr(state, "depth", 0), getattr(state, "counted", False)
        state.depth, state.counted = 1, True
        try:
            yield
        finally:
            state.depth, state.counted = previous

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        query = _METADATA_QUERIES.get(func)
        if query is not None:
            # ~7400 per GPT-2 step (C++ asking a FakeTensor for its device): answered at once;
            # the shim excludes the whole call from C++, so none of it is the script's time.
            return query(args)
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return self._higher_order(func, types, args, kwargs)
        state = self._thread
        if getattr(state, "depth", 0):
            # An op FakeTensorMode issues while executing another one: no kernel of its own.
            if getattr(state, "counted", False) and not self.runtime.counts_work:
                shim.count_rest_of_dispatch()
            if func in DATA_DEPENDENT:
                return self._data_dependent(func, args, kwargs,
                                            op_costs.flat_tensors((args, kwargs)))
            return self.dispatch(func, types, args, kwargs)
        if func.namespace == COLLECTIVE_NAMESPACE:
            # c10d.allreduce_ & co. reach the process group, which accounts for its own time.
            return self.dispatch(func, types, args, kwargs)
        if func is aten._local_scalar_dense.default:
            return self._read_scalar(func, types, args, kwargs)
        if func in SHAPE_FROM_VALUES:
            self._sync_pending_inputs(args, kwargs)
        state.depth = 1
        autograd = None
        try:
            with self.runtime.excluded():
                out, launch = self._fake(func, types, args, kwargs)
                if self.runtime.counts_work and out is not NotImplemented:
                    autograd = (_records_grad(args, kwargs), torch._C._current_autograd_node())
        finally:
            state.depth = 0
        if autograd is not None:
            self.runtime.autograd(recorded=autograd[0], node=autograd[1])
        if out is _RUN_REAL:
            if self.runtime.counts_work:  # no count sees its C++ work: charge the table's
                self.runtime.host_op(func._opname)
            with shim.script_time():  # real CPU work a real host does too
                return func(*args, **kwargs)  # this mode is popped here: the real kernel runs
        if out is NotImplemented:
            # A tensor subclass (DTensor) dispatches the op next, in the same call from C++:
            # its sharding propagation and redistribution run on a real host too (100+ us per
            # op, most of a tensor-parallel step's host time). The ops it issues come back here.
            # Counted mode charges the table's cost of it instead (its C++ part no count sees).
            if self.runtime.counts_work:
                self.runtime.tensor_subclass()
            else:
                shim.count_rest_of_dispatch()
            return out
        if func.namespace == FUNCTIONAL_COLLECTIVE_NAMESPACE:
            if self.on_functional_collective is None:
                raise SimulationError(f"{func} needs a process group, but none is connected")
            self.on_functional_collective(func, args, kwargs, out)
            if func is WAIT_TENSOR:
                return args[0]  # as the real op: its input, where the collective's values arrive
        elif getattr(state, "replaced", False):
            pass  # an op of a compiled graph: dispatch.compiled charges the graph's launches
        elif launch is not None:
            spec, device, host_waits = launch
            stream = self._current_stream(device)
            self.runtime.kernel(spec, stream, _list_length(args),
                                host_key=_host_key(func, args, kwargs))
            if host_waits:
                self.runtime.sync("stream", stream)
        else:
            self.runtime.host_op(func._opname)
        return out

    def _fake(self, func: Any, types: Any, args: Any, kwargs: Any) -> tuple[Any, Launch | None]:
        """The op's fake result and the kernel it launches; :data:`_RUN_REAL` for real CPU work."""
        inputs = op_costs.flat_tensors(args)
        if kwargs:
            inputs += op_costs.flat_tensors(kwargs)
        if func.namespace == "aten" and _runs_real(func, args, kwargs, inputs):
            return _RUN_REAL, None
        if func is aten.record_stream.default:  # no fake implementation; no kernel
            self.memory.record_stream(args[0], args[1].stream_id)
            return None, None
        if func in DATA_DEPENDENT:
            out = self._data_dependent(func, args, kwargs, inputs)
        elif func in SHAPED_BY_HOST_ARGUMENTS:
            # PyTorch's own kernel reads the sizes from the real CPU argument; the copies it
            # issues on fake tensors come back here as parts of this one launch
            out = func._op_dk(torch._C.DispatchKey.CompositeExplicitAutograd, *args, **kwargs)
        else:
            out = self.dispatch(func, types, args, kwargs)
            if out is not NotImplemented and func.namespace == "aten":
                # values of collectives travel with them (intercept.distributed.process_group)
                if self.value_model.handles(func, inputs):
                    self.value_model.apply(func, args, kwargs, out)
                else:
                    self.values.after_op(func, args, kwargs, out, inputs)
        return out, self._launch(func, args, kwargs, out, inputs)

    def _launch(self, func: Any, args: Any, kwargs: Any, out: Any,
                inputs: list[torch.Tensor]) -> Launch | None:
        """The kernel ``func`` launches, if any; also counts the CUDA storages it created."""
        if out is NotImplemented:  # a tensor subclass defers: the op comes again, unwrapped
            return None
        outputs = op_costs.flat_tensors(out)
        device = None
        for t in outputs:
            if isinstance(t, FakeTensor) and t.device.type == "cuda":
                self.memory.track(t)
                device = t.device.index or 0
        if device is not None and func in BLAS_OPS:
            self.memory.blas_workspace(func, device)
        if func.is_view or func in NO_KERNEL_OPS or func.namespace in NO_KERNEL_NAMESPACES:
            return None
        if device is None:
            source = next((t for t in inputs if t.device.type == "cuda"), None)
            if source is None:
                return None  # a CPU op on fake CPU tensors: no GPU kernel
            device = source.device.index or 0
            if outputs:  # CUDA inputs, CPU outputs: .cpu(), cpu_tensor.copy_(cuda_tensor)
                transferred = sum(op_costs.operand(t).nbytes for t in outputs)
                return (KernelSpec(MEMCPY_DTOH, bytes=transferred), device,
                        not _non_blocking(func, args, kwargs))
            # else an in-place op that returns nothing (_foreach_add_): an ordinary kernel
        if func in HOST_DEVICE_COPIES and any(t.device.type == "cpu" for t in inputs):
            # a blocking copy synchronises the stream after it (ATen's memcpy_and_sync)
            transferred = sum(op_costs.operand(t).nbytes for t in outputs)
            return (KernelSpec(MEMCPY_HTOD, bytes=transferred), device,
                    not _non_blocking(func, args, kwargs))
        name = self._names.get(func)
        if name is None:
            name = self._names[func] = func._schema.name
        return (op_costs.kernel_spec(name, func, args, kwargs, out), device,
                _syncs_host(func, args))

    def _read_scalar(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """``.item()`` and friends: a device-to-host copy the host waits for, then the value.

        Small CPU constants FakeTensorMode tracks keep their real value.
        """
        t = args[0]
        if isinstance(t, FakeTensor) and t.constant is not None:
            with self.runtime.excluded():
                return self.dispatch(func, types, args, kwargs)
        return self.read_scalar(t)

    def read_scalar(self, t: torch.Tensor) -> Any:
        """The value of one-element ``t`` on the host: for a CUDA tensor after a
        device-to-host copy the host waits for."""
        if t.device.type == "cuda":
            stream = self._current_stream(t.device.index or 0)
            self.runtime.kernel(KernelSpec(MEMCPY_DTOH, bytes=t.element_size()), stream)
            self.runtime.sync("stream", stream)
        return self.host_values(t).item()

    def _sync_pending_inputs(self, args: Any, kwargs: Any) -> None:
        """An op whose output shape may depend on values a collective has yet to deliver: on a
        GPU it synchronises its stream to learn the shape, so the values are there."""
        with self.runtime.excluded():
            inputs = [t for t in op_costs.flat_tensors((args, kwargs)) if self.values.pending(t)]
        if inputs:
            self.host_sync(inputs[0])
            self._await_values(inputs)

    def _data_dependent(self, func: Any, args: Any, kwargs: Any,
                        inputs: list[torch.Tensor]) -> Any:
        """An op whose output shape depends on its input values: computed from them where they
        are known, else by ``simulation.unknown_shapes`` (an error by default)."""
        reals = [self.values.real(t) for t in inputs]
        if all(r is not None for r in reals):
            real_out = self.values.run_real(func, args, kwargs)
            if real_out is not None:
                device = inputs[0].device
                out = torch.utils._pytree.tree_map(
                    lambda r: self._fake_like(r, device) if isinstance(r, torch.Tensor) else r,
                    real_out)
                for fake, real in zip(torch.utils._pytree.tree_leaves(out),
                                      torch.utils._pytree.tree_leaves(real_out), strict=True):
                    if isinstance(fake, torch.Tensor):
                        self.values.set_values(fake, real)
                return out
        if self.policy.unknown_shapes == "error":
            raise SimulationError(
                f"{func._schema.name} needs the values of a tensor the simulator does not know "
                f"(computed from fake floating-point data){plausible.script_line()}: its output "
                "shape cannot be bounded. Set simulation.unknown_shapes: half in the scenario to "
                "keep half of the elements, or derive the tensor from integer values.")
        return DATA_DEPENDENT[func](self, *args, **kwargs)

    def _fake_like(self, real: torch.Tensor, device: torch.device) -> Any:
        return fake_empty(self, tuple(real.shape), real.dtype, device)

    def _higher_order(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """Forward a HOP to FakeTensorMode's rule; the ops inside it are dispatched normally."""
        handler = func.python_key_table.get(FakeTensorMode)
        if handler is None or getattr(self._thread, "hop", None) is func:
            return self.dispatch(func, types, args, kwargs)
        previous, self._thread.hop = getattr(self._thread, "hop", None), func
        try:
            return handler(self, *args, **kwargs)
        finally:
            self._thread.hop = previous


def _records_grad(args: Any, kwargs: Any) -> bool:
    """Whether autograd recorded the op for backward (grad mode on, an input requires grad)."""
    if not torch.is_grad_enabled():
        return False
    return any(t.requires_grad for t in op_costs.flat_tensors((args, kwargs)))


def _list_length(args: Any) -> int:
    """A foreach op's list length (its first argument), else 1: its host cost grows with it."""
    first = args[0] if args else None
    return len(first) if isinstance(first, (list, tuple)) else 1



def _runs_real(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
               inputs: list[torch.Tensor]) -> bool:
    """True if ``func`` is small real CPU work that should run for real (module docstring)."""
    for t in inputs:
        if isinstance(t, FakeTensor) or t.device.type != "cpu":
            return False
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return False
    if inputs:
        return True
    numel = _factory_numel(func, args)
    return numel is not None and numel <= REAL_CPU_MAX_NUMEL


_SIZE_FIRST_FACTORIES = frozenset({
    aten.empty.memory_format, aten.empty_strided.default, aten.zeros.default, aten.ones.default,
    aten.full.default, aten.rand.default, aten.randn.default,
})


def _factory_numel(func: Any, args: tuple[Any, ...]) -> int | None:
    """Elements a CPU factory op would create, or None for an op this does not know."""
    if func in _SIZE_FIRST_FACTORIES:
        return _product(args[0])
    if func in (aten.randint.default, aten.randint.low):
        return _product(args[-1])
    if func is aten.scalar_tensor.default:
        return 1
    if func in (aten.arange.default, aten.arange.start, aten.arange.start_step):
        start, end, step = ((0, *args, 1) if len(args) == 1 else (*args, 1))[:3]
        if not all(isinstance(v, int) for v in (start, end, step)):
            return None
        return max(0, _round_up(end - start, step) // step)
    if func in (aten.randperm.default, aten.linspace.default, aten.logspace.default):
        return int(args[0] if func is aten.randperm.default else args[2])
    return None


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _product(sizes: Any) -> int:
    n = 1
    for s in sizes:
        n *= int(s)
    return n


def _non_blocking(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if func is aten.copy_.default and len(args) > 2:
        return bool(args[2])
    return bool(kwargs.get("non_blocking", False))


INDEX_PUTS = frozenset({aten.index_put_.default, aten.index_put.default,
                        aten._index_put_impl_.default})
SORTS = frozenset({aten.sort.default, aten.sort.stable})


def _host_key(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The host-cost table's key of an op where it is not the op's name: an ``index_put`` that
    accumulates, and a sort or an embedding's backward small enough for ATen's one-kernel path
    (``intercept.host_time.host_cost``)."""
    if func in INDEX_PUTS and (args[3] if len(args) > 3 else kwargs.get("accumulate", False)):
        return INDEX_PUT_ACCUMULATE
    if func in SORTS:
        dim = args[1] if func is aten.sort.default and len(args) > 1 else kwargs.get("dim", -1)
        if args[0].dim() == 0 or args[0].shape[dim] <= SMALL_SORT_MAX:
            return SORT_SMALL
    if (func is aten.embedding_dense_backward.default
            and args[1].numel() <= SMALL_EMBEDDING_BACKWARD_MAX):
        return EMBEDDING_BACKWARD_SMALL
    return None


def _syncs_host(func: Any, args: tuple[Any, ...]) -> bool:
    """Ops whose CUDA kernels need the host to learn a count first (data-dependent shapes)."""
    if func in DATA_DEPENDENT:
        return True
    if func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
        return any(t.dtype == torch.bool for t in op_costs.flat_tensors(args[1]))
    return False


_active: SimFakeMode | None = None


def activate(mode: SimFakeMode | None) -> None:
    """Make ``mode`` the process's mode: threads enter it, value reads sync through it."""
    global _active
    _active = mode


def active() -> SimFakeMode | None:
    """The mode :func:`activate` set, if any."""
    return _active
