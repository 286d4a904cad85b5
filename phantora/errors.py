"""Every error phantora raises on purpose, as one tree, so callers can catch a base class::

    PhantoraError
    ├── ScenarioError          a scenario file is malformed (names file, key path, value, fix)
    ├── CatalogueError         an unknown or inconsistent hardware catalogue entry
    ├── MissingDependencyError an optional dependency (ns3, torch) is not installed
    └── SimulationError        something went wrong while simulating
        └── BackendError       a network backend refused an input or failed
"""


class PhantoraError(Exception):
    """Base class of all errors phantora raises deliberately."""


class ScenarioError(PhantoraError):
    """A scenario file (or dict) failed validation; the message says where and how to fix it."""


class CatalogueError(PhantoraError):
    """A hardware catalogue lookup failed (unknown GPU name, missing field)."""


class MissingDependencyError(PhantoraError):
    """An optional dependency is missing; the message names the ``pip install`` that fixes it."""


class SimulationError(PhantoraError):
    """A simulation could not proceed."""


class BackendError(SimulationError):
    """A network backend rejected an input (e.g. a flow starting in its past) or failed."""
