"""One rank's GPU as the engine sees it: CUDA streams (FIFO queues), events, completions.

Semantics, as CUDA defines them:

* Work on one stream runs in issue order; a kernel starts at ``max(launch time, the end of
  the stream's previous work + the front end's gap)`` (measured:
  ``hwmodel.measured.gpu.KERNEL_GAP_NS``) and runs its duration.
* ``event.record(stream)`` completes when everything queued on the stream before it has; a
  later ``stream.wait_event(event)`` holds everything queued after it on that stream until the
  event completes. The record a wait refers to is the latest one *in program order* (an event
  can be re-recorded); waiting on a never-recorded event is a no-op.
* A collective on a stream starts when the stream reaches it *and* every member's stream has
  (the matcher decides that); the stream is busy until the collective ends.
* A kernel that runs while a collective is in flight on the GPU is slowed by NCCL's share of
  the SMs and memory bandwidth (:mod:`phantora.engine.overlap` has the measured factors and
  the rule's limits).

A :class:`Completion` is a GPU-side instant, *pending* until the engine learns its time,
then fixed; streams park on pending ones (work queued behind a collective waits for the
network).

Under the live engine's clock (:class:`DeviceClock`) a device applies each item only once the
simulation has reached the item's start, in time order with every other device and the network:
what a kernel sees of the collectives in flight (their reach by every member, their end) is then
what the simulation knows at that instant, the same in every run, not what the ranks' messages
and the network had got to when the op arrived (which hangs on wall-clock timing). A device on
its own, without a clock, applies items as soon as their times are known.
"""

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from hwmodel.measured.gpu import KERNEL_GAP_NS
from hwmodel.errors import SimulationError
from phantora.engine.overlap import (
    MEASURED_OVERLAP,
    Busy,
    CommWindows,
    OverlapModel,
    Slowing,
    collective_end_ns,
    stretched_end_ns,
)
from wire.messages import Collective, EventRecord, Kernel, Op, StreamWait


class Completion:
    """An instant on a GPU timeline that may not be known yet; callbacks run when it is."""

    __slots__ = ("_callbacks", "time_ns")

    def __init__(self, time_ns: int | None = None) -> None:
        self.time_ns = time_ns
        self._callbacks: list[Callable[[int], None]] = []

    @property
    def done(self) -> bool:
        return self.time_ns is not None

    def then(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(time_ns)`` once the time is known (at once if it already is)."""
        if self.time_ns is not None:
            callback(self.time_ns)
        else:
            self._callbacks.append(callback)

    def resolve(self, time_ns: int) -> None:
        if self.time_ns is not None:
            raise SimulationError(f"a GPU completion resolved twice ({self.time_ns} ns, then "
                                  f"{time_ns} ns)")
        self.time_ns = time_ns
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(time_ns)


def all_of(completions: Iterable[Completion]) -> Completion:
    """A completion at the latest of ``completions`` (time 0 for none)."""
    parts = list(completions)
    pending = [part for part in parts if not part.done]
    if not pending:
        return Completion(max((part.time_ns or 0 for part in parts), default=0))
    joined = Completion()
    left = [len(pending)]

    def one_done(_: int) -> None:
        left[0] -= 1
        if left[0] == 0:
            joined.resolve(max(part.time_ns or 0 for part in parts))

    for part in pending:
        part.then(one_done)
    return joined


SLOWING_KEPT_NS = 1_000_000_000
"""GPU time for which placed kernels are kept to slow collectives not reached yet: a stream
reaches a collective at or after the kernels the time-ordered drain placed before it, give or
take the few a stream released by a late completion places earlier."""


class DeviceClock(Protocol):
    """The simulation's time as a device sees it (the live engine's; see the module
    docstring)."""

    def settled_ns(self) -> int:
        """Every instant before this one is simulated: the network's, and every device's items
        that start earlier. An item that starts earlier may be applied now."""
        ...

    def wake_at(self, device: "RankDevice", ready_ns: int) -> None:
        """Call ``device.resume()`` once the simulation has reached ``ready_ns``."""
        ...


class CollectivePort(Protocol):
    """A rank's share of a collective, as its stream sees it (made by the matcher)."""

    started: Completion
    """Resolved with the time every member has reached the collective (its data moves)."""
    done: Completion
    """Resolved with the collective's end time."""

    def ready(self, ready_ns: int) -> None:
        """The stream reached the collective at ``ready_ns``."""
        ...

    def describe(self) -> str:
        """E.g. ``all_reduce (group 'default', seq 3, 4096 bytes)``."""
        ...


@dataclass(frozen=True, slots=True)
class KernelSpan:
    """A kernel as it ran on the simulated GPU (for the trace)."""

    rank: int
    stream: int
    name: str
    start_ns: int
    end_ns: int


class _Item(Protocol):
    at_ns: int
    """When the host issued it (its op's clock; 0 for a sync's marker)."""

    def expected_end_ns(self, free_ns: int, device: "RankDevice") -> int | None:
        """When the item would end if its stream were free at ``free_ns``, as far as can be
        told now (``None``: not yet); for the collectives expected in flight (see
        :meth:`RankDevice.expected_windows`)."""
        ...

    def ready_ns(self, stream: "_Stream") -> int:
        """The earliest GPU time the item can take effect at the stream's head (as known)."""
        ...

    def proceed(self, stream: "_Stream") -> Completion | None:
        """Apply the item at the stream's head; return what it waits for, or ``None`` if done."""
        ...

    def describe(self) -> str:
        ...


class _KernelItem:
    __slots__ = ("op",)

    def __init__(self, op: Kernel) -> None:
        self.op = op

    @property
    def at_ns(self) -> int:
        return self.op.at_ns

    def ready_ns(self, stream: "_Stream") -> int:
        return max(self.op.at_ns, stream.free_ns + stream.device.kernel_gap_ns)

    def expected_end_ns(self, free_ns: int, device: "RankDevice") -> int:
        return max(self.op.at_ns, free_ns + device.kernel_gap_ns) + self.op.duration_ns

    def proceed(self, stream: "_Stream") -> None:
        op = self.op
        device = stream.device
        start_ns = max(op.at_ns, stream.free_ns + device.kernel_gap_ns)
        stream.free_ns = device.kernel_end_ns(op, start_ns)
        device.spans.append(KernelSpan(device.rank, stream.stream_id, op.name, start_ns,
                                       stream.free_ns))
        device.kernels += 1

    def describe(self) -> str:
        return f"kernel {self.op.name}"


class _RecordItem:
    __slots__ = ("at_ns", "completion")

    def __init__(self, at_ns: int, completion: Completion) -> None:
        self.at_ns = at_ns
        self.completion = completion

    def ready_ns(self, stream: "_Stream") -> int:
        return max(self.at_ns, stream.free_ns)

    def expected_end_ns(self, free_ns: int, device: "RankDevice") -> int:
        return max(self.at_ns, free_ns)

    def proceed(self, stream: "_Stream") -> None:
        self.completion.resolve(max(self.at_ns, stream.free_ns))

    def describe(self) -> str:
        return "an event record"


class _WaitItem:
    __slots__ = ("at_ns", "completion", "event", "recorded_on")

    def __init__(self, at_ns: int, event: int, recorded_on: int,
                 completion: Completion) -> None:
        self.at_ns = at_ns
        self.event = event
        self.recorded_on = recorded_on
        self.completion = completion

    def ready_ns(self, stream: "_Stream") -> int:
        return max(stream.free_ns, self.completion.time_ns or 0)

    def expected_end_ns(self, free_ns: int, device: "RankDevice") -> int | None:
        recorded_ns = self.completion.time_ns
        return None if recorded_ns is None else max(free_ns, recorded_ns)

    def proceed(self, stream: "_Stream") -> Completion | None:
        if self.completion.time_ns is None:
            return self.completion
        stream.free_ns = max(stream.free_ns, self.completion.time_ns)
        return None

    def describe(self) -> str:
        return f"event {self.event} (recorded on stream {self.recorded_on})"


class _CollectiveItem:
    __slots__ = ("key", "op", "port", "reached_ns")

    def __init__(self, op: Collective, port: CollectivePort) -> None:
        self.op = op
        self.port = port
        self.key = (op.group, op.op, op.ranks, op.nbytes, op.splits)
        self.reached_ns: int | None = None

    @property
    def at_ns(self) -> int:
        return self.op.at_ns

    def ready_ns(self, stream: "_Stream") -> int:
        return max(self.op.at_ns, stream.free_ns)

    def expected_end_ns(self, free_ns: int, device: "RankDevice") -> int | None:
        if self.port.done.time_ns is not None:
            return max(free_ns, self.port.done.time_ns)
        lasted_ns = device.comm_windows.lasted_ns(self.key)
        if lasted_ns is None:
            return None
        start_ns = self.reached_ns if self.reached_ns is not None else max(self.op.at_ns,
                                                                           free_ns)
        return start_ns + lasted_ns

    def proceed(self, stream: "_Stream") -> Completion | None:
        if self.reached_ns is None:
            ready_ns = self.reached_ns = max(self.op.at_ns, stream.free_ns)
            window = stream.device.comm_windows.reached(ready_ns, self.key)
            self.port.started.then(window.moving)
            self.port.done.then(window.ended)
            self.port.ready(ready_ns)
        done = self.port.done
        if done.time_ns is None:
            return done
        stream.free_ns = max(stream.free_ns, done.time_ns)
        return None

    def describe(self) -> str:
        return self.port.describe()


class _Stream:
    """A FIFO: the head item runs when everything before it has; ``free_ns`` is when the
    work applied so far ends."""

    __slots__ = ("device", "free_ns", "queue", "stream_id")

    def __init__(self, device: "RankDevice", stream_id: int) -> None:
        self.device = device
        self.stream_id = stream_id
        self.free_ns = 0
        self.queue: deque[_Item] = deque()

    def push(self, item: _Item) -> None:
        self.queue.append(item)
        if len(self.queue) == 1:
            self.device.drain(self)

    def unblocked(self, _: int = 0) -> None:
        """What the head item waited for is known: drain on (see :meth:`RankDevice.drain`)."""
        self.device.drain(self)

    def marker(self) -> Completion:
        """Completes when everything queued so far has."""
        if not self.queue:
            return Completion(self.free_ns)
        completion = Completion()
        self.push(_RecordItem(0, completion))
        return completion


class RankDevice:
    """The streams and events of one rank's GPU."""

    def __init__(self, rank: int, issue: Callable[[int, Collective], CollectivePort],
                 overlap: OverlapModel | None = MEASURED_OVERLAP,
                 kernel_gap_ns: int = KERNEL_GAP_NS.value,
                 clock: DeviceClock | None = None) -> None:
        """``overlap``: how collectives in flight slow kernels; ``None`` leaves kernels as
        the compute model timed them. ``kernel_gap_ns``: the front end's gap between
        back-to-back kernels (``hwmodel.measured.gpu.KERNEL_GAP_NS``). ``clock``: the
        simulation's, which items wait for (``None``: none, items run as soon as they can)."""
        self.rank = rank
        self.kernel_gap_ns = kernel_gap_ns
        self._issue = issue
        self._overlap = overlap
        self._clock = clock
        self._streams: dict[int, _Stream] = {}
        self._events: dict[int, tuple[int, Completion]] = {}
        """Event id -> (stream, completion) of its latest record in program order."""
        self.comm_windows = CommWindows()
        self._runnable: dict[int, _Stream] = {}
        """Streams with an item at their head that may proceed (see :meth:`drain`)."""
        self._draining = False
        self.spans: list[KernelSpan] = []
        self._slowing: deque[Slowing] = deque()
        """Kernels that may still slow a collective (:meth:`collective_end_ns`), with how much:
        those ending after the earliest collective in flight here was reached, and, with none
        in flight, within :data:`SLOWING_KEPT_NS` of the latest one placed."""
        self.kernels = 0
        self.slowed_kernels = 0
        self.overlap_extra_ns = 0
        """How many kernels overlapping a collective were slowed, and by how much in all."""

    def drain(self, stream: _Stream | None = None) -> None:
        """Apply queued items of ``stream`` (and of every stream this unblocks) in GPU time
        order, until each waits for a time not known yet or has none left, or, under a clock,
        the earliest starts where the simulation has not got to yet (the clock wakes the
        device when it gets there: :meth:`resume`).

        In time order rather than one stream after another, so that a collective a stream
        reaches is in flight (:class:`CommWindows`) before the kernels that start after it are
        placed: FSDP2's next all-gather, queued right behind the event that lets the layer's
        matmuls run, and DDP's bucket all-reduce, unblocked by an event in the middle of the
        backward kernels, both overlap the kernels placed after them (:meth:`kernel_end_ns`).
        Start and end times do not depend on the order; only what is known to be in flight
        when a kernel is placed does. Ties go to the lower stream id (deterministic).
        """
        if stream is not None:
            self._runnable[stream.stream_id] = stream
        if self._draining:
            return
        self._draining = True
        try:
            runnable = self._runnable
            clock = self._clock
            while runnable:
                ready_ns, _, head = min((s.queue[0].ready_ns(s), s.stream_id, s)
                                        for s in runnable.values())
                if clock is not None and ready_ns >= clock.settled_ns():
                    clock.wake_at(self, ready_ns)
                    return
                waiting_for = head.queue[0].proceed(head)
                if waiting_for is not None:
                    del runnable[head.stream_id]
                    waiting_for.then(head.unblocked)
                    continue
                head.queue.popleft()
                if not head.queue:
                    del runnable[head.stream_id]
        finally:
            self._draining = False

    def resume(self) -> None:
        """The clock reached the start of the earliest item waiting for it: drain on."""
        self.drain()

    def expected_windows(self, besides: int, known_ns: int | None = None) -> list[Busy]:
        """The collectives queued on this GPU's streams other than ``besides`` that their
        stream has not reached yet, each expected in flight from when its stream should
        reach it for as long as its latest occurrence moved data here.

        A stream waiting for a collective whose end is not known yet (the network is
        simulated only up to the hosts' clocks, behind a GPU-bound step's GPU) holds the
        collectives queued behind it: DDP's next bucket all-reduce, FSDP2's next all-gather.
        Their starts are extrapolated through the queue (kernels by their durations, event
        waits by their known times) up to the first item that cannot be told yet, or that the
        host issued after ``known_ns`` (the simulation's instant: under a clock, whether the
        rank's later ops have arrived yet is a matter of wall-clock timing).
        """
        spans: list[Busy] = []
        for stream in self._streams.values():
            if stream.stream_id == besides or stream.stream_id in self._runnable:
                continue
            free_ns: int | None = stream.free_ns
            for item in stream.queue:
                if free_ns is None or (known_ns is not None and item.at_ns > known_ns):
                    break
                end_ns = item.expected_end_ns(free_ns, self)
                if (isinstance(item, _CollectiveItem) and item.reached_ns is None
                        and end_ns is not None):
                    spans.append((max(item.op.at_ns, free_ns), end_ns))
                free_ns = end_ns
        return spans

    def kernel_end_ns(self, op: Kernel, start_ns: int) -> int:
        """When ``op``, starting at ``start_ns``, ends: slowed where it overlaps collectives
        in flight on this GPU as known now (under a clock: at ``start_ns``), or expected to be
        (:meth:`expected_windows`)."""
        alone_end_ns = start_ns + op.duration_ns
        if self._overlap is None:
            return alone_end_ns
        known_ns = None if self._clock is None else self._clock.settled_ns() - 1
        busy = self.comm_windows.busy(op.at_ns) + self.expected_windows(op.stream, known_ns)
        if not busy:
            self._remember(op, start_ns, alone_end_ns)
            return alone_end_ns
        factor = self._overlap.factor(op.name, op.flops, op.duration_ns)
        end_ns = stretched_end_ns(start_ns, op.duration_ns, factor, busy)
        if end_ns > alone_end_ns:
            self.slowed_kernels += 1
            self.overlap_extra_ns += end_ns - alone_end_ns
        self._remember(op, start_ns, end_ns)
        return end_ns

    def _remember(self, op: Kernel, start_ns: int, end_ns: int) -> None:
        assert self._overlap is not None
        factor = self._overlap.collective_factor(op.name, op.flops, op.duration_ns)
        if factor > 1.0:
            slowing = self._slowing
            slowing.append((start_ns, end_ns, factor))
            floor_ns = min(self.comm_windows.open_since_ns(), start_ns - SLOWING_KEPT_NS)
            while slowing[0][1] <= floor_ns:
                slowing.popleft()

    def collective_end_ns(self, start_ns: int, end_ns: int) -> int:
        """When a collective that moved data from ``start_ns`` to ``end_ns`` in the network
        model ends on this GPU, slowed by the kernels placed beside it (NCCL's blocks share
        the SMs and memory bandwidth with them; see ``phantora.engine.overlap``)."""
        return collective_end_ns(start_ns, end_ns, self._slowing)

    def apply(self, op: Op) -> None:
        """Queue one op (in the rank's program order)."""
        if isinstance(op, Kernel):
            self._stream(op.stream).push(_KernelItem(op))
        elif isinstance(op, EventRecord):
            completion = Completion()
            self._events[op.event] = (op.stream, completion)
            self._stream(op.stream).push(_RecordItem(op.at_ns, completion))
        elif isinstance(op, StreamWait):
            recorded = self._events.get(op.event)
            if recorded is not None:
                self._stream(op.stream).push(_WaitItem(op.at_ns, op.event, *recorded))
        elif isinstance(op, Collective):
            self._stream(op.stream).push(_CollectiveItem(op, self._issue(self.rank, op)))
        else:
            raise SimulationError(f"rank {self.rank} sent an unknown op {op!r}")

    def event(self, event: int) -> Completion | None:
        """The completion of the latest record of ``event``; ``None`` if never recorded."""
        recorded = self._events.get(event)
        return None if recorded is None else recorded[1]

    def stream_done(self, stream: int) -> Completion:
        """Completes when everything queued on ``stream`` so far has."""
        return self._stream(stream).marker()

    def device_done(self) -> Completion:
        """Completes when everything queued on every stream so far has."""
        return all_of(stream.marker() for stream in self._streams.values())

    @property
    def gpu_end_ns(self) -> int:
        """When the work applied so far ends, over all streams."""
        return max((stream.free_ns for stream in self._streams.values()), default=0)

    def blockers(self) -> list[str]:
        """What each stream with queued work waits for, e.g. for a deadlock report."""
        return [f"stream {stream.stream_id} waits for {stream.queue[0].describe()}"
                for stream in sorted(self._streams.values(), key=lambda s: s.stream_id)
                if stream.queue]

    def _stream(self, stream: int) -> _Stream:
        found = self._streams.get(stream)
        if found is None:
            found = self._streams[stream] = _Stream(self, stream)
        return found
