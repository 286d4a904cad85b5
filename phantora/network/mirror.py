"""Rail mirroring: rails that carry the same flows are simulated once (:class:`RailMirrorBackend`).

On a fabric of rails (:mod:`phantora.network.rails`) whose flows all stay on their rail, the
rails are separate networks. Rails are grouped in *classes*; each class simulates its lowest
rail (its *representative*) in the wrapped backend, and the other rails' flows (*mirrors*) are
not simulated: each completes when its representative's twin does. A mirror's twin is the
representative's flow between the same two hosts, starting at the same instant, with the same
size (within ``size_tolerance``), on the queue pair the mirror's queue pair always maps to.

Whether a class still agrees is decided at each instant ``s`` at which flows start, once no
more flows can start then (the engine may add flows at ``s`` until the clock passes ``s``):
the wrapped backend is never run past an undecided instant, so no completion reported to the
engine can depend on a decision still open. At ``s``, a class whose rails start flows that do
not all match splits: the rails that differ get their own class, which needs its
representative's history. ns-3 cannot copy a rail's state, so the network is *restarted*: a
fresh wrapped backend is given every recorded flow of the now simulated rails, at the instants
the engine gave them, and run back to the present; completions it finds are checked against
those already reported. A flow between two rails makes every rail a class of its own (*full*):
the same restart, then no more mirroring.

Exact mode (``approximate=False``): a mirror's completion is its own rail's, bit for bit,
except where a switch's random ECN marking draws (queues between ``ecn_kmin`` and
``ecn_kmax``): each switch has its own random stream, so congested rails differ in which
packets are marked, not in how many are on average.

Approximate mode also mirrors flows whose sizes differ from their twins' by up to
:data:`APPROXIMATE_SIZE_TOLERANCE` (NCCL splits a buffer over channels unevenly by a few
hundred bytes; a mirror then ends with its twin, off by that share of its transfer at most),
and keeps a class whole when flows start on its representative alone (NCCL's small
collectives on one channel) while it carries no mirrored flow: these *solo* flows leave a
NIC's round-robin pointer where the other rails' is not, and they hold no mirrored flow up,
as long as no mirrored flow starts on that rail before they end (else the class splits).

With :func:`rail_mirrored`, approximate mode also simulates each rail's rings on two of its
hosts (:mod:`phantora.network.host_ring`); where a rail's flows stop being rings while it
carries some, every host is simulated from then on (a restart).

Counters of packets, marks and pauses are the simulated ones scaled by the bytes of all flows
over the bytes simulated.
"""

import heapq
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from phantora.cluster.topology import Topology
from phantora.network.base import FlowDone, FlowId, GpuId, NetworkBackend, NetworkStats
from phantora.network.host_ring import HostRingBackend, RingBroken
from phantora.network.rails import Rails, find_rails
from phantora.network.scaled import scaled

SUMMED_OVER_RESTARTS = frozenset({"events", "setup_cpu_s", "run_cpu_s"})
"""Costs of the wrapped backend that restarts discard but that were spent all the same."""


@dataclass(frozen=True, slots=True)
class _Add:
    """One ``add_flow`` call as the engine made it: replayed by a restart."""

    at_ns: int
    src: GpuId
    dst: GpuId
    nbytes: int
    start_ns: int
    tag: int


class RailMirrorBackend:
    """A :class:`~phantora.network.base.NetworkBackend` that simulates one rail per class of
    rails with the same flows, in a backend ``make_inner()`` builds (one at a time: a restart
    closes the old one first)."""

    def __init__(self, rails: Rails | None, make_inner: Callable[[], NetworkBackend],
                 approximate: bool = False, no_rails: str = "",
                 make_plain: Callable[[], NetworkBackend] | None = None) -> None:
        """``rails``: ``None`` simulates every flow from the start, ``no_rails`` saying why.
        ``make_plain``: where ``make_inner`` builds a :class:`HostRingBackend`, the backend it
        wraps, for when the rings break (every host simulated from then on)."""
        self._rails = rails if rails is not None else Rails(0, (), ())
        self._make_inner = make_inner
        self._plain = make_plain
        self._ring_broken = ""
        self._approximate = approximate
        self._tolerance = APPROXIMATE_SIZE_TOLERANCE if approximate else 0.0
        self._inner = make_inner()
        self._rep_of = [0] * self._rails.count
        """Class representative of each rail."""
        self._full = rails is None
        """Every rail simulated, no more mirroring."""
        self._log: list[_Add] = []
        """Every flow by id, while mirroring."""
        self._next_id: FlowId = 0
        self._ids: dict[FlowId, FlowId] = {}
        """Wrapped backend's flow id -> ours."""
        self._reported: dict[FlowId, int] = {}
        """End of every flow reported complete while mirroring (a restart checks them)."""
        self._mirrors: dict[FlowId, dict[int, FlowId]] = {}
        """Pending representative flow -> its mirror on each other rail of its class."""
        self._solo: dict[int, set[FlowId]] = defaultdict(set)
        """Pending solo flows by rail."""
        self._mirrored_pending: dict[int, int] = defaultdict(int)
        """Pending representative flows with mirrors, by rail."""
        self._qp_map: dict[int, dict[tuple[int, int, int], tuple[int, int, int]]] = \
            defaultdict(dict)
        """Per mirrored rail: its queue pair (src host, dst host, tag) -> its representative's."""
        self._instants: list[int] = []
        self._starting: dict[int, list[FlowId]] = {}
        """Undecided instant -> the flows starting then."""
        self._overdue: list[FlowDone] = []
        self._bytes = 0
        self._simulated_bytes = 0
        self._connections: set[tuple[GpuId, GpuId, int]] = set()
        """Every (src, dst, tag): a queue pair (RoCE) or connection (DCTCP) each."""
        self._counts = {"mirrored": 0, "solo": 0, "restarts": 0, "divergent": 0}
        self._max_divergence_ns = 0
        self._discarded: dict[str, float] = defaultdict(float)
        self._restart_cpu_s = 0.0
        self._fallback = no_rails
        self._splits: list[str] = []

    # -- NetworkBackend -------------------------------------------------------------------
    def add_flow(self, src: GpuId, dst: GpuId, nbytes: int, start_ns: int, tag: int = 0) -> FlowId:
        self._bytes += nbytes
        self._connections.add((src, dst, tag))
        flow_id = self._next_id
        self._next_id += 1
        if self._full:
            self._inject(src, dst, nbytes, start_ns, tag, flow_id)
            return flow_id
        self._log.append(_Add(self.now_ns(), src, dst, nbytes, start_ns, tag))
        if not self._rails.local(src, dst):
            self._restart(None, f"GPU {src} -> GPU {dst} at {start_ns} ns crosses rails")
            return flow_id
        rail = self._rails.rail_of[src]
        if self._rep_of[rail] == rail:
            self._inject(src, dst, nbytes, start_ns, tag, flow_id)
        if start_ns not in self._starting:
            self._starting[start_ns] = []
            heapq.heappush(self._instants, start_ns)
        self._starting[start_ns].append(flow_id)
        return flow_id

    def now_ns(self) -> int:
        return self._inner.now_ns()

    def next_event_ns(self) -> int | None:
        if self._overdue:
            return self.now_ns()
        return self._inner.next_event_ns()

    def advance_to(self, t_ns: int) -> list[FlowDone]:
        while True:
            if self._overdue:
                done, self._overdue = self._overdue, []
                return done
            instant = self._instants[0] if self._instants and not self._full else None
            target = t_ns if instant is None else min(t_ns, instant)
            try:
                done = self._completed(self._inner.advance_to(target))
            except RingBroken as broken:
                self._unring(str(broken))
                self._restart(self._rep_of if not self._full else None, self._fallback)
                continue
            if done:
                return done
            if instant is None or instant >= t_ns:
                return []
            heapq.heappop(self._instants)
            self._decide(instant, self._starting.pop(instant))

    def stats(self) -> NetworkStats:
        inner = self._inner.stats()
        scale = self._bytes / self._simulated_bytes if self._simulated_bytes else 1.0
        extra = scaled(inner.extra, scale)
        for key in ("queue_pairs", "connections"):  # counted, not scaled
            if key in extra:
                extra[key] = len(self._connections)
        for key, value in inner.extra.items():
            if key in SUMMED_OVER_RESTARTS and isinstance(value, int | float):
                total = value + self._discarded[key]
                extra[key] = round(total) if isinstance(value, int) else round(total, 3)
        extra.update({
            "symmetry": "full" if self._full else "mirrored",
            "symmetry.rails": self._rails.count,
            "symmetry.rails_simulated": len(set(self._rep_of)),
            "symmetry.flows_mirrored": self._counts["mirrored"],
            "symmetry.flows_solo": self._counts["solo"],
            "symmetry.bytes_simulated_share": round(1 / scale, 6),
            "symmetry.restarts": self._counts["restarts"],
            "symmetry.restart_cpu_s": round(self._restart_cpu_s, 3),
            "symmetry.restart_divergent_flows": self._counts["divergent"],
            "symmetry.restart_max_divergence_ns": self._max_divergence_ns,
            "symmetry.fallback": self._fallback,
            "symmetry.rings_broken": self._ring_broken,
            "symmetry.splits": "; ".join(self._splits),
        })
        return NetworkStats(backend=inner.backend, flows=self._next_id, bytes=self._bytes,
                            extra=extra, hot_ports=inner.hot_ports)

    def close(self) -> None:
        self._inner.close()

    # -- internals ------------------------------------------------------------------------
    def _inject(self, src: GpuId, dst: GpuId, nbytes: int, start_ns: int, tag: int,
                flow_id: FlowId) -> None:
        self._ids[self._inner.add_flow(src, dst, nbytes, start_ns, tag)] = flow_id
        self._simulated_bytes += nbytes

    def _completed(self, done: list[FlowDone]) -> list[FlowDone]:
        """Our completions for the wrapped backend's: each representative's mirrors with it."""
        out: list[FlowDone] = []
        for flow in done:
            flow_id = self._ids.pop(flow.flow_id)
            if flow_id in self._reported:
                self._diverged(flow_id, flow.end_ns)
                continue
            out.append(FlowDone(flow_id, flow.end_ns))
            if self._full:
                continue
            self._reported[flow_id] = flow.end_ns
            rail = self._rails.rail_of[self._log[flow_id].src]
            self._solo[rail].discard(flow_id)
            mirrors = self._mirrors.pop(flow_id, None)
            if mirrors:
                self._mirrored_pending[rail] -= 1
                for mirror in mirrors.values():
                    self._reported[mirror] = flow.end_ns
                    out.append(FlowDone(mirror, flow.end_ns))
        return out

    def _diverged(self, flow_id: FlowId, end_ns: int) -> None:
        self._counts["divergent"] += 1
        self._max_divergence_ns = max(self._max_divergence_ns,
                                      abs(end_ns - self._reported[flow_id]))

    def _qp(self, flow_id: FlowId) -> tuple[int, int, int]:
        add = self._log[flow_id]
        return self._rails.host_of[add.src], self._rails.host_of[add.dst], add.tag

    def _decide(self, instant: int, flows: list[FlowId]) -> None:
        """Match the flows starting at ``instant`` class by class; split the first class whose
        rails differ and decide again, else attach every mirror."""
        by_rail: dict[int, list[FlowId]] = defaultdict(list)
        for flow_id in flows:
            by_rail[self._rails.rail_of[self._log[flow_id].src]].append(flow_id)
        classes: dict[int, list[int]] = defaultdict(list)
        for rail, rep in enumerate(self._rep_of):
            classes[rep].append(rail)
        plans: list[tuple[int, list[FlowId], dict[int, list[tuple[FlowId, FlowId]]] | None]] = []
        for rep, members in classes.items():
            others = [rail for rail in members if rail != rep]
            reps = by_rail.get(rep, [])
            if not others or (not reps and not any(by_rail.get(r) for r in others)):
                continue
            differ, matches = self._plan(rep, others, reps, by_rail)
            if differ:
                self._split(rep, differ, by_rail, instant)
                self._decide(instant, flows)
                return
            plans.append((rep, reps, matches))
        for rep, reps, matches in plans:
            self._commit(rep, reps, matches)

    def _plan(self, rep: int, others: list[int], reps: list[FlowId],
              by_rail: dict[int, list[FlowId]]
              ) -> tuple[list[int], dict[int, list[tuple[FlowId, FlowId]]] | None]:
        """The rails of ``rep``'s class whose flows do not mirror ``rep``'s, and otherwise
        each rail's (representative flow, mirror) pairs; ``None`` pairs for solo flows. Flows
        on ``rep`` alone that may not run solo, and mirrored flows while solo ones run, split
        off every rail but ``rep``."""
        if reps and not any(by_rail.get(rail) for rail in others):
            alone = self._approximate and not self._mirrored_pending[rep]
            return ([] if alone else others), None
        if self._solo[rep]:
            return others, {}
        matches: dict[int, list[tuple[FlowId, FlowId]]] = {}
        differ = []
        for rail in others:
            pairs = self._match(rail, reps, by_rail.get(rail, []))
            if pairs is None:
                differ.append(rail)
            else:
                matches[rail] = pairs
        return differ, matches

    def _commit(self, rep: int, reps: list[FlowId],
                matches: dict[int, list[tuple[FlowId, FlowId]]] | None) -> None:
        if matches is None:
            self._solo[rep].update(reps)
            self._counts["solo"] += len(reps)
            return
        for rail, pairs in matches.items():
            qp_map = self._qp_map[rail]
            for rep_flow, mirror in pairs:
                qp_map[self._qp(mirror)] = self._qp(rep_flow)
                self._mirrors.setdefault(rep_flow, {})[rail] = mirror
            self._counts["mirrored"] += len(pairs)
        self._mirrored_pending[rep] += len(reps)

    def _match(self, rail: int, reps: list[FlowId],
               mine: list[FlowId]) -> list[tuple[FlowId, FlowId]] | None:
        """Pairs (representative flow, this rail's flow), or ``None`` when they differ."""
        if len(mine) != len(reps):
            return None
        qp_map = self._qp_map[rail]
        taken = set(qp_map.values())
        free: dict[tuple[int, int], list[FlowId]] = defaultdict(list)
        for flow_id in reps:
            free[self._qp(flow_id)[:2]].append(flow_id)
        pairs = []
        new: dict[tuple[int, int, int], tuple[int, int, int]] = {}
        for flow_id in mine:
            qp = self._qp(flow_id)
            want = qp_map.get(qp, new.get(qp))
            nbytes = self._log[flow_id].nbytes
            for index, rep_flow in enumerate(free[qp[:2]]):
                rep_qp = self._qp(rep_flow)
                if rep_qp != want if want is not None else rep_qp in taken:
                    continue
                rep_bytes = self._log[rep_flow].nbytes
                if abs(rep_bytes - nbytes) > self._tolerance * max(rep_bytes, nbytes):
                    continue
                if want is None:
                    new[qp] = rep_qp
                    taken.add(rep_qp)
                pairs.append((rep_flow, flow_id))
                del free[qp[:2]][index]
                break
            else:
                return None
        return pairs

    def _split(self, rep: int, differ: list[int], by_rail: dict[int, list[FlowId]],
               instant: int) -> None:
        """Give the rails in ``differ`` classes of their own (rails with the same flows at
        ``instant`` together), then restart with their representatives simulated."""
        groups: dict[tuple[tuple[int, int, int], ...], list[int]] = defaultdict(list)
        for rail in differ:
            groups[tuple(sorted((*self._qp(f)[:2], self._log[f].nbytes)
                                for f in by_rail.get(rail, [])))].append(rail)
        rep_of = list(self._rep_of)
        for rails in groups.values():
            for rail in rails:
                rep_of[rail] = min(rails)
        self._splits.append(f"rails {sorted(differ)} left rail {rep}'s class at {instant} ns")
        self._restart(rep_of, "")

    def _restart(self, rep_of: list[int] | None, fallback: str) -> None:
        """Re-simulate every logged flow of the rails simulated under ``rep_of`` (``None``:
        all, and no more mirroring) up to now in a fresh wrapped backend."""
        cpu_start = time.process_time()
        now = self.now_ns()
        if rep_of is None:
            self._unring("flows cross rails")
        old_rep_of, self._rep_of = self._rep_of, rep_of if rep_of is not None else \
            list(range(self._rails.count))
        while True:
            try:
                self._replay(now)
                break
            except RingBroken as broken:
                self._unring(str(broken))
        if rep_of is None:
            self._full, self._fallback = True, fallback
            self._mirrors.clear()
            self._instants.clear()
            self._starting.clear()
        else:
            self._regroup(old_rep_of)
        self._restart_cpu_s += time.process_time() - cpu_start

    def _replay(self, now: int) -> None:
        """A fresh wrapped backend given every logged flow of the simulated rails, run to
        ``now``."""
        for key, value in self._inner.stats().extra.items():
            if key in SUMMED_OVER_RESTARTS and isinstance(value, int | float):
                self._discarded[key] += value
        self._inner.close()
        self._inner = self._make_inner()
        self._counts["restarts"] += 1
        self._ids, self._simulated_bytes = {}, 0
        for flow_id, add in enumerate(self._log):
            rail = self._rails.rail_of[add.src]
            if self._rep_of[rail] == rail or not self._rails.local(add.src, add.dst):
                self._run_to(add.at_ns)
                self._inject(add.src, add.dst, add.nbytes, add.start_ns, add.tag, flow_id)
        self._run_to(now)

    def _unring(self, why: str) -> None:
        """Simulate every host of a rail from the next wrapped backend on."""
        if self._plain is not None:
            self._make_inner, self._plain = self._plain, None
            self._ring_broken = why

    def _run_to(self, t_ns: int) -> None:
        """Advance the fresh wrapped backend, checking what completes against the reports;
        a flow that completes now but was never reported is reported next."""
        while self._inner.now_ns() < t_ns:
            for flow in self._inner.advance_to(t_ns):
                flow_id = self._ids.pop(flow.flow_id)
                if flow_id in self._reported:
                    if self._reported[flow_id] != flow.end_ns:
                        self._diverged(flow_id, flow.end_ns)
                    continue
                self._counts["divergent"] += 1
                self._overdue.append(FlowDone(flow_id, t_ns))
                self._reported[flow_id] = t_ns

    def _regroup(self, old_rep_of: list[int]) -> None:
        """Move pending mirrors whose rail is now simulated (or mirrors a new representative)
        from their old representative's flow to the new one's."""
        for rep_flow in list(self._mirrors):
            mirrors = self._mirrors[rep_flow]
            for rail in [r for r in mirrors if self._rep_of[r] == r]:
                twin = mirrors.pop(rail)
                moved = {r: mirrors.pop(r) for r in list(mirrors) if self._rep_of[r] == rail}
                if moved:
                    self._mirrors[twin] = moved
            if not mirrors:
                del self._mirrors[rep_flow]
        self._mirrored_pending.clear()
        for rep_flow in self._mirrors:
            self._mirrored_pending[self._rails.rail_of[self._log[rep_flow].src]] += 1
        for rail, rep in enumerate(self._rep_of):
            if rep != rail and rep != old_rep_of[rail]:  # now mirrors a new representative
                to_new = {old_qp: new_qp for new_qp, old_qp in self._qp_map[rep].items()}
                self._qp_map[rail] = {qp: to_new[old_qp] for qp, old_qp
                                      in self._qp_map[rail].items() if old_qp in to_new}
        for rail, rep in enumerate(self._rep_of):
            if rep == rail:
                self._qp_map.pop(rail, None)


APPROXIMATE_SIZE_TOLERANCE = 1e-3
"""``symmetry: approximate``: mirrors may differ from their twins by this share of bytes."""


def rail_mirrored(topology: Topology, make_inner: Callable[[], NetworkBackend],
                  symmetry: str) -> NetworkBackend:
    """The fabric backend for ``cluster.network.symmetry``: ``make_inner()`` itself when
    ``off``, else mirrored over the topology's rails (every flow simulated if it has none)."""
    if symmetry == "off":
        return make_inner()
    rails, why = find_rails(topology)
    if symmetry == "approximate" and rails is not None and rails.alike_hosts and \
            topology.hosts % 2 == 0:
        return RailMirrorBackend(
            rails, lambda: HostRingBackend(rails, make_inner, APPROXIMATE_SIZE_TOLERANCE), True,
            why, make_plain=make_inner)
    return RailMirrorBackend(rails, make_inner, symmetry == "approximate", why)
