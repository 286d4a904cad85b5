"""The one seam between the simulator and a network model.

A backend simulates byte transfers (*flows*) between GPU endpoints. It is pull-based: the
engine adds flows, then repeatedly calls :meth:`NetworkBackend.advance_to`, which moves the
backend's clock forward and returns the flows that completed. Nothing calls back into Python.

Contract every backend keeps (tests check it for each one):

* ``add_flow(..., start_ns)`` requires ``start_ns >= now_ns()``; an earlier start raises
  :class:`~hwmodel.errors.BackendError` (the engine must never inject into the past).
* ``advance_to(t_ns)`` simulates until ``t_ns`` **or** until the first instant at which at
  least one flow completes, whichever comes first, and returns the flows completed at that
  instant (possibly none). Afterwards ``now_ns()`` is that instant. It never moves backwards.
* ``next_event_ns()`` is a lower bound on the time of the next completion (``None`` when no
  flow is pending), so the engine knows how far it may jump when it has nothing else to do.
* The same inputs give the same outputs (no wall-clock or unseeded randomness).
"""

from dataclasses import dataclass, field
from typing import Protocol

GpuId = int
"""Global GPU index: ``host * gpus_per_host + local_index``."""

FlowId = int
"""Identifier returned by :meth:`NetworkBackend.add_flow`, unique within one backend."""


@dataclass(frozen=True, slots=True)
class FlowDone:
    """A flow whose last byte reached its destination at ``end_ns``."""

    flow_id: FlowId
    end_ns: int


@dataclass(frozen=True, slots=True)
class LinkFailure:
    """Link ``link`` (an index into ``Topology.links``) goes down at ``at_ns`` and stays down;
    routing avoids it from then on (``faults: link_down`` in a scenario)."""

    link: int
    at_ns: int


@dataclass(slots=True)
class NetworkStats:
    """Counters a backend reports for ``summary.json``; backends fill what they know."""

    backend: str
    flows: int = 0
    bytes: int = 0
    extra: dict[str, int | float | str] = field(default_factory=dict)
    hot_ports: list[dict[str, object]] = field(default_factory=list)
    """The few fabric ports that were paused longest or queued most (RoCE), named by link,
    so a report can say where congestion was without listing every port."""


class NetworkBackend(Protocol):
    """What the engine needs from a network model (packet-level ns-3 or fluid max-min)."""

    def add_flow(self, src: GpuId, dst: GpuId, nbytes: int, start_ns: int, tag: int = 0) -> FlowId:
        """Schedule ``nbytes`` from GPU ``src`` to GPU ``dst`` starting at ``start_ns``.

        ``tag`` distinguishes parallel connections between the same pair (e.g. NCCL
        channels): flows with the same ``(src, dst, tag)`` share one connection and are
        delivered in order; different tags may take different ECMP paths.
        """
        ...

    def now_ns(self) -> int:
        """The backend's current simulated time."""
        ...

    def next_event_ns(self) -> int | None:
        """Lower bound on the next flow completion, ``None`` if no flow is pending."""
        ...

    def advance_to(self, t_ns: int) -> list[FlowDone]:
        """Simulate up to ``t_ns`` or the first completion instant; return what completed."""
        ...

    def stats(self) -> NetworkStats:
        """Counters for the report."""
        ...

    def close(self) -> None:
        """Release native resources; the backend is unusable afterwards."""
        ...
