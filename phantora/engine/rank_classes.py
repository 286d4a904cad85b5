"""Which ranks run live and which mirror another (rank deduplication).

Data-parallel replicas run the same program up to their rank id. The ranks are seen as a
row-major ``outer x replicas x inner`` grid (``rank = (a * replicas + b) * inner + c``, the
layout of ``DeviceMesh`` and Megatron's parallel state, whose outer dimension is the
pipeline and whose inner ones are tensor / context parallel). Ranks that differ only in
``b`` form a class: the one at ``b = 0`` (its *representative*) and the one at
``b = replicas - 1`` (its *witness*, checked against it op by op) run live; the others are
*mirrors* that replay their representative's ops with every group shifted along ``b``.

A grid fits a run when every group its ranks use is either one ``b`` slice (all members
share ``b``: a tensor-parallel or pipeline group) or closed under a shift of ``b`` (a
data-parallel group, the world). :meth:`RankClasses.choose` picks the fitting grid with the
fewest live ranks.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RankClasses:
    """The ``outer x replicas x inner`` grid of a run's ranks; ``replicas`` 1 or 2: all live."""

    outer: int
    replicas: int
    inner: int

    @classmethod
    def all_live(cls, world: int) -> "RankClasses":
        return cls(world, 1, 1)

    @classmethod
    def of_grid(cls, grid: Sequence[int] | None, world: int) -> "RankClasses":
        """From a saved :attr:`grid` (``None``: every rank of ``world`` live)."""
        return cls.all_live(world) if grid is None else cls(*grid)

    @property
    def grid(self) -> list[int]:
        """``[outer, replicas, inner]``, as ``summary.json`` and recordings store it."""
        return [self.outer, self.replicas, self.inner]

    @classmethod
    def choose(cls, world: int, groups: Iterable[Sequence[int]] = (),
               excluded: Iterable["RankClasses"] = ()) -> "RankClasses":
        """The grid with the fewest live ranks that every group fits (ties: the smaller
        ``inner``); all live if none does. ``excluded``: grids already found wrong."""
        distinct = {tuple(sorted(group)) for group in groups}
        banned = set(excluded)
        best = cls.all_live(world)
        for inner in _divisors(world):
            for replicas in _divisors(world // inner):
                grid = cls(world // inner // replicas, replicas, inner)
                if grid.live_count < best.live_count and grid not in banned \
                        and all(grid.fits(group) for group in distinct):
                    best = grid
        return best

    @property
    def world(self) -> int:
        return self.outer * self.replicas * self.inner

    @property
    def deduplicated(self) -> bool:
        return self.replicas > 2

    @property
    def live_count(self) -> int:
        return self.outer * self.inner * min(self.replicas, 2)

    def replica(self, rank: int) -> int:
        """``b``, the rank's coordinate along the replicated dimension."""
        return rank // self.inner % self.replicas

    def shifted(self, rank: int, by: int) -> int:
        """The rank ``by`` replicas further along (cyclically), same ``a`` and ``c``."""
        b = self.replica(rank)
        return rank + ((b + by) % self.replicas - b) * self.inner

    def representative(self, rank: int) -> int:
        return self.shifted(rank, -self.replica(rank))

    def witness(self, representative: int) -> int:
        return self.shifted(representative, self.replicas - 1)

    def live_ranks(self) -> list[int]:
        """Representatives and witnesses (every rank when not deduplicated)."""
        return [rank for rank in range(self.world)
                if not self.deduplicated or self.replica(rank) in (0, self.replicas - 1)]

    def mirrors(self) -> dict[int, int]:
        """Mirrored rank -> its representative."""
        if not self.deduplicated:
            return {}
        return {rank: self.representative(rank) for rank in range(self.world)
                if 0 < self.replica(rank) < self.replicas - 1}

    def fits(self, group: Sequence[int]) -> bool:
        """The group is one ``b`` slice, or the same set once shifted along ``b``."""
        if len({self.replica(rank) for rank in group}) == 1:
            return True
        members = set(group)
        return {self.shifted(rank, 1) for rank in members} == members

    def describe(self) -> str:
        if not self.deduplicated:
            return f"all {self.world} ranks live"
        classes = self.outer * self.inner
        return (f"{self.live_count} live ranks of {self.world}: {classes} "
                f"class{'es' if classes > 1 else ''} of {self.replicas} replicas (grid "
                f"{self.outer} x {self.replicas} x {self.inner}), each run by its first replica, "
                "checked against its last")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
