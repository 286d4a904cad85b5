"""Checks a backend runs on its :class:`~phantora.network.base.LinkFailure` list before it
simulates anything: a failure the fabric cannot route around is refused up front, with the
link and GPUs named, rather than stranding flows mid-run (or, in ns-3, killing the process).
"""

from collections.abc import Sequence

from hwmodel.errors import BackendError
from phantora.cluster.topology import Topology
from phantora.network.base import LinkFailure


def check_failures(topology: Topology, failures: Sequence[LinkFailure],
                   max_ns: int | None = None) -> tuple[LinkFailure, ...]:
    """``failures`` in time order (ties in given order), each a distinct fabric or NIC link of
    ``topology`` failing at an integer ``0 <= at_ns <= max_ns``, and all of them together
    leaving every pair of GPUs on different hosts connected. Raises ``BackendError`` naming
    the offending failure otherwise."""
    seen: set[int] = set()
    for failure in failures:
        link, at_ns = failure.link, failure.at_ns
        if (isinstance(link, bool) or not isinstance(link, int)
                or not 0 <= link < len(topology.links)):
            raise BackendError(f"link failure {failure}: link={link!r} is not a link of topology "
                               f"{topology.name!r} (links 0..{len(topology.links) - 1})")
        name = topology.link_name(link)
        if (isinstance(at_ns, bool) or not isinstance(at_ns, int) or at_ns < 0
                or (max_ns is not None and at_ns > max_ns)):
            raise BackendError(f"link failure of {name}: at_ns={at_ns!r}; expected an integer "
                               f">= 0{'' if max_ns is None else f' and <= {max_ns}'}")
        if link in seen:
            raise BackendError(f"link {name} fails twice; a link that is down stays down")
        seen.add(link)
    partition = topology.partition_by(seen)
    if partition is not None:
        raise BackendError(f"link failures refused: {partition}")
    return tuple(sorted(failures, key=lambda failure: failure.at_ns))
