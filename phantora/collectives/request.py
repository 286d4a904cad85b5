"""What the engine asks the collective model to plan: one operation on one group of GPUs."""

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from phantora.network.base import GpuId


class CollectiveOp(str, Enum):
    """NCCL's operations (``send_recv``: one ``ncclSend`` matched with its ``ncclRecv``)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALL_TO_ALL = "all_to_all"
    ALL_TO_ALLV = "all_to_allv"
    SEND_RECV = "send_recv"


@dataclass(frozen=True, slots=True)
class CollectiveRequest:
    """One collective on a group; sizes follow nccl-tests (``nbytes`` is the largest buffer).

    Build it with :meth:`make`, which accepts op names as strings and checks every field.
    """

    op: CollectiveOp
    ranks: tuple[GpuId, ...]
    """The group's global GPU ids in group-rank order (any subset = a sub-communicator);
    ``send_recv`` takes ``(src, dst)``."""
    nbytes: int
    """all_reduce, broadcast, reduce: the buffer; all_gather: the gathered output;
    reduce_scatter: the full input; all_to_all: what each rank sends in total (its own
    slice included); send_recv: the message; all_to_allv: the largest row of ``splits``."""
    dtype_bytes: int
    root: int = 0
    """Group rank of the root of broadcast and reduce."""
    splits: tuple[tuple[int, ...], ...] | None = None
    """all_to_allv only: ``splits[i][j]`` bytes from group rank ``i`` to group rank ``j``."""

    @classmethod
    def make(cls, op: CollectiveOp | str, ranks: Sequence[GpuId], nbytes: int, dtype_bytes: int,
             root: int = 0, splits: Sequence[Sequence[int]] | None = None) -> "CollectiveRequest":
        """A checked request; raises ``ValueError`` naming the field and the fix."""
        try:
            kind = CollectiveOp(op)
        except ValueError:
            known = ", ".join(o.value for o in CollectiveOp)
            raise ValueError(f"unknown collective op {op!r}; expected one of: {known}") from None
        matrix = None if splits is None else tuple(tuple(int(b) for b in row) for row in splits)
        if kind is CollectiveOp.ALL_TO_ALLV and matrix is not None and nbytes == 0:
            nbytes = max((sum(row) for row in matrix), default=0)
        request = cls(kind, tuple(int(r) for r in ranks), int(nbytes), int(dtype_bytes),
                      int(root), matrix)
        request.validate()
        return request

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    def validate(self) -> None:
        """Raise ``ValueError`` if the request is inconsistent."""
        n = self.nranks
        if n == 0:
            raise ValueError(f"{self.op.value}: ranks is empty; give the group's GPU ids")
        if len(set(self.ranks)) != n:
            raise ValueError(f"{self.op.value}: ranks {list(self.ranks)} repeat a GPU; each GPU "
                             "appears once in a group")
        if min(self.ranks) < 0:
            raise ValueError(f"{self.op.value}: ranks {list(self.ranks)} hold a negative GPU id")
        if self.dtype_bytes not in (1, 2, 4, 8):
            raise ValueError(f"{self.op.value}: dtype_bytes is {self.dtype_bytes}; expected 1, "
                             "2, 4 or 8")
        if self.nbytes < 0:
            raise ValueError(f"{self.op.value}: nbytes is {self.nbytes}; sizes are >= 0")
        if self.nbytes % self.dtype_bytes and self.op is not CollectiveOp.ALL_TO_ALLV:
            raise ValueError(f"{self.op.value}: nbytes ({self.nbytes}) is not a whole number of "
                             f"{self.dtype_bytes}-byte elements")
        if self.op is CollectiveOp.SEND_RECV and n != 2:
            raise ValueError(f"send_recv: ranks must be (src, dst), got {list(self.ranks)}")
        if self.op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE) and not 0 <= self.root < n:
            raise ValueError(f"{self.op.value}: root {self.root} is not a group rank in "
                             f"[0, {n})")
        if self.op is CollectiveOp.ALL_TO_ALLV:
            self._validate_splits()
        elif self.splits is not None:
            raise ValueError(f"{self.op.value}: splits are for all_to_allv only; drop them")

    def _validate_splits(self) -> None:
        n = self.nranks
        if self.splits is None:
            raise ValueError("all_to_allv: splits is missing; give the n x n byte matrix "
                             "splits[i][j] (group rank i -> group rank j)")
        if len(self.splits) != n or any(len(row) != n for row in self.splits):
            shape = f"{len(self.splits)} x {[len(row) for row in self.splits]}"
            raise ValueError(f"all_to_allv: splits must be {n} x {n} (one row and column per "
                             f"group rank), got {shape}")
        if any(b < 0 for row in self.splits for b in row):
            raise ValueError("all_to_allv: splits hold a negative byte count")
