"""A training-script scenario, live (:func:`run_live`): launch the ranks, coordinate them, fill
the run's ``summary.json`` sections and write its trace.

The launcher (``launch.launcher``) forks the live ranks and owns their processes; the
:class:`~phantora.engine.live.LiveEngine` answers them, mirrors the deduplicated ones
(``phantora.engine.rank_classes``) and drives the network. A run whose rank classes prove
wrong (:class:`~hwmodel.errors.RegroupRanks`) starts again with what it learned, on a fresh
backend. Rank 0's log is echoed live to the console from a small thread (the engine's loop
never waits for it). The execution graph is recorded to ``out_dir/graph``
(:mod:`phantora.record.recorder`). Whatever happens - a crash, a deadlock, Ctrl-C - every rank
process is gone when this returns.
"""

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from hwmodel.measured.host_profile import resolve_host
from hwmodel.compute import Coverage
from hwmodel.errors import RegroupRanks
from launch.launcher import Launcher
from launch.program import Program
from launch.spec import HostChoice
from launch.value_policy import Routing, ValuePolicy
from phantora.cpu_affinity import pinned
from phantora.engine.live import LiveEngine
from phantora.engine.overlap import MEASURED_OVERLAP
from phantora.engine.rank_classes import RankClasses
from phantora.engine.results import LiveResult
from phantora.network.base import NetworkBackend
from phantora.record.recorder import tap, write_recording
from phantora.report.live_summary import fill_live_summary
from phantora.report.summary import Summary
from phantora.report.trace import write_trace
from phantora.run.assemble import Assembly, gpus_of_ranks
from phantora.scenario import Scenario, ScriptWorkload, SimulationConfig

REPRODUCIBLE_EPOCH_NS = 1_767_225_600 * 10**9
"""What ``time.time()`` reads at virtual time 0 in reproducible mode: 2026-01-01T00:00:00Z."""
_ECHO_PERIOD_S = 0.2

OUT_PLACEHOLDER = "{out}"
"""Stands for the run's output folder in a program's arguments."""


def program_of(workload: ScriptWorkload) -> Program:
    """What every rank runs: the workload's script or module, in its working folder."""
    return Program(script=None if workload.script is None else Path(workload.script),
                   module=workload.module,
                   workdir=None if workload.workdir is None else Path(workload.workdir))


@dataclass(frozen=True)
class ScriptRun:
    result: LiveResult
    coverage: Coverage
    backend: NetworkBackend
    """The network the result ran on (a fresh one after a regroup; the caller closes it)."""
    regroups: list[str]
    """Why the run started again with other rank classes."""


def run_live(workload: ScriptWorkload, scenario: Scenario, assembly: Assembly,
             backend: NetworkBackend, summary: Summary, out_dir: Path,
             console: Console) -> ScriptRun:
    """Run the script on ``backend``, fill ``summary``'s live sections (ranks, collectives,
    attribution, host, regroups) and write ``out_dir/trace.json``; the run, and the backend it
    ended on (another after a regroup). Raises DeadlockError / RankCrashed."""
    run = _run_script(
        workload, scenario.simulation, assembly, backend, out_dir,
        echo=lambda line: console.print(f"[dim]\\[rank0][/dim] {escape(line)}",
                                        highlight=False, soft_wrap=True),
        seed=scenario.seed,
        note=lambda line: console.print(escape(line), style="yellow", highlight=False),
        kernel_scale=scenario.kernel_scale(),
        calibration=Path(scenario.cluster.calibration) if scenario.cluster.calibration else None,
        host=HostChoice(scenario.cluster.host, scenario.cluster.host_speed,
                        scenario.cluster.cpus_per_host))
    attribution = fill_live_summary(summary, run.result, run.coverage, run.backend,
                                    assembly.topology)
    host = resolve_host(scenario.cluster.host, Path("/"))
    summary.host = host.at_speed(scenario.cluster.host_speed).summary()
    if run.regroups:
        summary.dedup["regroups"] = run.regroups
    write_trace(run.result, out_dir / "trace.json", attribution=attribution)
    return run


def _run_script(workload: ScriptWorkload, simulation: SimulationConfig, assembly: Assembly,
                backend: NetworkBackend, out_dir: Path, echo: Callable[[str], None], seed: int,
                note: Callable[[str], None], kernel_scale: Mapping[int, float],
                calibration: Path | None, host: HostChoice) -> ScriptRun:
    """Run the script on every rank to completion (``seed``: the value model's) and record its
    execution graph. A run that starts again (:class:`RegroupRanks`) closes ``backend`` and
    runs on ``assembly.new_backend()``. ``note`` tells the user about rank deduplication.
    ``kernel_scale``: rank -> factor on its kernels' durations (``slow_gpu`` faults); with any,
    every rank runs live (a mirror takes its representative's timeline). The recording keeps
    the kernels as the ranks costed them, unscaled. ``calibration``: the kernel calibration file
    the ranks cost kernels from; ``host`` the host profile and speed their host costs come
    from."""
    world = workload.world_size
    classes = RankClasses.choose(world) if simulation.dedup == "auto" else \
        RankClasses.all_live(world)
    if kernel_scale and classes.deduplicated:
        note(f"rank deduplication off: slow_gpu slows rank(s) "
             f"{', '.join(map(str, sorted(kernel_scale)))}, and a mirrored rank would take its "
             "representative's timeline; every rank runs live")
        classes = RankClasses.all_live(world)
    wrong: list[RankClasses] = []
    regroups: list[str] = []
    while True:
        if classes.deduplicated:
            note(f"rank deduplication: {classes.describe()}")
        try:
            result, coverage = _run_once(workload, simulation, assembly, backend, out_dir, echo,
                                         seed, classes, kernel_scale, calibration, host)
            return ScriptRun(result, coverage, backend, regroups)
        except RegroupRanks as regroup:
            if isinstance(regroup.wrong, RankClasses):
                wrong.append(regroup.wrong)
            classes = RankClasses.choose(world, regroup.groups, wrong)
            backend.close()
            backend = assembly.new_backend()
            regroups.append(regroup.reason)
            note(f"rank deduplication: {regroup.reason}; starting again with "
                 f"{classes.describe()}")


def _run_once(workload: ScriptWorkload, simulation: SimulationConfig, assembly: Assembly,
              backend: NetworkBackend, out_dir: Path, echo: Callable[[str], None], seed: int,
              classes: RankClasses, kernel_scale: Mapping[int, float],
              calibration: Path | None, host: HostChoice) -> tuple[LiveResult, Coverage]:
    topology, gpu = assembly.topology, assembly.gpu
    coverage = Coverage(gpu, calibration)
    args = [arg.replace(OUT_PLACEHOLDER, str(out_dir)) for arg in workload.args]
    launcher = Launcher(program_of(workload), args, workload.env, workload.world_size,
                        workload.nproc_per_node, gpu, out_dir,
                        gpus_per_host=topology.gpus_per_host,
                        epoch_ns=REPRODUCIBLE_EPOCH_NS if simulation.reproducible else None,
                        op_cost_ns=simulation.cpu_time_per_op_ns if simulation.reproducible
                        else None,
                        host_cpu=None if simulation.reproducible else simulation.host_cpu,
                        counted=simulation.host_time == "counted",
                        values=ValuePolicy(Routing.parse(simulation.routing), seed,
                                           simulation.unknown_shapes),
                        ranks=classes.live_ranks(), calibration=calibration, host=host)
    stop_echo = threading.Event()
    with pinned(simulation.cpus), launcher:
        tail = launcher.tail(0)
        echo_thread = threading.Thread(target=_echo_lines, args=(tail.read_lines, echo, stop_echo),
                                       daemon=True)
        echo_thread.start()
        try:
            connections, logs = tap(launcher.connections)
            gpus = gpus_of_ranks(workload, topology.gpus_per_host)
            engine = LiveEngine(topology, assembly.system, assembly.nccl, backend,
                                connections, gpus,  # type: ignore[arg-type]
                                coverage=coverage, record_flows=True,
                                overlap=MEASURED_OVERLAP if simulation.overlap_slowdown else None,
                                classes=classes, kernel_scale=kernel_scale)
            result = engine.run()
            write_recording(out_dir, logs, result, gpu.name, gpus, classes)
        finally:
            stop_echo.set()
            echo_thread.join()
            for line in tail.read_lines():
                echo(line)
    return result, coverage


def _echo_lines(read_lines: Callable[[], list[str]], echo: Callable[[str], None],
                stop: threading.Event) -> None:
    while not stop.wait(_ECHO_PERIOD_S):
        for line in read_lines():
            echo(line)
