"""The messages a live rank and the coordinator exchange (the contract: :mod:`wire`)."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # values travel as numpy arrays; the wire imports only the standard library
    import numpy as np

from wire.ops import IssuedOp


@dataclass(frozen=True, slots=True)
class HostTimeSplit:
    """A rank's host time by origin, in virtual ns (``summary.json``: ``ranks[].host_time``)."""

    table_ns: int = 0
    """Charged from the host-cost table (intercepted ops, collectives, kernel launches)."""
    residual_ns: int = 0
    """The script's own Python between intercepted ops in the reference host's time: counted
    (``simulation.host_time: counted``) or measured and converted; 0 in reproducible mode,
    where a fixed cost per op stands for it."""
    fixed_ns: int = 0
    """Reproducible mode's fixed cost per op (``simulation.cpu_time_per_op``)."""
    subclass_ns: int = 0
    """Of ``table_ns``: tensor-subclass (DTensor) dispatches, charged per op in counted mode."""
    autograd_node_ns: int = 0
    """Of ``table_ns``: the autograd engine's work per backward node, in counted mode."""
    lockstep_wait_ns: int = 0
    """Not host work: the expected waits for the slowest host of each collective's group
    (``intercept.host_time.host_spread``), charged at the rank's collective calls."""
    steps: tuple[tuple[int, int, int, int, int, int, int], ...] = ()
    """Per optimizer step (``torch.optim`` step hooks): ``(clock_ns at the step's end, table
    ns, residual ns, tensor-subclass ns, autograd-node ns, op ns, cold Python ns)`` spent since
    the previous step's end: tensor-subclass, autograd-node and op ns (intercepted ops' own
    rows and families) are parts of the table's, cold Python ns (the counted Python outside
    the hot walks) of the residual."""


@dataclass(frozen=True, slots=True)
class Kernel:
    """A GPU kernel (or memcpy/memset) launched on ``stream``; ``duration_ns`` from the compute model."""

    stream: int
    at_ns: int
    """Launch time on the rank's clock; the kernel starts at the earliest when its stream is free."""
    duration_ns: int
    name: str
    """aten op name, e.g. ``aten::mm`` (kernel names in the trace)."""
    flops: int = 0
    bytes: int = 0
    source: str = ""
    """Where ``duration_ns`` came from (a ``hwmodel.compute.CostSource`` value)."""


@dataclass(frozen=True, slots=True)
class EventRecord:
    """``event.record(stream)``: the event completes when everything queued on ``stream`` so far has."""

    event: int
    stream: int
    at_ns: int


@dataclass(frozen=True, slots=True)
class StreamWait:
    """``stream.wait_event(event)``: later work on ``stream`` starts after ``event`` completes."""

    stream: int
    event: int
    at_ns: int


@dataclass(frozen=True, slots=True)
class ValuePayload:
    """The real values a collective carries (``intercept.values.store``): this rank's inputs, and
    whether its outputs take values.

    The coordinator computes every member's outputs once all have issued the collective and
    their inputs are final, and sends them in a :class:`ValueDelivery`, keyed by ``value_id``.
    """

    value_id: int
    """The rank's id for this collective's values."""
    data: "np.ndarray | None"
    """This rank's input values, flat and concatenated (``None``: unknown, or no inputs)."""
    want: bool
    """The rank's outputs take values."""
    reduce_op: str = "sum"
    """``sum | avg | product | min | max | band | bor | bxor``, for reducing collectives."""
    splits: tuple[int, ...] | None = None
    """Elements of ``data`` to each group rank (all_to_allv, gather, scatter)."""
    pending: bool = False
    """The inputs await an earlier collective's values: a :class:`ValueUpdate` follows."""


@dataclass(frozen=True, slots=True)
class Collective:
    """A collective or point-to-point op issued on ``stream`` (PyTorch's NCCL stream for the group).

    For ``send``/``recv``, ``ranks`` is ``(src, dst)`` in global ranks and ``seq`` counts the
    messages between that ordered pair. ``nbytes`` follows nccl-tests (all_gather: gathered
    output; reduce_scatter: full input). ``splits`` is this rank's row of an all_to_allv (bytes
    to each group rank), ``recv_splits`` its column (bytes from each group rank): the members'
    rows and columns must agree, as the per-rank totals of an all_to_allv need not.
    """

    stream: int
    at_ns: int
    group: str
    ranks: tuple[int, ...]
    seq: int
    op: IssuedOp
    nbytes: int
    dtype_bytes: int
    root: int = 0
    splits: tuple[int, ...] | None = None
    values: ValuePayload | None = None
    """Present when the collective moves valued tensors."""
    recv_splits: tuple[int, ...] | None = None
    """``None``: not known (a recording's, a mirror's); the row is then not checked against it."""


Op = Kernel | EventRecord | StreamWait | Collective


@dataclass(frozen=True, slots=True)
class Sync:
    """The rank blocks until the target has completed on the GPU; answered by a :class:`Reply`.

    ``kind``: ``"device"`` (``torch.cuda.synchronize``; ``target`` ignored), ``"stream"``
    (``target`` = stream id), ``"event"`` (``target`` = event id; also ``elapsed_time``).
    ``"query"`` asks whether the event ``target`` has completed at the rank's current clock,
    without waiting for it (``Reply.value`` is 1 or 0).
    """

    kind: Literal["device", "stream", "event", "query"]
    target: int
    at_ns: int


@dataclass(frozen=True, slots=True)
class RankStats:
    """What a rank measured about itself, sent with its :class:`Exit` for ``summary.json``."""

    script_cpu_ns: int = 0
    """CPU time counted as the script's (its Python and framework work): virtual time."""
    simulator_cpu_ns: int = 0
    """CPU time the rank spent inside the simulator (fake execution, recording, messaging),
    kept out of virtual time."""
    peak_memory_bytes: int = 0
    """``torch.cuda.max_memory_allocated()`` at exit."""
    peak_reserved_bytes: int = 0
    """``torch.cuda.max_memory_reserved()`` at exit (what the caching allocator held at most:
    the memory a job needs on the GPU, less the CUDA context)."""
    host_speed_factor: float = 1.0
    """What one ns of the simulating machine's CPU counted as at exit: the reference host's
    time over this machine's for the host-speed benchmark (1.0 unscaled or reproducible)."""
    host_time: HostTimeSplit = HostTimeSplit()
    """The rank's host time by origin: table-charged, residual, per optimizer step."""


@dataclass(frozen=True, slots=True)
class Exit:
    """The rank's script ended (``status`` 0) or raised (``traceback`` holds the text)."""

    status: int
    traceback: str = ""
    stats: RankStats = RankStats()


@dataclass(slots=True)
class Batch:
    """Everything a rank sends at once: ops in program order, then at most one sync or exit."""

    clock_ns: int
    """The rank's clock when sending: its promise for everything it sends later."""
    ops: list[Op] = field(default_factory=list)
    sync: Sync | None = None
    exit: Exit | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """The coordinator's answer to a :class:`Sync`.

    ``time_ns``: when the awaited work completed (the rank's clock moves to
    ``max(clock, time_ns)``); for an event also its completion time, which ``elapsed_time``
    needs. ``value``: the answer of a ``query``.
    """

    time_ns: int
    value: int = 0


@dataclass(frozen=True, slots=True)
class ValueDelivery:
    """Coordinator -> rank, whenever ready (not tied to virtual time): output values of the
    rank's valued collectives, ``(value_id, flat values or None if unknown)``."""

    values: "tuple[tuple[int, np.ndarray | None], ...]"


@dataclass(frozen=True, slots=True)
class ValueUpdate:
    """Rank -> coordinator: the final input values of a collective whose payload was
    ``pending`` (not tied to virtual time: it carries no promise)."""

    value_id: int
    data: "np.ndarray | None"
