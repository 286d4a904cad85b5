"""The nccl-tests style workload: every op at every size, one after another, on one network.

Collectives run back to back on the same backend (connections and congestion state persist,
as in a real benchmark loop). Each is planned by the NCCL model, run by :func:`run_dag`, and
reported with nccl-tests' bandwidth conventions.
"""

from collections.abc import Callable

from phantora.collectives import CollectiveRequest, NcclConfig, SystemInfo, plan_collective
from phantora.engine.dag_runner import run_dag
from phantora.network.base import NetworkBackend
from phantora.report.summary import CollectiveResult

_BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
"""nccl-tests ``doc/PERFORMANCE.md``: busbw = algbw x factor, comparable to link speed."""


def bus_factor(op: str, nranks: int) -> float:
    """nccl-tests' factor for ``op``; 1 for ops it has none for (send/recv, barrier, ...)."""
    factor = _BUS_FACTOR.get(op)
    return factor(nranks) if factor is not None else 1.0


def run_collective(request: CollectiveRequest, system: SystemInfo, config: NcclConfig,
                   backend: NetworkBackend) -> CollectiveResult:
    """Plan and simulate one collective starting at the backend's current time."""
    dag = plan_collective(request, system, config)
    start_ns = backend.now_ns()
    end_ns = run_dag(dag, backend, start_ns)
    # Leave the network clock at the collective's end (its tail is GPU-side latency).
    backend.advance_to(end_ns)
    seconds = (end_ns - start_ns) * 1e-9
    algbw = request.nbytes / seconds / 1e9 if seconds > 0 else 0.0
    return CollectiveResult(op=request.op.value, bytes=request.nbytes, ranks=request.nranks,
                            time_us=(end_ns - start_ns) / 1e3, algbw_gbs=algbw,
                            busbw_gbs=algbw * bus_factor(request.op.value, request.nranks),
                            algorithm=dag.algorithm, protocol=dag.protocol,
                            channels=dag.channels, flows=len(dag.flows))
