"""Rings along a rail simulated on two hosts (:class:`HostRingBackend`), for ``symmetry:
approximate``.

NCCL's rings leave every host through the same rail to the next host: on a rail, every host
sends its ring flow to the host ``d`` places on (``d`` = 1, or -1 for a reversed ring), and
with equal sizes every host does the same at the same time. Such a rail's ports all carry the
same traffic: a NIC sends its data and the acks of the data it receives, the rail switch
forwards one host's data and another's acks to each port. Two hosts do the same: host 0 sends
to host 1, host 1 to host 0 (``d`` odd). So the flows of host ``h`` are simulated by host
``h mod 2`` and complete with it, where every host's NICs are alike (``Rails.alike_hosts``).
What the two hosts do not reproduce is the rail switch's total buffer use (the PFC threshold
of a shared buffer falls as every port queues): exact while queues stay below PFC and ECN
thresholds, as on uncongested rails.

Flows that are no such ring (a tree's, a send/recv) run on their own hosts while their rail
carries nothing else; otherwise the pattern is broken for good and :class:`RingBroken` tells
the caller (:class:`~phantora.network.mirror.RailMirrorBackend`) to simulate every host.
Like the rail mirror, flows starting at an instant are decided once no more can start then:
they are held until the wrapped backend reaches that instant.
"""

import heapq
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from phantora.network.base import FlowDone, FlowId, GpuId, NetworkBackend, NetworkStats
from phantora.network.rails import Rails
from phantora.network.scaled import scaled

QUOTIENT_HOSTS = 2
"""Hosts that stand for all of a rail's ring."""


class RingBroken(Exception):
    """Flows of a rail that is not idle are no ring: every host must be simulated."""


@dataclass(frozen=True, slots=True)
class _Flow:
    flow_id: FlowId
    src_host: int
    dst_host: int
    rail: int
    nbytes: int
    tag: int


class HostRingBackend:
    """A :class:`~phantora.network.base.NetworkBackend` simulating rail rings on two hosts of
    the backend ``make_inner()`` builds; sizes within ``size_tolerance`` count as equal."""

    def __init__(self, rails: Rails, make_inner: Callable[[], NetworkBackend],
                 size_tolerance: float) -> None:
        self._inner = make_inner()
        self._rails = rails
        self._hosts = max(rails.host_of) + 1
        self._gpu_at = {(host, rail): gpu
                        for gpu, (host, rail) in enumerate(zip(rails.host_of, rails.rail_of))}
        self._tolerance = size_tolerance
        self._next_id: FlowId = 0
        self._starting: dict[int, list[_Flow]] = {}
        self._instants: list[int] = []
        self._orbits: dict[FlowId, tuple[int, list[FlowId]]] = {}
        """Wrapped backend's flow id -> (rail, the flows it stands for)."""
        self._busy: dict[int, int] = defaultdict(int)
        """Rail -> wrapped flows pending on it."""
        self._alone: dict[int, bool] = {}
        """Rail -> whether its pending flows run on their own hosts (no ring)."""
        self._step: dict[tuple[int, int, int], int] = {}
        """(rail, tag, host parity) -> the ring's step ``d`` its two-host queue pair stands for."""
        self._bytes = 0
        self._simulated_bytes = 0
        self._counts = {"host_mirrored": 0, "on_own_hosts": 0}

    def add_flow(self, src: GpuId, dst: GpuId, nbytes: int, start_ns: int, tag: int = 0) -> FlowId:
        flow_id = self._next_id
        self._next_id += 1
        self._bytes += nbytes
        if start_ns not in self._starting:
            self._starting[start_ns] = []
            heapq.heappush(self._instants, start_ns)
        host_of = self._rails.host_of
        self._starting[start_ns].append(_Flow(flow_id, host_of[src], host_of[dst],
                                              self._rails.rail_of[src], nbytes, tag))
        return flow_id

    def now_ns(self) -> int:
        return self._inner.now_ns()

    def next_event_ns(self) -> int | None:
        """The wrapped backend's, or the next held flows' start (nothing completes before)."""
        times = [t for t in (self._inner.next_event_ns(),
                             self._instants[0] if self._instants else None) if t is not None]
        return min(times) if times else None

    def advance_to(self, t_ns: int) -> list[FlowDone]:
        while True:
            instant = self._instants[0] if self._instants else None
            target = t_ns if instant is None else min(t_ns, instant)
            done = self._completed(self._inner.advance_to(target))
            if done or instant is None or instant >= t_ns:
                return done
            heapq.heappop(self._instants)
            self._decide(instant, self._starting.pop(instant))

    def stats(self) -> NetworkStats:
        """The wrapped backend's; its packet counters are scaled to every host by bytes."""
        inner = self._inner.stats()
        extra = scaled(inner.extra,
                       self._bytes / self._simulated_bytes if self._simulated_bytes else 1.0)
        extra.update({"symmetry.ring_hosts_simulated": QUOTIENT_HOSTS,
                      "symmetry.flows_host_mirrored": self._counts["host_mirrored"],
                      "symmetry.flows_on_own_hosts": self._counts["on_own_hosts"]})
        return NetworkStats(backend=inner.backend, flows=self._next_id, bytes=self._bytes,
                            extra=extra, hot_ports=inner.hot_ports)

    def close(self) -> None:
        self._inner.close()

    # -- internals ------------------------------------------------------------------------
    def _completed(self, done: list[FlowDone]) -> list[FlowDone]:
        out = []
        for flow in done:
            rail, ids = self._orbits.pop(flow.flow_id)
            self._busy[rail] -= 1
            out += [FlowDone(flow_id, flow.end_ns) for flow_id in ids]
        return sorted(out, key=lambda flow: flow.flow_id)

    def _decide(self, instant: int, flows: list[_Flow]) -> None:
        by_rail: dict[int, list[_Flow]] = defaultdict(list)
        for flow in flows:
            by_rail[flow.rail].append(flow)
        for rail, mine in by_rail.items():
            orbits = self._ring(rail, mine)
            alone = orbits is None
            if self._busy[rail] and alone != self._alone[rail]:
                raise RingBroken(f"rail {rail} at {instant} ns: flows that are no ring while "
                                 "it carries a ring's, or the other way round")
            self._alone[rail] = alone
            for (src_host, dst_host, nbytes, tag), ids in (
                    orbits if orbits is not None else
                    [((f.src_host, f.dst_host, f.nbytes, f.tag), [f.flow_id]) for f in mine]):
                inner_id = self._inner.add_flow(self._gpu_at[src_host, rail],
                                                self._gpu_at[dst_host, rail], nbytes, instant, tag)
                self._orbits[inner_id] = (rail, ids)
                self._busy[rail] += 1
                self._simulated_bytes += nbytes
                self._counts["host_mirrored" if orbits is not None else "on_own_hosts"] += \
                    len(ids) - (orbits is not None)

    def _ring(self, rail: int, flows: list[_Flow]
              ) -> list[tuple[tuple[int, int, int, int], list[FlowId]]] | None:
        """The two-host flows (src host, dst host, bytes, tag) and the flows each stands for,
        or ``None`` unless every host sends alike to the host ``d`` (odd) places on."""
        hosts = self._hosts
        groups: dict[tuple[int, int], dict[int, list[_Flow]]] = defaultdict(
            lambda: defaultdict(list))
        for flow in flows:
            groups[(flow.dst_host - flow.src_host) % hosts, flow.tag][flow.src_host].append(flow)
        orbits = []
        steps = {}
        for (step, tag), by_host in groups.items():
            counts = {len(sent) for sent in by_host.values()}
            if step % 2 == 0 or len(by_host) != hosts or len(counts) != 1:
                return None
            for parity in range(QUOTIENT_HOSTS):
                if steps.setdefault((rail, tag, parity), step) != step or \
                        self._step.get((rail, tag, parity), step) != step:
                    return None
            for index in range(counts.pop()):
                for parity in range(QUOTIENT_HOSTS):
                    members = [by_host[host][index] for host in range(parity, hosts, 2)]
                    nbytes = members[0].nbytes
                    if any(abs(f.nbytes - nbytes) > self._tolerance * max(f.nbytes, nbytes)
                           for f in members):
                        return None
                    orbits.append(((parity, (parity + step) % 2, nbytes, tag),
                                   [f.flow_id for f in members]))
        self._step.update(steps)
        return orbits
