"""What a live run produced: per-rank results, the collectives, flows and spans as they ran.

:class:`~phantora.engine.live.LiveEngine` fills one :class:`LiveResult`; ``phantora.report``
turns it into ``summary.json``, the trace and the console summary, and ``phantora.record``
replays against it. Plain frozen records, so that two runs of the same inputs compare equal.
"""

from dataclasses import dataclass, field

from phantora.collectives import CollectiveOp
from phantora.engine.matching import CollectiveKey
from phantora.engine.rank_classes import RankClasses
from phantora.engine.streams import KernelSpan
from phantora.network.base import GpuId, NetworkStats
from wire.messages import HostTimeSplit


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveRecord:
    """One collective as it ran (``summary.json``'s collectives table)."""

    op: str
    """As issued (``all_reduce``, ``all_to_allv``, ...); ``send_recv`` for a matched send/recv."""
    group: str
    seq: int
    bytes: int
    """nccl-tests convention (all_gather: gathered output; all_to_allv: the largest row)."""
    ranks: tuple[int, ...]
    """Group ranks in group order; ``(src, dst)`` for send_recv."""
    start_ns: int
    """When the last member's stream reached it: the flows start here."""
    end_ns: int
    algorithm: str
    protocol: str
    channels: int
    flows: int

    @property
    def key(self) -> CollectiveKey:
        """Its matching key (what its flows carry)."""
        if self.op == CollectiveOp.SEND_RECV:
            return CollectiveKey.of_p2p(self.group, self.ranks[0], self.ranks[1], self.seq)
        return CollectiveKey.of_collective(self.group, self.seq)


@dataclass(frozen=True, slots=True)
class CollectiveSpan:
    """One member's view of a collective on its stream (for the trace): from the moment its
    stream reached it (waiting for the others included, as a real NCCL kernel spins) to the end."""

    rank: int
    stream: int
    op: str
    """The member's own op (``send`` or ``recv`` for p2p)."""
    ready_ns: int
    end_ns: int
    record: CollectiveRecord


@dataclass(frozen=True, slots=True)
class BlockedSpan:
    """A rank's CPU waiting in a host sync, in virtual time."""

    rank: int
    kind: str
    """``device``, ``stream``, ``event`` or ``query``."""
    target: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class NetworkFlow:
    """A flow as it ran (only when the engine records flows)."""

    src: GpuId
    dst: GpuId
    nbytes: int
    start_ns: int
    end_ns: int
    collective: str
    """The collective it belongs to, e.g. ``all_reduce (group 'default', seq 3, 4096 bytes)``."""
    key: CollectiveKey = CollectiveKey("", "", 0, 0, 0)
    """That collective's matching key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankResult:
    rank: int
    gpu: GpuId
    clock_ns: int
    """The rank's clock when its script ended."""
    gpu_end_ns: int
    """When its last GPU work ended."""
    blocked_ns: int
    """Virtual time its CPU spent waiting in host syncs."""
    kernels: int
    collectives: int
    script_cpu_ns: int = 0
    """CPU time the rank counted as its script's (see :class:`wire.messages.RankStats`)."""
    simulator_cpu_ns: int = 0
    """CPU time the rank spent inside the simulator, kept out of its virtual time."""
    peak_memory_bytes: int = 0
    """``torch.cuda.max_memory_allocated`` at the end (the simulated caching allocator)."""
    peak_reserved_bytes: int = 0
    """``torch.cuda.max_memory_reserved`` at the end."""
    overlap_slowed_kernels: int = 0
    """Kernels stretched because a collective ran on the GPU at the same time."""
    overlap_extra_ns: int = 0
    """GPU time those stretches added (``phantora.engine.overlap``)."""
    host_speed_factor: float = 1.0
    """How the rank's script CPU time was converted to the reference host's at the end."""
    host_time: HostTimeSplit = HostTimeSplit()
    """Its host time by origin: table vs residual (counted or measured), per optimizer step."""


@dataclass
class LiveResult:
    """Everything a live run produced, in a fixed order (two runs of the same inputs compare
    equal)."""

    ranks: list[RankResult]
    collectives: list[CollectiveRecord]
    kernels: list[KernelSpan]
    collective_spans: list[CollectiveSpan]
    blocked: list[BlockedSpan]
    flows: list[NetworkFlow]
    counts: dict[str, int]
    """batches, heartbeats, ops, kernels, event_records, stream_waits, collective_ops,
    syncs, queries, collectives (matched and run), flows."""
    network: NetworkStats = field(default_factory=lambda: NetworkStats("none"))
    classes: RankClasses | None = None
    """Which ranks ran live and which mirrored (``None``: all live)."""
    scaled_kernel_ns: dict[int, int] = field(default_factory=dict)
    """Per rank with a ``kernel_scale`` factor: the GPU time it added (negative: took off)."""

    @property
    def simulated_ns(self) -> int:
        """The end of the run: the last rank clock or GPU activity."""
        return max((max(r.clock_ns, r.gpu_end_ns) for r in self.ranks), default=0)
