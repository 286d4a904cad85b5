"""A rank's side of the coordinator connection: buffers ops, sends batches, blocks on syncs.

Flush rules (:mod:`wire`): ops leave in one :class:`~wire.messages.Batch` when
the rank blocks (:meth:`CoordinatorClient.sync`), when the caller asks (the runtime does after a
collective), when the buffer holds ``max_buffered_ops``, and from a daemon heartbeat thread every
``heartbeat_interval_s`` of wall time while ops are pending or the clock has moved since the last
batch, so a rank busy on the CPU keeps raising its promise and does not hold the others back.

Every op is stamped with the clock *while the buffer lock is held*, so no batch can promise a
time later than an op still to be sent. While a sync is outstanding nothing else is sent: a
blocked rank promises nothing until the reply comes, and the clock has jumped to the reply's time
before anything else may leave (ops of other threads wait for it). All the client's CPU time
(pickling, the heartbeat thread) is excluded from virtual time.

Once started, a receiver thread reads everything the coordinator sends: replies go to the
waiting sync, :class:`~wire.messages.ValueDelivery` messages to the value sink at once
(values flow outside virtual time, so a rank's deferred values resolve while it runs on).
The :class:`~wire.messages.ValueUpdate` of a collective sent with pending inputs always
follows that collective's batch: values can be computed (by the receiver thread) while the
collective still waits in the buffer, or before it is even added, and the coordinator would
not know what they complete.
"""

import os
import queue
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from intercept.host_time.clock import VirtualClock
from wire.messages import Batch, Exit, Op, Reply, Sync, ValueDelivery, ValueUpdate

ValueSink = Callable[[tuple[tuple[int, Any], ...]], None]
"""Receives the values a :class:`ValueDelivery` carries (``ValueStore.deliver``)."""

MAX_BUFFERED_OPS = 256
"""Ops held before a flush: a few batches per GPT-2 step, each a single pickle and send."""
HEARTBEAT_INTERVAL_S = 0.005
"""Wall time between heartbeats: short next to a step, long next to a batch send (~20 us)."""


class CoordinatorClient:
    """Sends one rank's ops to the coordinator over ``conn``; see the module docstring."""

    def __init__(self, conn: Connection, clock: VirtualClock, *,
                 max_buffered_ops: int = MAX_BUFFERED_OPS,
                 heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S) -> None:
        self._conn = conn
        self._clock = clock
        self._max_buffered_ops = max_buffered_ops
        self._heartbeat_interval_s = heartbeat_interval_s
        self._lock = threading.Lock()
        self._unblocked = threading.Condition(self._lock)
        """Notified when a sync's reply has moved the clock (other threads' ops wait for it)."""
        self._sync_lock = threading.Lock()
        self._sync_thread: int | None = None
        """The thread whose sync is outstanding (``None`` when none is)."""
        self._ops: list[Op] = []
        self._promised_ns = 0
        """``clock_ns`` of the last batch sent (the coordinator starts every rank at 0)."""
        self._buffered_pending: list[int] = []
        """Value ids of buffered collectives whose inputs are pending."""
        self._owed_updates: set[int] = set()
        """Value ids of sent collectives whose :class:`ValueUpdate` has not gone out yet."""
        self._held_updates: dict[int, np.ndarray | None] = {}
        """Updates whose collective has not been sent yet: they go right after its batch."""
        self._blocked = False
        self._closed = False
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name="phantora-heartbeat",
                                           daemon=True)
        self._receiver = threading.Thread(target=self._receive, name="phantora-receiver",
                                          daemon=True)
        self._replies: queue.Queue[object] = queue.Queue()
        self._value_sink: ValueSink | None = None

    def start(self) -> None:
        """Start the heartbeat and receiver threads."""
        self._heartbeat.start()
        self._receiver.start()

    def set_value_sink(self, sink: ValueSink) -> None:
        """Where :class:`ValueDelivery` values go (set before the script runs)."""
        self._value_sink = sink

    def send_values(self, value_id: int, data: np.ndarray | None) -> None:
        """A :class:`ValueUpdate`: final inputs of a collective sent as pending (any thread,
        also while blocked: it promises nothing). Held until the collective has been sent."""
        with self._clock.excluded(), self._lock:  # also after the Exit: values may follow it
            if value_id not in self._owed_updates:
                self._held_updates[value_id] = data
                return
            self._owed_updates.remove(value_id)
            try:
                self._conn.send(ValueUpdate(value_id, data))
            except OSError:
                pass  # the coordinator has gone

    def add(self, op_type: type[Op], **fields: Any) -> Op:
        """Buffer ``op_type(at_ns=<now>, **fields)``; flush if the buffer is full. While another
        thread's sync is outstanding, waits for its reply first (see :meth:`_await_unblocked`)."""
        with self._clock.excluded(), self._lock:
            self._await_unblocked()
            self._check_usable()
            op = op_type(at_ns=self._clock.now_ns(), **fields)
            self._ops.append(op)
            values = fields.get("values")
            if values is not None and values.pending:
                self._buffered_pending.append(values.value_id)
            if len(self._ops) >= self._max_buffered_ops:
                self._send(Batch(self._clock.now_ns(), self._take_ops()))
        return op

    def flush(self) -> None:
        """Send the buffered ops now (with the current clock as promise)."""
        with self._clock.excluded(), self._lock:
            self._await_unblocked()
            self._check_usable()
            self._send(Batch(self._clock.now_ns(), self._take_ops()))

    def sync(self, kind: str, target: int) -> Reply:
        """Send pending ops with a :class:`Sync`, block for the :class:`Reply`, jump the clock.

        The clock moves to ``max(clock, reply.time_ns)``, except for a ``"query"``, which does not
        wait for anything. Syncs from several threads are answered one after the other.
        """
        with self._clock.excluded(), self._sync_lock:
            with self._lock:
                self._check_usable()
                now = self._clock.now_ns()
                self._send(Batch(now, self._take_ops(), sync=Sync(kind, target, now)))  # type: ignore[arg-type]
                self._blocked = True
                self._sync_thread = threading.get_ident()
            reply = None
            try:
                reply = self._next_reply()
            finally:
                with self._lock:
                    # Jump before unblocking, under the lock: the coordinator counts this rank's
                    # promise as the reply's time from the moment it answered, so no batch (a
                    # heartbeat) may leave with the clock still short of it (the engine would
                    # see the rank's clock go back).
                    if isinstance(reply, Reply) and kind != "query":
                        self._clock.advance_to(reply.time_ns)
                    self._blocked = False
                    self._sync_thread = None
                    self._unblocked.notify_all()
            if not isinstance(reply, Reply):
                raise RuntimeError(f"the coordinator answered a {kind} sync with {reply!r}; "
                                   "expected a Reply")
            return reply

    def close(self, exit_: Exit) -> None:
        """Send the remaining ops with ``exit_`` and stop the heartbeat; nothing may follow."""
        with self._clock.excluded():
            with self._lock:
                self._check_usable()
                self._send(Batch(self._clock.now_ns(), self._take_ops(), exit=exit_))
                self._closed = True
            self._stop.set()
            if self._heartbeat.is_alive():
                self._heartbeat.join()

    def _next_reply(self) -> object:
        """The coordinator's next reply (values that come first go to the sink)."""
        if self._receiver.is_alive():
            reply = self._replies.get()
            if isinstance(reply, BaseException):
                raise reply
            return reply
        while True:  # not started (tests): read here
            message = self._conn.recv()
            if not self._deliver(message):
                return message

    def _receive(self) -> None:
        """Receiver loop: replies to the waiting sync, values to the sink."""
        while True:
            try:
                with self._clock.excluded():  # unpickling is the simulator's CPU, not the script's
                    message = self._conn.recv()
            except (EOFError, OSError) as error:
                self._replies.put(error)
                return
            if not self._deliver(message):
                self._replies.put(message)

    def _deliver(self, message: object) -> bool:
        """Hand a :class:`ValueDelivery` to the sink; False for anything else."""
        if not isinstance(message, ValueDelivery):
            return False
        if self._value_sink is not None:
            with self._clock.excluded():
                self._value_sink(message.values)
        return True

    def _await_unblocked(self) -> None:
        """With the lock held: while another thread's sync is outstanding, wait for its reply.
        The coordinator takes no ops from a blocked rank, and once it has answered, the rank's
        promise is the reply's time: an op stamped before the clock jumped there would be earlier
        than that promise (the engine's "clock went back" error, from an autograd or DDP
        thread)."""
        while self._blocked and self._sync_thread != threading.get_ident():
            self._unblocked.wait()

    def _take_ops(self) -> list[Op]:
        ops, self._ops = self._ops, []
        return ops

    def _send(self, batch: Batch) -> None:
        """Send with the lock held (``batch`` holds every buffered op); records the promise.
        Updates already computed for the batch's pending collectives follow it."""
        self._conn.send(batch)
        self._promised_ns = batch.clock_ns
        for value_id in self._buffered_pending:
            if value_id in self._held_updates:
                self._conn.send(ValueUpdate(value_id, self._held_updates.pop(value_id)))
            else:
                self._owed_updates.add(value_id)
        self._buffered_pending.clear()

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("the rank already sent its Exit; no more ops can follow")
        if os.getpid() != self._pid:
            # A forked child (a DataLoader worker) shares the rank's socket; real CUDA forbids
            # GPU work in a forked child too ("Cannot re-initialize CUDA in forked subprocess").
            raise RuntimeError(f"GPU work in a forked child (pid {os.getpid()}) of the rank "
                               f"(pid {self._pid}); CUDA does not allow it either")

    def _beat(self) -> None:
        """Heartbeat loop: a batch when ops wait or the clock moved, unless blocked or closed."""
        while not self._stop.wait(self._heartbeat_interval_s):
            with self._clock.excluded(), self._lock:
                if self._closed or self._blocked:
                    continue
                now = self._clock.now_ns()
                if not self._ops and now <= self._promised_ns:
                    continue
                try:
                    self._send(Batch(now, self._take_ops()))
                except OSError:
                    return  # coordinator gone: the main thread's next send reports it
