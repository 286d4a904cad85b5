"""Fluid (flow-level) network model: max-min fair sharing of directed link capacity.

Used for all NVLink traffic (scope ``"intra"``, under :class:`~phantora.network.composite.
CompositeBackend`) and, with the ``flow`` backend, for the whole fabric too.
"""

from phantora.network.flow.backend import FluidBackend
from phantora.network.flow.maxmin import MaxMinSolver
from phantora.network.flow.routing import Scope

__all__ = ["FluidBackend", "MaxMinSolver", "Scope"]
