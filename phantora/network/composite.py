"""One backend made of two: same-host flows to an NVLink model, cross-host flows to a fabric model.

Intra-host flows never enter the fabric and inter-host flows never cross an NVSwitch, so the
two parts share no resource and only their clocks must agree. ``advance_to`` steps both in
lockstep: the fabric backend (ns-3 or fluid) runs to the NVLink model's next event at most,
possibly stopping earlier at one of its own completions, then the NVLink model catches up
to exactly where the fabric stopped.
"""

from hwmodel.errors import BackendError
from phantora.cluster.topology import Topology
from phantora.network.base import FlowDone, FlowId, GpuId, NetworkBackend, NetworkStats


class CompositeBackend:
    """A :class:`~phantora.network.base.NetworkBackend` routing flows by host.

    ``intra`` gets same-host flows, ``inter`` cross-host ones; ``inter`` may be ``None`` for a
    single host. Flow ids are the composite's own, mapped to and from the parts' ids.
    """

    def __init__(self, topology: Topology, intra: NetworkBackend,
                 inter: NetworkBackend | None) -> None:
        if inter is not None and inter.now_ns() != intra.now_ns():
            raise BackendError(f"composite parts start at different times (intra "
                               f"{intra.now_ns()} ns, inter {inter.now_ns()} ns); give it two "
                               "fresh backends")
        self._topology = topology
        self._intra = intra
        self._inter = inter
        self._next_id = 0
        self._from_intra: dict[FlowId, FlowId] = {}
        self._from_inter: dict[FlowId, FlowId] = {}

    def add_flow(self, src: GpuId, dst: GpuId, nbytes: int, start_ns: int, tag: int = 0) -> FlowId:
        if self._topology.same_host(src, dst):
            self._from_intra[self._intra.add_flow(src, dst, nbytes, start_ns, tag)] = self._next_id
        elif self._inter is None:
            raise BackendError(f"cross-host flow GPU {src} -> GPU {dst} but the composite backend "
                               "has no inter-host part; give it one for a multi-host topology")
        else:
            self._from_inter[self._inter.add_flow(src, dst, nbytes, start_ns, tag)] = self._next_id
        self._next_id += 1
        return self._next_id - 1

    def now_ns(self) -> int:
        return self._intra.now_ns()

    def next_event_ns(self) -> int | None:
        candidates = [t for t in (self._intra.next_event_ns(),
                                  None if self._inter is None else self._inter.next_event_ns())
                      if t is not None]
        return min(candidates) if candidates else None

    def advance_to(self, t_ns: int) -> list[FlowDone]:
        """Step both parts to the same instant until ``t_ns`` or a completion in either."""
        if t_ns < self.now_ns():
            raise BackendError(f"advance_to({t_ns}) is before the backend's clock "
                               f"({self.now_ns()} ns); time never moves backwards")
        while True:
            intra_next = self._intra.next_event_ns()
            target = t_ns if intra_next is None else min(t_ns, intra_next)
            done: list[FlowDone] = []
            if self._inter is not None:
                done = self._renamed(self._inter.advance_to(target), self._from_inter)
                target = self._inter.now_ns()
            done += self._renamed(self._intra.advance_to(target), self._from_intra)
            if self._intra.now_ns() != target:
                raise BackendError(f"composite parts disagree on the clock: intra stopped at "
                                   f"{self._intra.now_ns()} ns, inter at {target} ns; the intra "
                                   "backend's next_event_ns() was not a lower bound")
            if done or target == t_ns:
                return sorted(done, key=lambda flow: flow.flow_id)

    def stats(self) -> NetworkStats:
        """Totals of both parts; their own counters under ``intra.`` and ``inter.`` prefixes."""
        parts = [("intra", self._intra.stats())]
        if self._inter is not None:
            parts.append(("inter", self._inter.stats()))
        return NetworkStats(
            backend="+".join(stats.backend for _, stats in parts),
            flows=sum(stats.flows for _, stats in parts),
            bytes=sum(stats.bytes for _, stats in parts),
            extra={f"{name}.{key}": value for name, stats in parts
                   for key, value in stats.extra.items()},
            hot_ports=[port for _, stats in parts for port in stats.hot_ports])

    def close(self) -> None:
        self._intra.close()
        if self._inter is not None:
            self._inter.close()

    @staticmethod
    def _renamed(done: list[FlowDone], ids: dict[FlowId, FlowId]) -> list[FlowDone]:
        return [FlowDone(ids.pop(flow.flow_id), flow.end_ns) for flow in done]
