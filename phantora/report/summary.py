"""``summary.json``: the machine-readable result other tools parse.

The schema lives here, in one dataclass tree; bump ``SCHEMA_VERSION`` on any incompatible
change. Field names carry their units.
"""

import json
import resource
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from phantora import __version__
from phantora.engine.results import RankResult

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class CollectiveResult:
    """One simulated collective, reported the way nccl-tests reports it."""

    op: str
    bytes: int
    """nccl-tests convention: the largest buffer (all_gather output, reduce_scatter input)."""
    ranks: int
    time_us: float
    algbw_gbs: float
    """bytes / time, in GB/s (10^9 bytes per second)."""
    busbw_gbs: float
    """algbw times nccl-tests' bus factor (all_reduce 2(n-1)/n; AG, RS, all_to_all (n-1)/n)."""
    algorithm: str
    protocol: str
    channels: int
    flows: int
    """Flows the collective was decomposed into."""
    count: int = 1
    """Collectives this row stands for (a live run groups identical ones; times are means)."""


@dataclass
class Summary:
    scenario: dict[str, Any]
    workload: str
    """``collectives`` (a sweep) or ``script`` (a live training script)."""
    collectives: list[CollectiveResult] = field(default_factory=list)
    ranks: list[RankResult] = field(default_factory=list)
    """Live runs only."""
    compute_coverage: dict[str, Any] = field(default_factory=dict)
    """Live runs only: where simulated GPU time came from (roofline, fallback), top ops."""
    host: dict[str, Any] = field(default_factory=dict)
    """Live runs only: the host profile that charged host time (``cluster.host``), its speed,
    and where each mechanism's cost came from (``hwmodel.measured.host_profile``)."""
    counts: dict[str, int] = field(default_factory=dict)
    """Live runs only: batches, ops, kernels, syncs, collectives, flows the engine handled."""
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    """Live runs only, where the simulator's CPU went: ``ranks_script`` (the scripts' own
    work, counted in virtual time), ``ranks_simulator`` (fake execution, kernel recording and
    messaging inside the ranks), ``coordinator`` (engine, collective planning, NVLink model)
    and ``ns3`` (packet-level fabric)."""
    dedup: dict[str, Any] = field(default_factory=dict)
    """Live runs only: ``grid`` (outer x replicas x inner), ``live_ranks``, ``mirrored_ranks``
    (rank -> the representative it mirrors) and ``regroups`` (why a run started again with
    other classes; ``phantora.engine.rank_classes``)."""
    attribution: dict[str, Any] = field(default_factory=dict)
    """Live runs only: each live rank's steps split into compute, exposed communication (by
    op and tier), pipeline bubble, waiting for other ranks and host-bound idle
    (:mod:`phantora.report.attribution`)."""
    network: dict[str, Any] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    """The scenario's faults, each with what it did (:mod:`phantora.report.faults`)."""
    simulated_ns: int = 0
    wall_seconds: dict[str, float] = field(default_factory=dict)
    peak_rss_bytes: int = 0
    replay: dict[str, Any] = field(default_factory=dict)
    """Replays only (``phantora-ns3 replay``): the recording and where the replay differs
    from the live run (:func:`phantora.record.replay.comparison`)."""
    schema_version: int = SCHEMA_VERSION
    tool: str = "phantora-ns3"
    version: str = __version__

    def write(self, path: Path) -> None:
        self.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
