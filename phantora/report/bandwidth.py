"""nccl-tests' bandwidth conventions (algbw, busbw): a collective of the collectives workload
(:func:`phantora.engine.lone_collective.run_collective`) as its ``summary.json`` row, and the bus
factor that live runs' rows use too."""

from collections.abc import Callable

from phantora.collectives import CollectiveRequest, FlowDag
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


def collective_result(request: CollectiveRequest, dag: FlowDag, time_ns: int) -> CollectiveResult:
    """The row of one collective that took ``time_ns`` as planned by ``dag``."""
    seconds = time_ns * 1e-9
    algbw = request.nbytes / seconds / 1e9 if seconds > 0 else 0.0
    return CollectiveResult(op=request.op.value, bytes=request.nbytes, ranks=request.nranks,
                            time_us=time_ns / 1e3, algbw_gbs=algbw,
                            busbw_gbs=algbw * bus_factor(request.op.value, request.nranks),
                            algorithm=dag.algorithm, protocol=dag.protocol,
                            channels=dag.channels, flows=len(dag.flows))
