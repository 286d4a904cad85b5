"""A group of GPUs seen the way an NCCL communicator sees itself: nodes, local ranks, rails."""

from collections.abc import Sequence
from dataclasses import dataclass

from phantora.collectives.system import SystemInfo
from phantora.network.base import GpuId


@dataclass(frozen=True, slots=True)
class Comm:
    """One communicator: ``ranks[i]`` is the GPU of group rank ``i``."""

    system: SystemInfo
    ranks: tuple[GpuId, ...]
    nodes: tuple[tuple[GpuId, ...], ...]
    """Per node (host) in order of first appearance, its member GPUs sorted by rail."""

    @classmethod
    def of(cls, system: SystemInfo, ranks: Sequence[GpuId]) -> "Comm":
        """Group ``ranks`` by host, as NCCL numbers nodes (in order of their first rank)."""
        for gpu in ranks:
            if not 0 <= gpu < system.num_gpus:
                raise ValueError(f"GPU {gpu} is not in the system (GPUs 0..{system.num_gpus - 1}: "
                                 f"{system.hosts} hosts x {system.gpus_per_host})")
        by_host: dict[int, list[GpuId]] = {}
        for gpu in ranks:
            by_host.setdefault(system.host_of(gpu), []).append(gpu)
        nodes = tuple(tuple(sorted(gpus, key=system.local_of)) for gpus in by_host.values())
        return cls(system, tuple(ranks), nodes)

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def local_ranks(self) -> int:
        """GPUs per node; NCCL's ``localRanks`` (the largest node for uneven groups)."""
        return max(len(node) for node in self.nodes)

    @property
    def ppn(self) -> float:
        """Ranks per node as NCCL's tuning model uses it (``nRanks / nNodes``)."""
        return self.nranks / self.nnodes

    def rank_of(self, gpu: GpuId) -> int:
        return self.ranks.index(gpu)
