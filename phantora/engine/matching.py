"""Collective matching: the ranks' halves of one collective, found by ``(group, seq)``.

Every member of a group issues the collective with the same ``(group, seq)`` (``seq`` counts
the group's collectives on each rank); a ``send``/``recv`` pair is matched by
``(group, src, dst, seq)``. The members must agree on what they run (op, group ranks, size,
dtype, root): NCCL would hang or corrupt data otherwise, so a disagreement is reported at
once, naming the ranks, op, group and seq. An all-to-all's members need not agree on a size:
each brings its row and column of the split matrix (an all_to_allv's per-rank totals differ,
and a rank whose own row is even cannot tell whether the matrix is), and once all have issued
it, rank ``i``'s bytes to ``j`` must be what ``j`` receives from ``i``; the model runs it as
an all_to_all where every entry of the matrix is the same, else as an all_to_allv. When every
member's stream has reached the collective, the engine plans and starts it. Once every member
has issued a collective that moves real values and every member's inputs are final (a member
whose inputs awaited an earlier collective sends them later: :meth:`Matcher.update_values`),
each member's output values are computed (``collective_values``) and handed to ``on_values``.

Ops are :class:`~wire.ops.IssuedOp`: the collective model's own, and the two sides of p2p
(producers translate every other name before it reaches the wire).
"""

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from hwmodel.errors import DeadlockError, SimulationError
from phantora.collectives import CollectiveOp, CollectiveRequest
from phantora.engine import collective_values
from phantora.engine.streams import Completion
from phantora.network.base import GpuId
from wire.messages import Collective
from wire.ops import P2P_OPS, IssuedOp

_MODEL_OPS = {op: CollectiveOp(op.value) for op in IssuedOp if op not in P2P_OPS}
"""The collective model's op for each issued collective (the same name)."""
_ROOTED_OPS = frozenset({IssuedOp.BROADCAST, IssuedOp.REDUCE})
_ALL_TO_ALLS = frozenset({IssuedOp.ALL_TO_ALL, IssuedOp.ALL_TO_ALLV})
"""One collective to NCCL (grouped sends and receives): members may issue either."""
_SHOWN_MISMATCHES = 3
"""Disagreeing (sender, receiver) pairs an all-to-all mismatch names (of a 1024-rank group)."""

ValuesHandler = Callable[[int, int, "np.ndarray | None"], None]
"""``on_values(rank, value_id, flat values or None)``."""
class CollectiveKey(NamedTuple):
    """What matches the members of one collective across ranks: ``("coll", group, 0, 0, seq)``
    or ``("p2p", group, src, dst, seq)``. Its tuple order is also the order in which collectives
    that start at the same instant enter the network (any fixed order would do)."""

    kind: str
    """``coll`` or ``p2p``."""
    group: str
    src: int
    dst: int
    seq: int

    @classmethod
    def of_collective(cls, group: str, seq: int) -> "CollectiveKey":
        return cls("coll", group, 0, 0, seq)

    @classmethod
    def of_p2p(cls, group: str, src: int, dst: int, seq: int) -> "CollectiveKey":
        """The message ``src -> dst``; ``seq`` counts that ordered pair's messages."""
        return cls("p2p", group, src, dst, seq)


@dataclass(eq=False)
class Member:
    """One rank's share of a collective (the stream side's :class:`CollectivePort`)."""

    rank: int
    op: Collective
    collective: "PendingCollective"
    ready_ns: int | None = None
    started: Completion = field(default_factory=Completion)
    done: Completion = field(default_factory=Completion)
    followers: list["Member"] = field(default_factory=list)
    """Mirrored ranks' shares (``phantora.engine.mirrors``), ready when this one is."""

    def ready(self, ready_ns: int) -> None:
        for follower in self.followers:
            follower.ready(ready_ns)
        if self.ready_ns is None:
            self.collective.ready_members += 1
        self.ready_ns = ready_ns
        self.collective.member_ready()

    def describe(self) -> str:
        return self.collective.describe()


@dataclass(eq=False)
class PendingCollective:
    """A collective some members have issued; started once all are ready."""

    key: CollectiveKey
    expected: tuple[tuple[int, str], ...]
    """(rank, role) of every member; role is ``send``/``recv`` for p2p, ``""`` otherwise."""
    first: Collective
    on_all_ready: Callable[["PendingCollective"], None]
    members: dict[tuple[int, str], Member] = field(default_factory=dict)
    expected_set: frozenset[tuple[int, str]] = field(init=False)
    """``expected`` as a set (membership checks of 1024-rank groups)."""
    ready_members: int = 0
    """How many members' streams have reached it (a count: 1024 members each asking "are all
    ready?" would cost a million checks)."""
    rows: tuple[tuple[int, ...], ...] | None = None
    """An all-to-all's split matrix (bytes from group rank ``i`` to ``j``), once every member
    has issued it and the rows and columns agree (:meth:`Matcher.issue`)."""

    def __post_init__(self) -> None:
        self.expected_set = frozenset(self.expected)

    @property
    def p2p(self) -> bool:
        return self.key.kind == "p2p"

    @property
    def group(self) -> str:
        return self.key.group

    @property
    def seq(self) -> int:
        return self.key.seq

    @property
    def op_name(self) -> str:
        if self.p2p:
            return CollectiveOp.SEND_RECV.value
        return self.first.op if self.rows is None else self._all_to_all_op().value

    @property
    def nbytes(self) -> int:
        """nccl-tests' size; an all-to-all's is its largest row (the totals may differ)."""
        if self.first.op in _ALL_TO_ALLS:
            return max((sum(_row(m.op)) for m in self.members.values()), default=0)
        return self.first.nbytes

    def _all_to_all_op(self) -> CollectiveOp:
        """all_to_all where every entry of the split matrix is the same, else all_to_allv."""
        assert self.rows is not None
        first = self.rows[0][0]
        even = all(size == first for row in self.rows for size in row)
        return CollectiveOp.ALL_TO_ALL if even else CollectiveOp.ALL_TO_ALLV

    @property
    def ranks(self) -> tuple[int, ...]:
        return self.first.ranks

    def describe(self) -> str:
        where = (f"group {self.group!r}, {self.ranks[0]} -> {self.ranks[1]}" if self.p2p
                 else f"group {self.group!r}")
        return f"{self.op_name} ({where}, seq {self.seq}, {self.nbytes} bytes)"

    def issued_by(self) -> list[int]:
        return sorted({rank for rank, _ in self.members})

    def missing(self) -> list[int]:
        return sorted({rank for rank, role in self.expected if (rank, role) not in self.members})

    def not_ready(self) -> list[int]:
        return sorted({m.rank for m in self.members.values() if m.ready_ns is None})

    def member_ready(self) -> None:
        if self.ready_members == len(self.expected):
            start_ns = self.start_ns
            for member in self.members.values():
                member.started.resolve(start_ns)
            self.on_all_ready(self)

    @property
    def start_ns(self) -> int:
        """When every member is ready (valid once they all are)."""
        return max(m.ready_ns or 0 for m in self.members.values())

    def request(self, gpus_of_rank: Sequence[GpuId]) -> CollectiveRequest | None:
        """What the collective model plans; ``None`` for a rank's send to itself (a local copy)."""
        first = self.first
        gpus = [gpus_of_rank[rank] for rank in first.ranks]
        try:
            if self.p2p:
                if gpus[0] == gpus[1]:
                    return None
                return CollectiveRequest.make(CollectiveOp.SEND_RECV, gpus, first.nbytes,
                                              first.dtype_bytes)
            if self.rows is not None:
                op = self._all_to_all_op()
                if op is CollectiveOp.ALL_TO_ALL:
                    return CollectiveRequest.make(op, gpus, sum(self.rows[0]), first.dtype_bytes)
                return CollectiveRequest.make(op, gpus, 0, first.dtype_bytes, splits=self.rows)
            return CollectiveRequest.make(_MODEL_OPS[first.op], gpus, first.nbytes,
                                          first.dtype_bytes, first.root)
        except ValueError as error:
            raise SimulationError(f"{self.describe()}: {error}") from None

    def output_values(self) -> list[tuple[int, int, "np.ndarray | None"]]:
        """``(rank, value_id, values)`` of every member whose outputs take values (all members
        have issued the collective)."""
        if self.p2p:
            members = [self.members[(rank, role)] for rank, role in self.expected]
            op = CollectiveOp.SEND_RECV
        else:
            members = [self.members[(rank, "")] for rank in self.first.ranks]
            op = _MODEL_OPS[self.first.op]
        payloads = [m.op.values for m in members]
        if all(p is None for p in payloads) or any(p is not None and p.pending
                                                   for p in payloads):
            return []
        found = collective_values.outputs(op, payloads, self.first.root)
        return [(members[i].rank, payload.value_id, values) for i, values in found.items()
                if (payload := payloads[i]) is not None]


class Matcher:
    """Pairs up the members of every collective and checks that they agree."""

    def __init__(self, on_all_ready: Callable[[PendingCollective], None],
                 on_values: ValuesHandler | None = None) -> None:
        self._on_all_ready = on_all_ready
        self._on_values = on_values
        self._pending: dict[CollectiveKey, PendingCollective] = {}
        self._awaiting_values: dict[tuple[int, int], tuple[PendingCollective, Member]] = {}
        """(rank, value_id) of a member whose inputs are still to come -> its collective."""

    def issue(self, rank: int, op: Collective) -> Member:
        """Register ``rank``'s share of ``op``; raises on a malformed or mismatched op."""
        key, role = _key_and_role(rank, op)
        _check_splits(rank, op)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = PendingCollective(key, _members(rank, op), op,
                                                             self._on_all_ready)
        elif (rank, role) in pending.members:
            raise SimulationError(f"rank {rank} issued {pending.describe()} twice")
        else:
            _check_agreement(pending, rank, op)
            if (rank, role) not in pending.expected_set:
                raise SimulationError(f"rank {rank} issued {pending.describe()}, but its group "
                                      f"ranks {list(op.ranks)} do not include it")
        member = Member(rank, op, pending)
        pending.members[(rank, role)] = member
        if op.values is not None and op.values.pending:
            self._awaiting_values[(rank, op.values.value_id)] = (pending, member)
        if len(pending.members) == len(pending.expected):
            if op.op in _ALL_TO_ALLS:
                pending.rows = _split_matrix(pending)
            self._hand_values(pending)
        return member

    def update_values(self, rank: int, value_id: int, data: "np.ndarray | None") -> None:
        """The final inputs of ``rank``'s collective whose values were pending."""
        found = self._awaiting_values.pop((rank, value_id), None)
        if found is None:
            raise SimulationError(f"rank {rank} sent values for collective value id {value_id}, "
                                  "which awaits none")
        collective, member = found
        values = member.op.values
        assert values is not None
        member.op = dataclasses.replace(member.op, values=dataclasses.replace(
            values, data=data, pending=False))
        if len(collective.members) == len(collective.expected):
            self._hand_values(collective)

    def owes_values(self, rank: int) -> bool:
        """Whether ``rank`` has yet to send the inputs of a collective it issued as pending."""
        return any(owner == rank for owner, _ in self._awaiting_values)

    def forget_values_of(self, rank: int) -> None:
        """``rank`` went away owing values: its collectives' outputs are unknown."""
        for owner, value_id in [key for key in self._awaiting_values if key[0] == rank]:
            self.update_values(owner, value_id, None)

    def _hand_values(self, collective: PendingCollective) -> None:
        if self._on_values is not None:
            for found in collective.output_values():
                self._on_values(*found)

    def finish(self, collective: PendingCollective) -> None:
        del self._pending[collective.key]

    def incomplete(self) -> list[PendingCollective]:
        """Collectives issued but not finished, in key order."""
        return [self._pending[key] for key in sorted(self._pending)]


def _key_and_role(rank: int, op: Collective) -> tuple[CollectiveKey, str]:
    """The matching key and this rank's role (cheap: every member of a 1024-rank group asks)."""
    if op.op in P2P_OPS:
        if len(op.ranks) != 2:
            raise SimulationError(f"rank {rank}: {op.op} in group {op.group!r} seq {op.seq} has "
                                  f"ranks {list(op.ranks)}; expected (src, dst)")
        src, dst = op.ranks
        return CollectiveKey.of_p2p(op.group, src, dst, op.seq), op.op
    return CollectiveKey.of_collective(op.group, op.seq), ""


def _members(rank: int, op: Collective) -> tuple[tuple[int, str], ...]:
    """Every member's (rank, role), from the first member's op, checked; the others' ops must
    agree with it (:func:`_check_agreement`)."""
    ranks = op.ranks
    if op.op in P2P_OPS:  # a pair: checked by _key_and_role
        src, dst = ranks
        sends = op.op == IssuedOp.SEND
        if rank != (src if sends else dst):
            raise SimulationError(f"rank {rank} issued {op.op} {src} -> {dst} in group "
                                  f"{op.group!r} seq {op.seq}, but it is not the "
                                  f"{'sender' if sends else 'receiver'}")
        return (src, IssuedOp.SEND), (dst, IssuedOp.RECV)
    if op.op not in _MODEL_OPS:
        raise SimulationError(f"rank {rank} issued unknown collective op {op.op!r} in group "
                              f"{op.group!r} seq {op.seq}; known: {', '.join(IssuedOp)}")
    if rank not in ranks or len(set(ranks)) != len(ranks):
        raise SimulationError(f"rank {rank} issued {op.op} in group {op.group!r} seq {op.seq} "
                              f"with group ranks {list(ranks)}, which must hold each rank once "
                              "and include the issuing rank")
    return tuple((r, "") for r in ranks)


def _check_splits(rank: int, op: Collective) -> None:
    """An all_to_allv row (and column, where given) has one byte count per group rank."""
    if op.op != IssuedOp.ALL_TO_ALLV:
        return
    n = len(op.ranks)
    if op.splits is None or len(op.splits) != n:
        name, splits = "splits", op.splits
    elif op.recv_splits is not None and len(op.recv_splits) != n:
        name, splits = "recv_splits", op.recv_splits
    else:
        return
    raise SimulationError(f"rank {rank} issued all_to_allv in group {op.group!r} seq {op.seq} "
                          f"with {name} {splits}; expected one byte count per group rank ({n})")


def _row(op: Collective) -> tuple[int, ...]:
    """A member's bytes to each group rank (an even all_to_all's: its total split evenly, as
    NCCL's grouped sends split it)."""
    if op.op == IssuedOp.ALL_TO_ALL:
        n = len(op.ranks)
        return ((op.nbytes // op.dtype_bytes // n) * op.dtype_bytes,) * n
    return op.splits or ()


def _column(op: Collective) -> tuple[int, ...] | None:
    """A member's bytes from each group rank (``None``: not known, not checked); an even
    all_to_all receives what it sends."""
    return _row(op) if op.op == IssuedOp.ALL_TO_ALL else op.recv_splits


def _split_matrix(pending: PendingCollective) -> tuple[tuple[int, ...], ...]:
    """The all-to-all's split matrix from its members' rows, checked against their columns:
    rank ``i``'s bytes to ``j`` must be what ``j`` receives from ``i`` (NCCL's sends and
    receives of a pair would wait on each other, or a receive would be truncated, otherwise).
    A member without a column (a mirror's row is its representative's, a recording has none)
    is not checked."""
    ranks = pending.first.ranks
    ops = [pending.members[(rank, "")].op for rank in ranks]
    rows = tuple(_row(op) for op in ops)
    columns = [_column(op) for op in ops]
    wrong = [(i, j, row[j], column[i]) for j, column in enumerate(columns) if column is not None
             for i, row in enumerate(rows) if columns[i] is not None and row[j] != column[i]]
    if not wrong:
        return rows
    shown = wrong[:_SHOWN_MISMATCHES]
    pairs = "; ".join(f"rank {ranks[i]} sends {sent} bytes to rank {ranks[j]}, which expects "
                      f"{expected} bytes from it" for i, j, sent, expected in shown)
    more = f" (and {len(wrong) - len(shown)} more pairs)" if len(wrong) > len(shown) else ""
    involved = sorted({k for i, j, _, _ in shown for k in (i, j)})
    splits = "; ".join(f"rank {ranks[k]} sends {list(rows[k])}, receives {list(columns[k] or ())}"
                       for k in involved)
    raise DeadlockError(
        f"all-to-all mismatch in group {pending.group!r} seq {pending.seq}: {pairs}{more}. "
        f"Bytes to / from each group rank: {splits}. NCCL would hang here: in an all_to_allv "
        "each rank must receive from every member exactly what that member sends to it (the "
        "members' totals may differ)")


def _signature(op: Collective) -> str:
    size = "" if op.op in _ALL_TO_ALLS else f"{op.nbytes} bytes, "
    root = f", root {op.root}" if op.op in _ROOTED_OPS else ""
    return f"{op.op} ({size}dtype {op.dtype_bytes} bytes, ranks {list(op.ranks)}{root})"


def _agreement(op: Collective) -> tuple[object, ...]:
    """What the members must agree on, as a tuple (compared without formatting 1024 ranks);
    an all-to-all's sizes are checked once all have issued it (:func:`_split_matrix`), and
    whether a member issued it as even or uneven is its own view of its row."""
    kind = IssuedOp.ALL_TO_ALLV if op.op in _ALL_TO_ALLS else op.op
    return (kind, None if op.op in _ALL_TO_ALLS else op.nbytes, op.dtype_bytes,
            op.ranks, op.root if op.op in _ROOTED_OPS else None)


def _check_agreement(pending: PendingCollective, rank: int, op: Collective) -> None:
    first = pending.first
    if _agreement(first) == _agreement(op) or (pending.p2p and op.nbytes == first.nbytes
                                               and op.dtype_bytes == first.dtype_bytes):
        return
    other = next(iter(pending.members.values()))
    where = (f"between ranks {first.ranks[0]} -> {first.ranks[1]} " if pending.p2p else "")
    issued = "; ".join(f"rank {r} issued {_signature(o)}"
                       for r, o in sorted([(other.rank, other.op), (rank, op)],
                                          key=lambda pair: pair[0]))
    raise DeadlockError(
        f"collective mismatch in group {pending.group!r} {where}seq {pending.seq}: {issued}. "
        "NCCL would hang here: every member must call the same collective with the same size, "
        "dtype and group")
