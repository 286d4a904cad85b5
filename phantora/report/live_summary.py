"""The ``summary.json`` sections of a live run, built from the engine's :class:`LiveResult`."""

from collections import defaultdict

from phantora.engine.benchmark import bus_factor
from phantora.engine.live import CollectiveRecord
from phantora.report.summary import CollectiveResult


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
