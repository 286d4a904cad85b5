"""An all-to-all's members are matched on their split matrix, not on their totals (issue 33):
rank ``i``'s bytes to ``j`` must be what ``j`` receives from ``i``, the model runs the matrix
the rows give, and a real disagreement names the pairs and their numbers."""

import pytest

from hwmodel.errors import DeadlockError
from phantora.collectives import CollectiveOp
from phantora.collectives.p2p import pair_bytes
from phantora.engine.matching import Matcher, PendingCollective
from wire.messages import Collective
from wire.ops import IssuedOp

RANKS = (0, 1)


def _a2a(splits: tuple[int, ...], recv_splits: tuple[int, ...] | None, *,
         op: IssuedOp = IssuedOp.ALL_TO_ALLV, seq: int = 0) -> Collective:
    return Collective(stream=-1, at_ns=0, group="ep", ranks=RANKS, seq=seq, op=op,
                      nbytes=sum(splits), dtype_bytes=2, splits=splits,
                      recv_splits=recv_splits)


def _matched(*ops: Collective) -> PendingCollective:
    """Every rank's share issued, in rank order; the collective they form."""
    matcher = Matcher(lambda collective: None)
    members = [matcher.issue(rank, op) for rank, op in zip(RANKS, ops, strict=True)]
    return members[-1].collective


def test_even_rows_of_different_totals_are_one_all_to_allv_whose_traffic_follows_the_splits(
        ) -> None:
    """The issue's case: the return exchange of routing that is the same on both ranks; each
    rank's own row is even (it cannot tell), their totals differ."""
    collective = _matched(_a2a((200, 200), (200, 300)), _a2a((300, 300), (200, 300)))
    request = collective.request(RANKS)
    assert request is not None and request.op is CollectiveOp.ALL_TO_ALLV
    assert request.splits == ((200, 200), (300, 300))
    assert pair_bytes(request.ranks, request.nbytes, request.splits, request.dtype_bytes) == [
        (0, 1, 200), (1, 0, 300)]
    assert (collective.op_name, collective.nbytes) == ("all_to_allv", 600)  # the largest row


def test_a_member_issuing_an_even_all_to_all_joins_an_uneven_one() -> None:
    """all_to_all_single without splits on one rank, with them on the other: NCCL's grouped
    sends either way; the even member's row and column are its total split evenly."""
    even = Collective(stream=-1, at_ns=0, group="ep", ranks=RANKS, seq=0,
                      op=IssuedOp.ALL_TO_ALL, nbytes=400, dtype_bytes=2)
    request = _matched(even, _a2a((200, 100), (200, 100))).request(RANKS)
    assert request is not None and request.splits == ((200, 200), (200, 100))


def test_a_matrix_with_one_size_everywhere_runs_as_an_all_to_all() -> None:
    collective = _matched(_a2a((256, 256), (256, 256)), _a2a((256, 256), (256, 256)))
    request = collective.request(RANKS)
    assert request is not None
    assert (request.op, request.nbytes, request.splits) == (CollectiveOp.ALL_TO_ALL, 512, None)
    assert collective.op_name == "all_to_all"


def test_rows_and_columns_that_disagree_are_reported_with_their_numbers() -> None:
    with pytest.raises(DeadlockError, match=(
            r"all-to-all mismatch in group 'ep' seq 0: rank 0 sends 300 bytes to rank 1, which "
            r"expects 200 bytes from it\. Bytes to / from each group rank: rank 0 sends "
            r"\[100, 300\], receives \[100, 100\]; rank 1 sends \[100, 100\], receives "
            r"\[200, 100\]\. NCCL would hang here")):
        _matched(_a2a((100, 300), (100, 100)), _a2a((100, 100), (200, 100)))


def test_a_member_without_a_column_is_not_checked() -> None:
    """A mirror's row is its representative's (rank deduplication), not its own data's: it
    is not held to what the live ranks expect from it."""
    request = _matched(_a2a((100, 300), (100, 100)), _a2a((200, 100), None)).request(RANKS)
    assert request is not None and request.splits == ((100, 300), (200, 100))
