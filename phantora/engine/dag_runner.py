"""Runs a planned collective (a :class:`FlowDag`) on a network backend.

A flow is handed to the backend as soon as its dependencies have completed, with its start
time set to ``max(dep end) + delay_ns`` (or ``start_ns + delay_ns`` without deps), so the
backend always knows every flow that can start before the next completion: the engine never
injects into the backend's past. Zero-byte flows are pure synchronisation points and complete
at their start time without touching the network.
"""

import heapq

from phantora.collectives.dag import FlowDag
from phantora.errors import SimulationError
from phantora.network.base import FlowId, NetworkBackend

_FOREVER_NS = 2**62


def run_dag(dag: FlowDag, backend: NetworkBackend, start_ns: int) -> int:
    """Simulate ``dag`` starting at ``start_ns``; return the collective's end time in ns."""
    if start_ns < backend.now_ns():
        raise SimulationError(f"collective starts at {start_ns} ns, before the network clock "
                              f"({backend.now_ns()} ns)")
    flows = dag.flows
    waiting_on = [len(flow.deps) for flow in flows]
    dependents: list[list[int]] = [[] for _ in flows]
    for index, flow in enumerate(flows):
        for dep in flow.deps:
            if dep >= index:
                raise SimulationError(f"flow {index} depends on flow {dep}, which is not earlier")
            dependents[dep].append(index)
    ready_ns = [start_ns] * len(flows)
    in_network: dict[FlowId, int] = {}
    sync_points: list[tuple[int, int]] = []  # (end_ns, flow index) of zero-byte flows
    finished = 0
    last_end_ns = start_ns

    def release(index: int) -> None:
        flow = flows[index]
        begin_ns = ready_ns[index] + flow.delay_ns
        if flow.nbytes == 0:
            heapq.heappush(sync_points, (begin_ns, index))
        else:
            in_network[backend.add_flow(flow.src, flow.dst, flow.nbytes, begin_ns, flow.tag)] = index

    def complete(index: int, end_ns: int) -> None:
        nonlocal finished, last_end_ns
        finished += 1
        last_end_ns = max(last_end_ns, end_ns)
        for child in dependents[index]:
            ready_ns[child] = max(ready_ns[child], end_ns)
            waiting_on[child] -= 1
            if waiting_on[child] == 0:
                release(child)

    for index, count in enumerate(waiting_on):
        if count == 0:
            release(index)
    while finished < len(flows):
        limit_ns = sync_points[0][0] if sync_points else _FOREVER_NS
        if backend.next_event_ns() is None and not sync_points:
            raise SimulationError(f"flow DAG stalled: {len(flows) - finished} flows can never start "
                                  "(a dependency cycle or a backend that lost a flow)")
        # Runs to the first completion, or just moves the clock to the next sync point.
        for done in backend.advance_to(limit_ns):
            complete(in_network.pop(done.flow_id), done.end_ns)
        while sync_points and sync_points[0][0] <= backend.now_ns():
            end_ns, index = heapq.heappop(sync_points)
            complete(index, end_ns)
    return last_end_ns + dag.tail_ns
