"""A collectives workload (:func:`run_collectives`): every (op, size) of the workload planned
as NCCL would run it and simulated on its own on the network, one ``summary.json`` row each."""

from rich.console import Console

from phantora.collectives import CollectiveRequest, FlowSpec
from phantora.engine.lone_collective import run_collective
from phantora.network.base import NetworkBackend
from phantora.report.bandwidth import collective_result
from phantora.report.console import with_progress
from phantora.report.summary import CollectiveResult, Summary
from phantora.run.assemble import Assembly
from phantora.scenario import CollectivesWorkload


def run_collectives(workload: CollectivesWorkload, assembly: Assembly, backend: NetworkBackend,
                    summary: Summary, console: Console) -> list[FlowSpec]:
    """Run every collective of the workload into ``summary.collectives`` (a progress bar on
    ``console``); the flows they ran."""
    points = [(op, nbytes) for op in workload.ops for nbytes in workload.sizes_bytes]
    flows: list[FlowSpec] = []

    def row(op: str, nbytes: int) -> CollectiveResult:
        request = CollectiveRequest.make(op, workload.ranks, nbytes, workload.dtype_bytes)
        dag, time_ns = run_collective(request, assembly.system, assembly.nccl, backend)
        flows.extend(dag.flows)
        return collective_result(request, dag, time_ns)

    summary.collectives = [
        row(op, nbytes) for op, nbytes in with_progress(points, len(points), "simulating", console)]
    return flows
