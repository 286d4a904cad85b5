"""Simulate a GPU cluster running a PyTorch training script or NCCL collectives, from a scenario.

``phantora-ns3 SCENARIO.yaml [--out DIR]`` and its subcommands; the first line above opens
``--help`` (:func:`main`). For developers, this module is the composition root: the one place
that wires the scenario, the topology, the network backend, the engine and the reports
together.

A scenario with a ``sweep:`` block runs every point (:mod:`phantora.study`, each point in
its own process: :mod:`.point`); subcommands ``replay`` and ``export-chakra`` work on a
recorded run (:mod:`.commands`, :mod:`.replay`).

Load and validate the scenario, build the topology and the network backend (:mod:`.build`),
run the workload (a collectives sweep, or a live training script), write
``DIR/summary.json`` (and for scripts ``DIR/trace.json`` and ``DIR/ranks/rank<N>.log``) and
print a table. Errors phantora raises on purpose are printed as one clear message (exit 2 for
a bad scenario, 1 otherwise), never a traceback.
"""

import argparse
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from phantora.cli.build import build_topology, link_failures, make_backend, nccl_config
from phantora.cli.commands import SUBCOMMANDS, run_subcommand
from phantora.cluster.catalogue import GpuSpec, lookup_gpu
from phantora.cluster.topology import Topology
from phantora.collectives import CollectiveRequest, FlowSpec, NcclConfig, SystemInfo
from phantora.engine.lone_collective import run_collective
from phantora.errors import PhantoraError, ScenarioError
from phantora.network.base import LinkFailure, NetworkBackend
from phantora.report.bandwidth import collective_result
from phantora.report.console import (attribution_table, collectives_table, coverage_line,
                                     fabric_line, host_line, hot_ports_table, ranks_table,
                                     with_progress)
from phantora.report.faults import FlowBytes, fault_lines, fault_rows
from phantora.report.out_dir import clear_run
from phantora.report.summary import CollectiveResult, Summary
from phantora.scenario import (
    CollectivesWorkload,
    Scenario,
    ScriptWorkload,
    load_scenario,
)

if TYPE_CHECKING:
    from phantora.record.script_runner import ScriptRun


def run_scenario(scenario: Scenario, out_dir: Path, console: Console,
                 replay_of: Path | None = None) -> Summary:
    """Simulate ``scenario`` and write ``out_dir/summary.json`` (and the trace for scripts);
    with ``replay_of``, replay that run's recorded execution graph on the scenario's cluster
    instead of running the script (:mod:`phantora.record.replay`)."""
    wall_start = time.perf_counter()
    cluster = scenario.cluster
    topology = build_topology(cluster, scenario.faults)
    failures = link_failures(scenario, topology)
    gpu = lookup_gpu(cluster.gpu)
    backend = make_backend(topology, cluster.network, scenario.seed, failures)
    setup_s = time.perf_counter() - wall_start
    summary = Summary(scenario=scenario.echo(), workload=scenario.workload.kind)
    flows: Sequence[FlowBytes] = ()
    scaled_kernel_ns: dict[int, int] = {}
    try:
        if replay_of is not None:
            from phantora.cli.replay import replay_run
            result = replay_run(replay_of, scenario, summary, topology, gpu, backend, out_dir)
            flows, scaled_kernel_ns = result.flows, result.scaled_kernel_ns
        elif isinstance(scenario.workload, CollectivesWorkload):
            flows = _sweep(scenario.workload, summary, topology, gpu, nccl_config(scenario.nccl),
                           backend, console)
        else:
            run = _script(scenario.workload, scenario, summary, topology, gpu, backend,
                          failures, out_dir, console)
            backend = run.backend
            flows, scaled_kernel_ns = run.result.flows, run.result.scaled_kernel_ns
        summary.network = asdict(backend.stats())
        summary.faults = fault_rows(scenario.faults, topology, flows, scaled_kernel_ns,
                                    summary.network["extra"])
        summary.simulated_ns = summary.simulated_ns or backend.now_ns()
    finally:
        backend.close()
    summary.wall_seconds = {"setup": round(setup_s, 3),
                            "total": round(time.perf_counter() - wall_start, 3)}
    summary.write(out_dir / "summary.json")
    return summary


def _sweep(workload: CollectivesWorkload, summary: Summary, topology: Topology, gpu: GpuSpec,
           config: NcclConfig, backend: NetworkBackend, console: Console) -> list[FlowSpec]:
    """Run every collective of the sweep; the flows they ran."""
    system = SystemInfo.from_topology(topology, gpu)
    points = [(op, nbytes) for op in workload.ops for nbytes in workload.sizes_bytes]
    flows: list[FlowSpec] = []

    def row(op: str, nbytes: int) -> CollectiveResult:
        request = CollectiveRequest.make(op, workload.ranks, nbytes, workload.dtype_bytes)
        dag, time_ns = run_collective(request, system, config, backend)
        flows.extend(dag.flows)
        return collective_result(request, dag, time_ns)

    summary.collectives = [
        row(op, nbytes) for op, nbytes in with_progress(points, len(points), "simulating", console)]
    return flows


def _script(workload: ScriptWorkload, scenario: Scenario, summary: Summary, topology: Topology,
            gpu: GpuSpec, backend: NetworkBackend, failures: Sequence[LinkFailure],
            out_dir: Path, console: Console) -> "ScriptRun":
    """Run the script; its result, and the backend it ran on (another after a regroup)."""
    # Imported here: only script workloads need the launcher (and, in the ranks, torch).
    from launch.spec import HostChoice
    from phantora.calibration.host_profile import resolve_host
    from phantora.record.script_runner import run_script
    from phantora.report.live_summary import fill_live_summary
    from phantora.report.trace import write_trace

    run = run_script(
        workload, scenario.simulation, topology, gpu, nccl_config(scenario.nccl), backend,
        out_dir, echo=lambda line: console.print(f"[dim]\\[rank0][/dim] {escape(line)}",
                                                 highlight=False, soft_wrap=True),
        seed=scenario.seed,
        new_backend=lambda: make_backend(topology, scenario.cluster.network, scenario.seed,
                                         failures),
        note=lambda line: console.print(escape(line), style="yellow", highlight=False),
        kernel_scale=scenario.kernel_scale(),
        calibration=Path(scenario.cluster.calibration) if scenario.cluster.calibration else None,
        host=HostChoice(scenario.cluster.host, scenario.cluster.host_speed,
                        scenario.cluster.cpus_per_host))
    attribution = fill_live_summary(summary, run.result, run.coverage, run.backend, topology)
    host = resolve_host(scenario.cluster.host, Path("/"))
    summary.host = host.at_speed(scenario.cluster.host_speed).summary()
    if run.regroups:
        summary.dedup["regroups"] = run.regroups
    write_trace(run.result, out_dir / "trace.json", attribution=attribution)
    return run


def main(argv: list[str] | None = None) -> int:
    """``phantora-ns3 SCENARIO.yaml ...`` or ``phantora-ns3 SUBCOMMAND ...``: the exit code.

    A first word that is neither a subcommand, an option nor a scenario file is an argparse
    error (exit 2) naming the subcommands, so ``phantora-ns3 sweep --help`` does not print the
    top-level help as if ``sweep`` were a scenario."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        return run_subcommand(argv[0], argv[1:], _console())
    parser = _parser()
    if argv and not argv[0].startswith("-"):
        _check_scenario_word(parser, argv[0])
    args = parser.parse_args(argv)
    _check_scenario_word(parser, str(args.scenario))
    console = _console()
    try:
        from phantora.study.sweep import load_sweep
        sweep = load_sweep(args.scenario)
        if sweep is not None:
            from phantora.study.run import run_sweep
            return run_sweep(sweep, args.out, console, "phantora.cli.point",
                             address=args.address)
        scenario = load_scenario(args.scenario)
    except PhantoraError as error:
        return report_error(error, console)
    return simulate(scenario, args.out or Path("out") / scenario.name, console)


def _parser() -> argparse.ArgumentParser:
    usage = "\n".join(
        ["phantora-ns3 SCENARIO.yaml [--out DIR] [--address ADDRESS]"]
        + [f"       phantora-ns3 {name} {arguments}"
           for name, (arguments, _) in SUBCOMMANDS.items()])
    rows = {"SCENARIO.yaml": "simulate the scenario (its collectives, or its live training "
                             "script); a scenario with a sweep: block runs every point of the "
                             "sweep (on Ray when installed: locally, or on the cluster at "
                             "--address)",
            **{name: summary for name, (_, summary) in SUBCOMMANDS.items()}}
    commands = "\n".join(
        ["commands:"]
        + [textwrap.fill(summary, width=88, initial_indent=f"  {name:<15}",
                         subsequent_indent=" " * 17) for name, summary in rows.items()]
        + ["", "phantora-ns3 SUBCOMMAND --help prints that subcommand's own help."])
    parser = argparse.ArgumentParser(
        prog="phantora-ns3", usage=usage, description=__doc__.splitlines()[0], epilog=commands,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", type=Path, metavar="SCENARIO.yaml", help="scenario YAML file")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output folder (default: out/<scenario name>, for a sweep "
                             "out/<scenario name>-sweep)")
    parser.add_argument("--address", default=None,
                        help="sweeps: an existing Ray cluster's address (default: a local Ray)")
    return parser


def _check_scenario_word(parser: argparse.ArgumentParser, word: str) -> None:
    """Exit with an argparse error where ``word`` is neither a YAML file name nor a file."""
    if Path(word).suffix.lower() in (".yaml", ".yml") or Path(word).is_file():
        return
    hint = ("; to run a sweep, give a scenario with a sweep: block (phantora-ns3 SCENARIO.yaml)"
            if word == "sweep" else "")
    parser.error(f"{word!r} is neither a subcommand ({', '.join(SUBCOMMANDS)}) nor a scenario "
                 f"YAML file{hint}")


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=120)  # whole rows in logs


def report_error(error: PhantoraError, console: Console) -> int:
    """One line for a deliberate error; exit 2 for bad inputs, 1 otherwise."""
    console.print(f"[red]error:[/red] {escape(str(error))}", highlight=False)
    return 2 if isinstance(error, ScenarioError) else 1


def simulate(scenario: Scenario, out_dir: Path, console: Console,
             replay_of: Path | None = None) -> int:
    """Run (or replay) ``scenario`` into ``out_dir`` (an earlier run's outputs there are
    removed first), print its tables; the process exit code."""
    try:
        clear_run(out_dir, reads=replay_of)
        summary = run_scenario(scenario, out_dir, console, replay_of)
    except PhantoraError as error:
        return report_error(error, console)
    except KeyboardInterrupt:
        console.print("interrupted: every rank stopped")
        return 130
    if summary.ranks:
        console.print(ranks_table(summary.ranks, title=f"{scenario.name}: ranks"))
        if summary.compute_coverage:  # none for an imported trace
            console.print(coverage_line(summary.compute_coverage), highlight=False)
        if summary.host:
            console.print(host_line(summary.host), highlight=False)
    if summary.collectives:
        console.print(collectives_table(summary.collectives, title=scenario.name))
    steps = attribution_table(summary.attribution, title=scenario.name)
    if steps is not None:
        console.print(steps)
    for fabric in (fabric_line(summary.network), hot_ports_table(summary.network)):
        if fabric is not None:
            console.print(fabric, highlight=False)
    for line in fault_lines(summary.faults):
        console.print(line, highlight=False)
    if summary.replay and summary.replay["difference_pct"] is not None:
        console.print(f"replay: {summary.simulated_ns / 1e6:.3f} ms simulated, live "
                      f"{summary.replay['live_simulated_ns'] / 1e6:.3f} ms "
                      f"({summary.replay['difference_pct']:+.2f}%)", highlight=False)
    console.print(f"simulated in {summary.wall_seconds['total']:.2f} s wall; "
                  f"wrote {out_dir / 'summary.json'}")
    return 0
