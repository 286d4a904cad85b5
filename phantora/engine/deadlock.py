"""The text of a deadlock report: what every rank waits for, and which collectives are stuck.

Written for the person whose script hangs on a real cluster the same way: each line names a
rank or a collective (op, group, seq, bytes) and who did or did not get there.
"""

from collections.abc import Sequence

from phantora.engine.matching import PendingCollective


def describe_incomplete(collective: PendingCollective) -> str:
    """``all_reduce (group 'g', seq 3, 4096 bytes), group ranks [0, 1]: issued by ranks [0];
    not issued by ranks [1]`` (plus members whose stream has not reached it yet)."""
    text = (f"{collective.describe()}, group ranks {list(collective.ranks)}: issued by ranks "
            f"{collective.issued_by()}; not issued by ranks {collective.missing()}")
    queued = collective.not_ready()
    if queued:
        text += f"; still queued behind earlier GPU work on ranks {queued}"
    return text


def deadlock_report(headline: str, rank_lines: Sequence[str],
                    incomplete: Sequence[PendingCollective]) -> str:
    """The whole report: a headline, one line per rank, one line per incomplete collective."""
    lines = [headline, "ranks:"]
    lines += [f"  {line}" for line in rank_lines]
    lines.append("incomplete collectives:" if incomplete else "incomplete collectives: none")
    lines += [f"  {describe_incomplete(collective)}" for collective in incomplete]
    return "\n".join(lines)
