"""A recorded run on a scenario's cluster, without the script (:func:`replay_run`).

Checks that the recording fits the scenario (same rank count, same GPU, since kernel times
are replayed as recorded; an imported Chakra trace fits any GPU), replays it
(:mod:`phantora.record.replay`), and fills the same ``summary.json`` sections and trace as a
live run, plus a ``replay`` section saying where the two differ.
"""

from pathlib import Path

from hwmodel.catalogue import GpuSpec
from hwmodel.compute import Coverage
from phantora.engine.overlap import MEASURED_OVERLAP
from phantora.engine.results import LiveResult
from phantora.network.base import NetworkBackend
from phantora.record.graph import Recording, RecordingError, load_recording
from phantora.record.replay import comparison, replay
from phantora.report.live_summary import fill_live_summary
from phantora.report.summary import Summary
from phantora.report.trace import write_trace
from phantora.run.assemble import Assembly, gpus_of_ranks
from phantora.scenario import Scenario, ScriptWorkload


def check_fits(recording: Recording, scenario: Scenario, gpu: GpuSpec) -> list[int]:
    """The rank -> GPU map for the replay; RecordingError if the recording does not fit."""
    workload = scenario.workload
    if not isinstance(workload, ScriptWorkload):
        raise RecordingError(f"{scenario.name}: workload: a replay needs a script workload "
                             "(it gives the rank layout, nproc_per_node); got collectives")
    if workload.world_size != recording.world_size:
        raise RecordingError(
            f"{recording.path}: recorded {recording.world_size} ranks, but the scenario "
            f"{scenario.name!r} runs {workload.world_size} (hosts x nproc_per_node); a replay "
            "keeps the rank count: change the topology, not the number of ranks")
    if recording.meta["gpu"] not in (None, gpu.name):
        raise RecordingError(
            f"{recording.path}: recorded on {recording.meta['gpu']}, but cluster.gpu is "
            f"{gpu.name!r}; kernel times are replayed as recorded, so another GPU needs a "
            "live run")
    return gpus_of_ranks(workload, scenario.cluster.gpus_per_host)


def replay_run(run_dir: Path, scenario: Scenario, assembly: Assembly, backend: NetworkBackend,
               summary: Summary, out_dir: Path) -> LiveResult:
    """Replay ``run_dir``: a recorded run, or a folder of Chakra ETs from another tool; the
    scenario's ``slow_gpu`` faults scale the recorded kernels. Returns what the engine ran."""
    from phantora.study.chakra.importer import chakra_files, load_chakra

    chakra = run_dir.is_dir() and bool(chakra_files(run_dir))
    recording = load_chakra(run_dir) if chakra else load_recording(run_dir)
    gpus = check_fits(recording, scenario, assembly.gpu)
    coverage = None if chakra else Coverage(assembly.gpu)
    replayed = replay(recording, assembly.topology, assembly.system, assembly.nccl, backend, gpus,
                      coverage=coverage,
                      overlap=MEASURED_OVERLAP if scenario.simulation.overlap_slowdown else None,
                      kernel_scale=scenario.kernel_scale())
    attribution = fill_live_summary(summary, replayed.result, coverage, backend,
                                    assembly.topology, replayed.optimizer_ns)
    summary.replay = comparison(recording, replayed)
    write_trace(replayed.result, out_dir / "trace.json", attribution=attribution)
    return replayed.result
