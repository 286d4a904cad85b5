"""The operations a rank issues to the engine: the only collective and p2p names on the wire.

A :class:`~enum.StrEnum`, so a member is its name: it compares, hashes, formats and serialises
(JSON records, ``summary.json``) as the plain string. Producers translate their own vocabulary
into these ops, each in one place: ``intercept.distributed.process_group`` for ``torch.distributed``
(``barrier`` is an all-reduce of one element, ``gather``/``scatter`` an all_to_allv with one
non-zero column/row), ``phantora.study.chakra.importer`` for Chakra's comm types.
"""

from enum import StrEnum


class IssuedOp(StrEnum):
    """A collective as the collective model plans it (NCCL's), or one side of a p2p message."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALL_TO_ALL = "all_to_all"
    ALL_TO_ALLV = "all_to_allv"
    SEND = "send"
    RECV = "recv"


P2P_OPS = frozenset({IssuedOp.SEND, IssuedOp.RECV})
"""The two sides of a point-to-point message, matched by ``(group, src, dst, seq)``."""
