"""One collective on its own: planned by the NCCL model and run to completion on a backend.

The collectives workload (nccl-tests style: every op at every size) calls it once per point,
back to back on the same backend, so connections and congestion state persist as in a real
benchmark loop. :mod:`phantora.report.bandwidth` turns each result into a row with nccl-tests'
bandwidth conventions.
"""

from phantora.collectives import CollectiveRequest, FlowDag, NcclConfig, SystemInfo, plan_collective
from phantora.engine.flow_scheduler import run_dag
from phantora.network.base import NetworkBackend


def run_collective(request: CollectiveRequest, system: SystemInfo, config: NcclConfig,
                   backend: NetworkBackend) -> tuple[FlowDag, int]:
    """Plan and simulate one collective starting at the backend's current time: its plan and
    its time in ns."""
    dag = plan_collective(request, system, config)
    start_ns = backend.now_ns()
    end_ns = run_dag(dag, backend, start_ns)
    # Leave the network clock at the collective's end (its tail is GPU-side latency).
    backend.advance_to(end_ns)
    return dag, end_ns - start_ns
