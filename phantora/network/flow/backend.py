"""The fluid network backend: flows share directed link capacity by max-min fairness.

Between two event instants every transmitting flow runs at a constant rate, so the backend
only works at instants where something changes: a flow arrives, a flow's last byte leaves
(its *transmission end*), or a flow's last byte lands (its *completion*, the transmission end
plus the route's propagation latency). Flows with the same ``(src, dst, tag)`` form one
connection and transmit one after another in arrival order, like an NCCL channel or a TCP
stream.

Why it is fast enough for ~10^5 flows:

* Rates are recomputed lazily, once per instant: arrivals and transmission ends only mark the
  resources they touch as dirty, and the rates are computed when the clock is about to move
  past the instant (or ``next_event_ns`` is asked). Flows the engine adds at the current
  instant after a completion are therefore batched with everything else at that instant.
* Only the connected component(s) of resources reachable from the dirty ones through active
  flows are recomputed; the hosts' NVSwitches never share a component.
* A flow keeps its remaining bytes as of one instant and its rate, and is only touched when
  its rate changes; transmission ends sit in a heap with lazy invalidation.

Link failures (``failures``) are instants too: the failed link leaves the routing, every
connection whose route crosses it moves to the remaining equal-cost paths (hashed again over
the new next hops), and a transmitting flow keeps its remaining bytes at its rerouted rate.
Completions scheduled before the failure keep the old route's latency (those bytes left
already); later ones take the new route's.

Time is integer ns: a transmission end is rounded up to the next ns, and at least 1 ns after
the instant the rate was set, so every step moves the clock and every flow completes.
"""

import heapq
from collections import deque
from collections.abc import Sequence
from math import ceil

from hwmodel.errors import BackendError
from phantora.cluster.topology import Topology
from phantora.network.base import FlowDone, FlowId, GpuId, LinkFailure, NetworkStats
from phantora.network.failures import check_failures
from phantora.network.flow.maxmin import MaxMinSolver
from phantora.network.flow.routing import SCOPES, Route, Scope, capacities_bytes_per_ns, route


class _Flow:
    """A message; while sending: ``remaining_bytes`` at ``at_ns``, sent at ``bytes_per_ns``."""

    __slots__ = ("flow_id", "connection", "nbytes", "remaining_bytes", "at_ns", "bytes_per_ns",
                 "end_tx_ns")

    def __init__(self, flow_id: FlowId, connection: "_Connection", nbytes: int) -> None:
        self.flow_id = flow_id
        self.connection = connection
        self.nbytes = nbytes
        self.remaining_bytes = float(nbytes)
        self.at_ns = 0
        self.bytes_per_ns = 0.0
        self.end_tx_ns = -1
        """Scheduled transmission end; -1 when not transmitting (heap entries that disagree
        with it are stale)."""


class _Connection:
    """A ``(src, dst, tag)`` stream: at most one flow transmits, the others wait in order."""

    __slots__ = ("route", "waiting", "active")

    def __init__(self, route: Route) -> None:
        self.route = route
        self.waiting: deque[_Flow] = deque()
        self.active: _Flow | None = None


class FluidBackend:
    """Flow-level network model implementing :class:`~phantora.network.base.NetworkBackend`.

    ``scope`` selects the flows it accepts: ``"intra"`` (same host, over NVLink),
    ``"inter"`` (different hosts, over the fabric) or ``"all"``. ``failures``: links that go
    down mid-run (checked by :func:`~phantora.network.failures.check_failures`).
    """

    def __init__(self, topology: Topology, scope: Scope = "all",
                 failures: Sequence[LinkFailure] = ()) -> None:
        if scope not in SCOPES:
            raise BackendError(f"unknown fluid backend scope {scope!r}; expected one of {SCOPES}")
        self._topology = topology
        self._scope: Scope = scope
        self._failures = deque(check_failures(topology, failures))
        """Failures not applied yet, in time order."""
        self._has_failures = bool(failures)
        self._down: frozenset[int] = frozenset()
        """Links failed so far: routes computed from now on avoid them."""
        self._rerouted = 0
        capacity = capacities_bytes_per_ns(topology)
        self._solver = MaxMinSolver(capacity)
        self._on_resource: list[dict[FlowId, _Flow]] = [{} for _ in range(capacity.size)]
        self._connections: dict[tuple[GpuId, GpuId, int], _Connection] = {}
        self._now_ns = 0
        self._next_id = 0
        self._closed = False
        self._next_ns: int | None = None
        self._next_ns_stale = False
        """Whether anything changed since ``_next_ns`` was computed."""
        self._dirty: set[int] = set()
        """Resources whose set of transmitting flows changed since rates were last computed."""
        self._arrivals: list[tuple[int, FlowId, _Flow]] = []
        self._tx_ends: list[tuple[int, FlowId, _Flow]] = []
        self._completions: list[tuple[int, FlowId]] = []
        self._bytes = 0
        self._rate_computations = 0
        self._flows_rated = 0
        self._largest_batch = 0

    # -- NetworkBackend -------------------------------------------------------------------
    def add_flow(self, src: GpuId, dst: GpuId, nbytes: int, start_ns: int, tag: int = 0) -> FlowId:
        """Queue a message on connection ``(src, dst, tag)``; it arrives at ``start_ns``."""
        self._check_open()
        if start_ns < self._now_ns:
            raise BackendError(f"flow GPU {src} -> GPU {dst} (tag {tag}) starts at {start_ns} ns, "
                               f"before the backend's clock ({self._now_ns} ns); the engine must "
                               "never inject into the past")
        if nbytes < 0:
            raise BackendError(f"flow GPU {src} -> GPU {dst} (tag {tag}) has {nbytes} bytes; "
                               "sizes must be >= 0")
        key = (src, dst, tag)
        connection = self._connections.get(key)
        if connection is None:
            connection = _Connection(route(self._topology, self._scope, src, dst, tag,
                                           self._down))
            self._connections[key] = connection
        flow = _Flow(self._next_id, connection, nbytes)
        self._next_ns_stale = True
        self._next_id += 1
        self._bytes += nbytes
        if start_ns == self._now_ns:
            self._arrive(flow, start_ns)
        else:
            heapq.heappush(self._arrivals, (start_ns, flow.flow_id, flow))
        return flow.flow_id

    def now_ns(self) -> int:
        """The backend's clock: the last instant simulated to."""
        return self._now_ns

    def next_event_ns(self) -> int | None:
        """The next instant anything happens (arrival, transmission end, completion, or a link
        failure while flows are pending).

        Computes pending rates first, so call it after adding every flow of the instant.
        """
        self._check_open()
        if self._next_ns_stale:
            self._update_rates()
            self._next_ns = min((heap[0][0] for heap in (self._arrivals, self._tx_ends,
                                                          self._completions) if heap),
                                default=None)
            if self._next_ns is not None and self._failures:
                self._next_ns = min(self._next_ns, self._failures[0].at_ns)
            self._next_ns_stale = False
        return self._next_ns

    def advance_to(self, t_ns: int) -> list[FlowDone]:
        """Simulate instant by instant up to ``t_ns``; stop at the first one with completions."""
        if t_ns < self._now_ns:
            raise BackendError(f"advance_to({t_ns}) is before the backend's clock "
                               f"({self._now_ns} ns); time never moves backwards")
        while True:
            instant = self.next_event_ns()
            if instant is None or instant > t_ns:
                self._now_ns = t_ns
                self._fail_links(t_ns)  # nothing transmits: only idle connections move
                return []
            self._now_ns = instant
            self._next_ns_stale = True
            self._end_transmissions(instant)
            self._fail_links(instant)
            while self._arrivals and self._arrivals[0][0] == instant:
                self._arrive(heapq.heappop(self._arrivals)[2], instant)
            completed = []
            while self._completions and self._completions[0][0] == instant:
                completed.append(FlowDone(heapq.heappop(self._completions)[1], instant))
            if completed:
                return completed

    def stats(self) -> NetworkStats:
        """Flows and bytes added, and how much max-min work they caused; with ``failures``,
        also ``link_failures`` (applied so far) and ``rerouted_connections`` (moved by them)."""
        extra: dict[str, int | float | str] = {
            "rate_computations": self._rate_computations,
            "flows_rated": self._flows_rated,
            "largest_batch_flows": self._largest_batch,
        }
        if self._has_failures:
            extra["link_failures"] = len(self._down)
            extra["rerouted_connections"] = self._rerouted
        return NetworkStats(backend="flow", flows=self._next_id, bytes=self._bytes, extra=extra)

    def close(self) -> None:
        """Drop all state; later calls raise ``BackendError``."""
        self._closed = True
        self._connections.clear()
        self._on_resource.clear()
        self._arrivals.clear()
        self._tx_ends.clear()
        self._completions.clear()

    # -- flow lifecycle -------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("the fluid backend was closed; create a new one")

    def _arrive(self, flow: _Flow, t_ns: int) -> None:
        connection = flow.connection
        connection.waiting.append(flow)
        if connection.active is None:
            self._start_next(connection, t_ns)

    def _start_next(self, connection: _Connection, t_ns: int) -> None:
        """Start the connection's next waiting message; empty ones go straight to flight."""
        waiting = connection.waiting
        while waiting:
            flow = waiting.popleft()
            if flow.nbytes == 0:
                self._schedule_completion(flow, t_ns)
                continue
            flow.at_ns = t_ns
            connection.active = flow
            for resource in connection.route.resources:
                self._on_resource[resource][flow.flow_id] = flow
            self._dirty.update(connection.route.resources)
            return
        connection.active = None

    def _end_transmissions(self, t_ns: int) -> None:
        """Retire every flow whose last byte leaves at ``t_ns`` and start its successor."""
        heap = self._tx_ends
        while heap and heap[0][0] <= t_ns:
            end_ns, flow_id, flow = heapq.heappop(heap)
            if end_ns != flow.end_tx_ns:
                continue
            flow.end_tx_ns = -1
            connection = flow.connection
            for resource in connection.route.resources:
                del self._on_resource[resource][flow_id]
            self._dirty.update(connection.route.resources)
            self._schedule_completion(flow, t_ns)
            self._start_next(connection, t_ns)

    def _fail_links(self, t_ns: int) -> None:
        """Take down the links failing by ``t_ns`` (the clock is there) and reroute every
        connection whose route crosses one; its transmitting flow keeps its remaining bytes."""
        failed: set[int] = set()
        while self._failures and self._failures[0].at_ns <= t_ns:
            failed.add(self._failures.popleft().link)
        if not failed:
            return
        self._down |= failed
        crossing = {2 * link + direction for link in failed for direction in (0, 1)}
        for (src, dst, tag), connection in self._connections.items():
            if crossing.isdisjoint(connection.route.resources):
                continue
            new = route(self._topology, self._scope, src, dst, tag, self._down)
            flow = connection.active
            if flow is not None:
                flow.remaining_bytes -= flow.bytes_per_ns * (t_ns - flow.at_ns)
                flow.at_ns = t_ns
                for resource in connection.route.resources:
                    del self._on_resource[resource][flow.flow_id]
                for resource in new.resources:
                    self._on_resource[resource][flow.flow_id] = flow
                self._dirty.update(connection.route.resources)
                self._dirty.update(new.resources)
            connection.route = new
            self._rerouted += 1

    def _schedule_completion(self, flow: _Flow, end_tx_ns: int) -> None:
        completion = (end_tx_ns + flow.connection.route.latency_ns, flow.flow_id)
        heapq.heappush(self._completions, completion)

    # -- rates ----------------------------------------------------------------------------
    def _update_rates(self) -> None:
        """Recompute max-min rates in the components touched since the last computation."""
        if self._dirty:
            flows = self._dirty_component()
            self._dirty.clear()
            if flows:
                self._rate_computations += 1
                self._flows_rated += len(flows)
                self._largest_batch = max(self._largest_batch, len(flows))
                self._apply_rates(flows, self._solver.rates(
                    [flow.connection.route.resources for flow in flows]))
        self._drop_stale_tx_ends()

    def _dirty_component(self) -> list[_Flow]:
        """Transmitting flows connected to a dirty resource through shared resources, in id
        order (a canonical order keeps the floating-point sums deterministic)."""
        seen = set(self._dirty)
        stack = list(self._dirty)
        flows: dict[FlowId, _Flow] = {}
        while stack:
            for flow_id, flow in self._on_resource[stack.pop()].items():
                if flow_id in flows:
                    continue
                flows[flow_id] = flow
                for resource in flow.connection.route.resources:
                    if resource not in seen:
                        seen.add(resource)
                        stack.append(resource)
        return [flows[flow_id] for flow_id in sorted(flows)]

    def _apply_rates(self, flows: list[_Flow], rates: list[float]) -> None:
        """Bring each flow whose rate changed up to now and reschedule its transmission end."""
        now = self._now_ns
        for flow, rate in zip(flows, rates, strict=True):
            if rate == flow.bytes_per_ns:
                continue
            flow.remaining_bytes -= flow.bytes_per_ns * (now - flow.at_ns)
            flow.at_ns = now
            flow.bytes_per_ns = rate
            end_ns = now + max(1, ceil(flow.remaining_bytes / rate))
            if end_ns != flow.end_tx_ns:
                flow.end_tx_ns = end_ns
                heapq.heappush(self._tx_ends, (end_ns, flow.flow_id, flow))

    def _drop_stale_tx_ends(self) -> None:
        heap = self._tx_ends
        while heap and heap[0][0] != heap[0][2].end_tx_ns:
            heapq.heappop(heap)
