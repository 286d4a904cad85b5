"""Runs planned collectives (:class:`FlowDag`) on a network backend, many at once.

:class:`FlowScheduler` is an incremental executor: DAGs are submitted with a start time, and
the caller steps it one instant at a time up to a limit it chooses (the live engine's safe
horizon). A flow is handed to the backend as soon as its dependencies have completed, with its
start time set to ``max(dep end) + delay_ns`` (or the DAG's start + ``delay_ns`` without deps),
so the backend always knows every flow that can start before the next completion. Zero-byte
flows are pure synchronisation points: they complete at their start time without touching the
network.

Determinism: a submitted DAG is injected when the scheduler reaches its start instant, and DAGs
starting at the same instant are injected in the order of the caller's ``order_key``, so the
backend sees the same calls in the same order however the submissions were interleaved.

Safety: nothing is injected into the backend before its clock, nor submitted before the
instant the scheduler has reached; either raises :class:`SimulationError` (a bug in the
caller's synchronisation, never silently clamped).

:func:`run_dag` runs one DAG to completion on its own (:mod:`.lone_collective`).
"""

import heapq
from dataclasses import dataclass
from typing import Any

from hwmodel.errors import SimulationError
from phantora.collectives.dag import FlowDag
from phantora.network.base import FlowId, GpuId, NetworkBackend

FOREVER_NS = 2**62
"""A time later than any simulation reaches; the limit that means "no limit"."""

_SYNC, _START = 0, 1
"""Timer priorities within one instant: zero-byte flows complete before new DAGs start."""


@dataclass(frozen=True, slots=True)
class DagDone:
    """A submitted DAG finished: its last flow completed, plus the DAG's ``tail_ns``."""

    ticket: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """One flow as it ran (kept only when the scheduler records flows, for the trace)."""

    ticket: int
    src: GpuId
    dst: GpuId
    nbytes: int
    start_ns: int
    end_ns: int


class _Run:
    """A submitted DAG's progress: per flow, unmet deps and the latest dep end."""

    __slots__ = (
        "dag",
        "dependents",
        "last_end_ns",
        "left",
        "order",
        "ready_ns",
        "start_ns",
        "ticket",
        "waiting_on",
    )

    def __init__(self, ticket: int, dag: FlowDag, start_ns: int) -> None:
        flows = dag.flows
        self.ticket = ticket
        self.dag = dag
        self.start_ns = start_ns
        self.order = -1
        """Injection order, assigned when the run starts; keys its zero-byte timers."""
        self.waiting_on = [len(flow.deps) for flow in flows]
        self.dependents: list[list[int]] = [[] for _ in flows]
        for index, flow in enumerate(flows):
            for dep in flow.deps:
                if not 0 <= dep < index:
                    raise SimulationError(f"flow {index} depends on flow {dep}, which is not "
                                          "earlier in the DAG")
                self.dependents[dep].append(index)
        self.ready_ns = [start_ns] * len(flows)
        self.left = len(flows)
        self.last_end_ns = start_ns


class FlowScheduler:
    """Many flow DAGs sharing one network backend, advanced one instant at a time."""

    def __init__(self, backend: NetworkBackend, *, record_flows: bool = False) -> None:
        self._backend = backend
        self._now_ns = backend.now_ns()
        self._timers: list[tuple[int, int, tuple[Any, ...], int, Any]] = []
        self._timer_seq = 0
        self._tickets = 0
        self._started = 0
        self._in_network: dict[FlowId, tuple[_Run, int, int]] = {}
        self._finished: list[DagDone] = []
        self._record = record_flows
        self.flows: list[FlowRecord] = []
        """Every completed flow, when ``record_flows`` is set."""

    @property
    def now_ns(self) -> int:
        """The last instant processed (or the backend's clock at construction)."""
        return self._now_ns

    @property
    def idle(self) -> bool:
        """Nothing submitted is left to run."""
        return not self._timers and not self._in_network

    def submit(self, dag: FlowDag, start_ns: int, order_key: tuple[Any, ...] = ()) -> int:
        """Schedule ``dag`` to start at ``start_ns``; returns the ticket its :class:`DagDone`
        will carry. DAGs starting at one instant are injected in ``order_key`` order."""
        if start_ns < self._now_ns:
            raise SimulationError(f"a flow DAG would start at {start_ns} ns, before the network "
                                  f"clock ({self._now_ns} ns)")
        ticket = self._tickets
        self._tickets += 1
        self._push(start_ns, _START, order_key, _Run(ticket, dag, start_ns))
        return ticket

    def next_ns(self) -> int | None:
        """A lower bound on the next instant at which something happens; ``None`` when idle."""
        backend_ns = self._backend.next_event_ns()
        if not self._timers:
            return backend_ns
        timer_ns = self._timers[0][0]
        return timer_ns if backend_ns is None else min(timer_ns, backend_ns)

    def step(self, limit_ns: int) -> list[DagDone] | None:
        """Process the earliest instant ``<= limit_ns`` at which something happens.

        Returns the DAGs that finished at that instant (possibly none), or ``None`` when
        nothing happens up to ``limit_ns`` (the backend may have advanced to it).
        """
        t_timer = self._timers[0][0] if self._timers else None
        target = limit_ns if t_timer is None else min(limit_ns, t_timer)
        next_completion = self._backend.next_event_ns()
        if next_completion is not None and next_completion <= target:
            done = self._backend.advance_to(target)
            if done:
                self._now_ns = done[0].end_ns
                for flow in done:
                    run, index, start_ns = self._in_network.pop(flow.flow_id)
                    if self._record:
                        spec = run.dag.flows[index]
                        self.flows.append(FlowRecord(run.ticket, spec.src, spec.dst, spec.nbytes,
                                                     start_ns, flow.end_ns))
                    self._complete(run, index, flow.end_ns)
                return self._take_finished()
        if t_timer is None or t_timer > limit_ns:
            return None
        self._now_ns = t_timer
        while self._timers and self._timers[0][0] == t_timer:
            _, kind, _, _, payload = heapq.heappop(self._timers)
            if kind == _START:
                self._start(payload)
            else:
                run, index = payload
                self._complete(run, index, t_timer)
        return self._take_finished()

    def _push(self, t_ns: int, kind: int, key: tuple[Any, ...], payload: Any) -> None:
        heapq.heappush(self._timers, (t_ns, kind, key, self._timer_seq, payload))
        self._timer_seq += 1

    def _take_finished(self) -> list[DagDone]:
        finished, self._finished = self._finished, []
        return finished

    def _start(self, run: _Run) -> None:
        run.order = self._started
        self._started += 1
        if run.left == 0:
            self._finished.append(DagDone(run.ticket, run.start_ns + run.dag.tail_ns))
            return
        for index, count in enumerate(run.waiting_on):
            if count == 0:
                self._release(run, index)

    def _release(self, run: _Run, index: int) -> None:
        flow = run.dag.flows[index]
        begin_ns = run.ready_ns[index] + flow.delay_ns
        if flow.nbytes == 0:
            self._push(begin_ns, _SYNC, (run.order, index), (run, index))
            return
        if begin_ns < self._backend.now_ns():
            raise SimulationError(f"flow {index} of a DAG would enter the network at {begin_ns} "
                                  f"ns, before the network clock ({self._backend.now_ns()} ns)")
        flow_id = self._backend.add_flow(flow.src, flow.dst, flow.nbytes, begin_ns, flow.tag)
        self._in_network[flow_id] = (run, index, begin_ns)

    def _complete(self, run: _Run, index: int, end_ns: int) -> None:
        run.left -= 1
        run.last_end_ns = max(run.last_end_ns, end_ns)
        for child in run.dependents[index]:
            run.ready_ns[child] = max(run.ready_ns[child], end_ns)
            run.waiting_on[child] -= 1
            if run.waiting_on[child] == 0:
                self._release(run, child)
        if run.left == 0:
            self._finished.append(DagDone(run.ticket, run.last_end_ns + run.dag.tail_ns))


def run_dag(dag: FlowDag, backend: NetworkBackend, start_ns: int) -> int:
    """Simulate ``dag`` alone, starting at ``start_ns``; return the collective's end time in ns."""
    scheduler = FlowScheduler(backend)
    ticket = scheduler.submit(dag, start_ns)
    while True:
        finished = scheduler.step(FOREVER_NS)
        if finished is None:
            raise SimulationError("flow DAG stalled: some flows can never complete (a backend "
                                  "that lost a flow)")
        for done in finished:
            if done.ticket == ticket:
                return done.end_ns
