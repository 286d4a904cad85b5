"""Mirrored ranks: a representative's collectives, issued on the groups another rank belongs to.

A mirror (``phantora.engine.rank_classes``) has no process and no simulated GPU: it follows its
representative. Every collective the representative issues, its mirrors issue too, moved to
their own groups, and each mirror's share is ready when the representative's is. So every
flow of every rank reaches the network, at the place in the fabric of the rank that sends it,
while the kernels, event waits and host syncs between collectives are simulated once, for the
representative (a 1024-GPU step has about 8,000 kernels per rank). What a mirror does not get
is a timeline of its own: where its groups' collectives end later than its representative's
(another rail congested, a slower link), its next collectives are still ready when the
representative's are. The witness, the other live rank of the class, is simulated in full.

A witness runs live; :class:`WitnessCheck` compares its GPU work with its representative's,
so that ranks whose programs differ (a pipeline stage, a rank-dependent branch) are caught
instead of mirrored wrongly. Collective sizes are not compared (they may follow data: MoE
routing), nor kernels one by one, only their time between collectives: rank 0 alone reading
its loss for a log line is the rule, and the mirrors of rank 0 read theirs too (a collective
waits for its slowest member, which is the logging rank whether or not the others log).
"""

from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from phantora.engine.rank_classes import RankClasses
from wire.messages import Collective, Kernel, Op, ValuePayload, ValueUpdate
from wire.ops import P2P_OPS

if TYPE_CHECKING:
    import numpy as np


class Mirror:
    """How one mirror's collectives follow from its representative's."""

    def __init__(self, classes: RankClasses, mirror: int, representative: int) -> None:
        self.classes = classes
        self.representative = representative
        self.shift = classes.replica(mirror) - classes.replica(representative)
        self._pending_orders: dict[int, tuple[list[int], tuple[int, ...]]] = {}
        """value id -> (group order, element splits) of a pending valued all_to_allv."""
        self._groups: dict[tuple[tuple[int, ...], bool],
                           tuple[tuple[int, ...], list[int] | None]] = {}
        """(group ranks, a send/recv pair) -> :meth:`_moved_group`'s answer."""

    def late_values(self, update: ValueUpdate) -> "np.ndarray | None":
        """The representative's late input values (:class:`ValueUpdate`) as the mirror's."""
        found = self._pending_orders.pop(update.value_id, None)
        if found is None or update.data is None:
            return update.data
        order, splits = found
        return _permuted_data(update.data, splits, order)

    def collective(self, op: Collective) -> Collective:
        """The representative's collective as the mirror issues it."""
        moved, order = self._moved_group(op.ranks, op.op in P2P_OPS)
        if order is None:  # a slice of the representative's replica, or a pair: its twin
            return replace(op, group=f"{op.group}+{self.shift}", ranks=moved,
                           values=_mirrored_values(op.values, None))
        # The same group (a data-parallel one): the mirror sits elsewhere in it, so a row of
        # per-destination sizes moves with it. Its column is left unknown: the live members'
        # columns are their own data's, which a row borrowed from the representative need not
        # match (MoE routing), so the matcher checks neither against the other.
        splits = None if op.splits is None else _permuted(op.splits, order)
        values = op.values
        if values is not None and values.pending and values.splits is not None:
            self._pending_orders[values.value_id] = (order, values.splits)
        return replace(op, splits=splits, recv_splits=None,
                       values=_mirrored_values(op.values, order))

    def _moved_group(self, ranks: tuple[int, ...], pair: bool
                     ) -> tuple[tuple[int, ...], list[int] | None]:
        """The group's ranks shifted to the mirror's replica, and, for a group that is the same
        set once shifted, where each group rank's counterpart sits in it (``None`` for the
        others). Cached: a training step issues the same few groups again and again."""
        found = self._groups.get((ranks, pair))
        if found is None:
            moved = tuple(self.classes.shifted(rank, self.shift) for rank in ranks)
            order = None
            if not pair and set(moved) == set(ranks):
                position = {rank: index for index, rank in enumerate(ranks)}
                order = [position[rank] for rank in moved]
            found = self._groups[(ranks, pair)] = (moved, order)
        return found


def _permuted(row: tuple[int, ...], order: list[int]) -> tuple[int, ...]:
    """``row[j]`` went to group rank ``j``; the mirror sends it to group rank ``order[j]``."""
    moved = [0] * len(row)
    for j, size in enumerate(row):
        moved[order[j]] = size
    return tuple(moved)


def _mirrored_values(values: ValuePayload | None, order: list[int] | None
                     ) -> ValuePayload | None:
    """The representative's input values as the mirror's (it wants none back)."""
    if values is None:
        return None
    if order is None or values.splits is None or values.data is None:
        return replace(values, want=False)
    return replace(values, want=False, splits=_permuted(values.splits, order),
                   data=_permuted_data(values.data, values.splits, order))


def _permuted_data(data: "np.ndarray", splits: tuple[int, ...], order: list[int]
                   ) -> "np.ndarray":
    """Flat values, ``splits[j]`` of them for group rank ``j``, reordered as :func:`_permuted`."""
    import numpy as np  # noqa: PLC0415 - only valued all_to_allv need it

    chunks: list[np.ndarray] = [data[:0]] * len(order)
    offset = 0
    for j, count in enumerate(splits):
        chunks[order[j]] = data[offset:offset + count]
        offset += count
    return np.concatenate(chunks)


Signature = tuple[object, ...]

KERNEL_TIME_TOLERANCE = 0.05
"""How far a witness's GPU time between two collectives may differ from its representative's
(as a share of the larger), beyond :data:`KERNEL_TIME_SLACK_NS`."""
KERNEL_TIME_SLACK_NS = 100_000
"""Absolute slack: a logging rank's copies to the host, FSDP2's padding of a rank's empty
shard at start-up."""


def _collective_signature(op: Collective, classes: RankClasses, shift: int) -> Signature:
    """What must agree between a representative's collective and its witness's (``shift``
    moves the witness's groups back to the representative's replica)."""
    ranks = [classes.shifted(rank, shift) for rank in op.ranks]
    members: object = tuple(ranks) if op.op in P2P_OPS else tuple(sorted(ranks))
    return (str(op.op), "on stream", op.stream, "ranks", members)


@dataclass(frozen=True, slots=True)
class _Segment:
    """A rank's GPU work up to a collective (or to its exit: ``collective`` None)."""

    kernel_ns: int
    kernels: int
    collective: Signature | None


class WitnessCheck:
    """A representative's and its witness's GPU work, compared collective by collective: the
    same collectives in the same order on the same streams and groups, and about the same
    kernel time between them. Kernel names and counts may differ (a logging rank's copies to
    the host, an empty shard's padding); their time may not, beyond a small tolerance."""

    def __init__(self, classes: RankClasses, representative: int, witness: int) -> None:
        self.classes = classes
        self.representative = representative
        self.witness = witness
        self._back = classes.replica(representative) - classes.replica(witness)
        self._open = {representative: [0, 0], witness: [0, 0]}
        """Per side, kernel ns and count since its last collective."""
        self._ahead: deque[_Segment] = deque()
        self._rep_ahead = True
        self._matched = 0

    def ops(self, rank: int, ops: list[Op]) -> str | None:
        """Feed ``rank``'s ops (the representative's or the witness's); a description of the
        first disagreement, if any."""
        shift = 0 if rank == self.representative else self._back
        open_segment = self._open[rank]
        for op in ops:
            if isinstance(op, Kernel):
                open_segment[0] += op.duration_ns
                open_segment[1] += 1
            elif isinstance(op, Collective):
                segment = _Segment(*open_segment,
                                   _collective_signature(op, self.classes, shift))
                open_segment[:] = [0, 0]
                problem = self._compare(rank, segment)
                if problem is not None:
                    return problem
        return None

    def ended(self) -> str | None:
        """Both exited: their work after the last collective, and any collective one ran
        beyond the other, must agree too."""
        for rank in (self.representative, self.witness):
            problem = self._compare(rank, _Segment(*self._open[rank], None))
            if problem is not None:
                return problem
        if not self._ahead:
            return None
        longer = self.representative if self._rep_ahead else self.witness
        return (f"rank {longer} ran {_describe(self._ahead[0])} and more after the other of "
                f"ranks {self.representative} and {self.witness} (same replica class) had "
                "exited")

    def _compare(self, rank: int, segment: _Segment) -> str | None:
        from_rep = rank == self.representative
        if not self._ahead or self._rep_ahead == from_rep:
            self._rep_ahead = from_rep
            self._ahead.append(segment)
            return None
        other = self._ahead.popleft()
        rep, witness = (segment, other) if from_rep else (other, segment)
        self._matched += 1
        where = f"before collective #{self._matched}" if rep.collective or witness.collective \
            else "after its last collective"
        if rep.collective != witness.collective:
            return (f"rank {self.witness} ran other collectives than rank "
                    f"{self.representative}, whose replica it is: its collective "
                    f"#{self._matched} is {_describe(witness.collective)}, rank "
                    f"{self.representative}'s is {_describe(rep.collective)}")
        larger = max(rep.kernel_ns, witness.kernel_ns)
        if abs(rep.kernel_ns - witness.kernel_ns) > larger * KERNEL_TIME_TOLERANCE \
                + KERNEL_TIME_SLACK_NS:
            return (f"rank {self.witness} ran other GPU work than rank {self.representative}, "
                    f"whose replica it is: {where}, {witness.kernels} kernels of "
                    f"{witness.kernel_ns / 1e3:.1f} us against {rep.kernels} kernels of "
                    f"{rep.kernel_ns / 1e3:.1f} us")
        return None


def _describe(signature: Signature | None) -> str:
    return "its exit" if signature is None else " ".join(str(part) for part in signature)

