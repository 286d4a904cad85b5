"""A trivially predictable network backend for engine tests.

Every flow gets its own ``gbps`` (no sharing) and arrives ``latency_ns`` after it finished
sending, so expected times can be computed by hand.
"""

import heapq

from hwmodel.errors import BackendError
from phantora.network.base import FlowDone, FlowId, GpuId, NetworkStats


class FixedRateBackend:
    def __init__(self, gbps: float, latency_ns: int) -> None:
        self.gbps = gbps
        self.latency_ns = latency_ns
        self._now_ns = 0
        self._pending: list[tuple[int, FlowId]] = []
        self._next_id = 0
        self.injected: list[tuple[GpuId, GpuId, int, int, int]] = []

    def duration_ns(self, nbytes: int) -> int:
        return -(-nbytes * 8 // int(self.gbps)) + self.latency_ns

    def add_flow(self, src: GpuId, dst: GpuId, nbytes: int, start_ns: int, tag: int = 0) -> FlowId:
        if start_ns < self._now_ns:
            raise BackendError(f"flow starts at {start_ns} ns, before now ({self._now_ns} ns)")
        flow_id = self._next_id
        self._next_id += 1
        self.injected.append((src, dst, nbytes, start_ns, tag))
        heapq.heappush(self._pending, (start_ns + self.duration_ns(nbytes), flow_id))
        return flow_id

    def now_ns(self) -> int:
        return self._now_ns

    def next_event_ns(self) -> int | None:
        return self._pending[0][0] if self._pending else None

    def advance_to(self, t_ns: int) -> list[FlowDone]:
        if self._pending and self._pending[0][0] <= t_ns:
            end_ns = self._pending[0][0]
            done = []
            while self._pending and self._pending[0][0] == end_ns:
                done.append(FlowDone(heapq.heappop(self._pending)[1], end_ns))
            self._now_ns = end_ns
            return done
        self._now_ns = max(self._now_ns, t_ns)
        return []

    def stats(self) -> NetworkStats:
        return NetworkStats("fixed-rate", flows=self._next_id)

    def close(self) -> None:
        pass
