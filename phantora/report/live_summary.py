"""The ``summary.json`` sections of a live run, built from the engine's :class:`LiveResult`."""

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence

from hwmodel.compute import Coverage
from phantora.cluster.topology import Topology
from phantora.engine.results import CollectiveRecord, LiveResult
from phantora.network.base import NetworkBackend
from phantora.report.attribution import Attribution, attribute
from phantora.report.bandwidth import bus_factor
from phantora.report.summary import CollectiveResult, Summary


def collective_rows(records: list[CollectiveRecord]) -> list[CollectiveResult]:
    """One row per distinct (op, bytes, group size, algorithm, protocol, channels): the mean
    time and the bandwidths nccl-tests would report for it, and how many ran."""
    groups: dict[tuple[str, int, int, str, str, int], list[CollectiveRecord]] = defaultdict(list)
    for record in records:
        key = (record.op, record.bytes, len(record.ranks), record.algorithm, record.protocol,
               record.channels)
        groups[key].append(record)
    rows = []
    for (op, nbytes, nranks, algorithm, protocol, channels), members in sorted(groups.items()):
        mean_ns = sum(r.end_ns - r.start_ns for r in members) / len(members)
        algbw = nbytes / mean_ns if mean_ns > 0 else 0.0  # bytes per ns = GB/s
        rows.append(CollectiveResult(
            op=op, bytes=nbytes, ranks=nranks, time_us=mean_ns / 1e3, algbw_gbs=algbw,
            busbw_gbs=algbw * bus_factor(op, nranks), algorithm=algorithm, protocol=protocol,
            channels=channels, flows=max(r.flows for r in members), count=len(members)))
    return rows


def fill_live_summary(summary: Summary, result: LiveResult, coverage: Coverage | None,
                      backend: NetworkBackend, topology: Topology,
                      optimizer_ns: Mapping[int, Sequence[int]] | None = None) -> Attribution:
    """The sections a live run (or a replay of one) adds to ``summary.json`` (no
    ``compute_coverage`` without ``coverage``: an imported trace's kernel times are its own);
    ``optimizer_ns``: each rank's optimizer steps, if not its step hooks'. Returns the step
    attribution (for the trace)."""
    summary.ranks = result.ranks
    attribution = attribute(result, topology, optimizer_ns)
    summary.attribution = attribution.to_dict()
    summary.collectives = collective_rows(result.collectives)
    if coverage is not None:
        summary.compute_coverage = coverage.to_dict()
    summary.counts = dict(result.counts)
    classes = result.classes
    live = result.ranks if classes is None else \
        [result.ranks[rank] for rank in classes.live_ranks()]
    if classes is not None:
        summary.dedup.update(grid=classes.grid,
                             live_ranks=classes.live_ranks(),
                             mirrored_ranks={str(m): r for m, r in classes.mirrors().items()})
    ns3_s = float(backend.stats().extra.get("inter.run_cpu_s", 0.0))
    summary.cpu_seconds = {  # the processes that ran: mirrors' stats are their representatives'
        "ranks_script": round(sum(r.script_cpu_ns for r in live) / 1e9, 3),
        "ranks_simulator": round(sum(r.simulator_cpu_ns for r in live) / 1e9, 3),
        "coordinator": round(time.process_time() - ns3_s, 3),
        "ns3": round(ns3_s, 3)}
    summary.simulated_ns = result.simulated_ns
    return attribution
