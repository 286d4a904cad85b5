"""The run API: a simulation assembled from a resolved scenario and run (:func:`run_scenario`).

What the command line, the sweeps' points and the scripts call. :func:`run_scenario` is the
composition root: the one place that wires the scenario, the topology, the network backend,
the engine and the reports together. Each module does one job:

* :mod:`.assemble` - the cluster graph, the GPU, the NCCL config and the network backends
* :mod:`.collectives` - a collectives workload, each collective on its own
* :mod:`.live` - a training script, live
* :mod:`.replay` - a recorded run (or Chakra traces) on the scenario's cluster
* :mod:`.chakra` - a recorded run as Chakra traces for ASTRA-sim

Nothing here parses arguments or prints a result; the console only carries what a run shows as
it goes (the collectives' progress, rank 0's log, rank deduplication notes).
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from rich.console import Console

from phantora.network.progress import Progress, on_console
from phantora.report.faults import FlowBytes, fault_rows
from phantora.report.summary import Summary
from phantora.run.assemble import assemble
from phantora.run.collectives import run_collectives
from phantora.scenario import CollectivesWorkload, Scenario


def run_scenario(scenario: Scenario, out_dir: Path, console: Console,
                 replay_of: Path | None = None) -> Summary:
    """Simulate ``scenario`` and write ``out_dir/summary.json`` (and the trace for scripts);
    with ``replay_of``, replay that run's recorded execution graph on the scenario's cluster
    instead of running the script (:mod:`.replay`)."""
    with on_console(console) as progress:
        return _run(scenario, out_dir, console, replay_of, progress)


def _run(scenario: Scenario, out_dir: Path, console: Console, replay_of: Path | None,
         progress: Callable[[Progress], None]) -> Summary:
    wall_start = time.perf_counter()
    assembly = replace(assemble(scenario), progress=progress)
    backend = assembly.new_backend()
    setup_s = time.perf_counter() - wall_start
    summary = Summary(scenario=scenario.echo(), workload=scenario.workload.kind)
    flows: Sequence[FlowBytes] = ()
    scaled_kernel_ns: dict[int, int] = {}
    try:
        if replay_of is not None:
            from phantora.run.replay import replay_run
            result = replay_run(replay_of, scenario, assembly, backend, summary, out_dir)
            flows, scaled_kernel_ns = result.flows, result.scaled_kernel_ns
        elif isinstance(scenario.workload, CollectivesWorkload):
            flows = run_collectives(scenario.workload, assembly, backend, summary, console)
        else:
            # Imported here: only script workloads need the launcher (and, in the ranks, torch).
            from phantora.run.live import run_live
            run = run_live(scenario.workload, scenario, assembly, backend, summary, out_dir,
                           console)
            backend = run.backend
            flows, scaled_kernel_ns = run.result.flows, run.result.scaled_kernel_ns
        summary.network = asdict(backend.stats())
        summary.faults = fault_rows(scenario.faults, assembly.topology, flows, scaled_kernel_ns,
                                    summary.network["extra"])
        summary.simulated_ns = summary.simulated_ns or backend.now_ns()
    finally:
        backend.close()
    summary.wall_seconds = {"setup": round(setup_s, 3),
                            "total": round(time.perf_counter() - wall_start, 3)}
    summary.write(out_dir / "summary.json")
    return summary
