"""Every error phantora raises on purpose, as one tree, so callers can catch a base class::

    PhantoraError
    ├── ScenarioError          a scenario file is malformed (names file, key path, value, fix)
    │   └── RecordingError     an execution graph is missing, damaged, old, or does not fit
    ├── CatalogueError         an unknown or inconsistent hardware catalogue entry
    ├── MissingDependencyError an optional dependency (ns3, torch) is not installed
    ├── ProfileError           a real GPU profile (Kineto trace) is unreadable or does not fit a run
    ├── CalibrationError       a kernel calibration file is unreadable or of an unknown GPU
    └── SimulationError        something went wrong while simulating
        ├── BackendError       a network backend refused an input or failed
        ├── DeadlockError      live ranks wait on each other (mismatched or missing collectives)
        ├── RankCrashed        a live rank's script raised or its process died
        └── RegroupRanks       rank deduplication guessed wrong: rerun with other classes
"""


class PhantoraError(Exception):
    """Base class of all errors phantora raises deliberately."""


class ScenarioError(PhantoraError):
    """A scenario file (or dict) failed validation; the message says where and how to fix it."""


class CatalogueError(PhantoraError):
    """A hardware catalogue lookup failed (unknown GPU name, missing field)."""


class MissingDependencyError(PhantoraError):
    """An optional dependency is missing; the message names the ``pip install`` that fixes it."""


class ProfileError(PhantoraError, ValueError):
    """A Kineto trace is not one, holds no GPU kernels or steps, or belongs to another run than
    the one it is compared with; the message names the file and says what to record instead."""


class CalibrationError(PhantoraError, ValueError):
    """A kernel calibration file (``phantora-ns3 calibrate``) is missing, not one, of another
    format version or of a GPU the catalogue does not know; the message names the file."""


class SimulationError(PhantoraError):
    """A simulation could not proceed."""


class BackendError(SimulationError):
    """A network backend rejected an input (e.g. a flow starting in its past) or failed."""


class DeadlockError(SimulationError):
    """No live rank can make progress; the message reports what each rank waits for and which
    collectives are incomplete (op, group, seq, bytes, ranks that issued it and that did not)."""


class RankCrashed(SimulationError):
    """A live rank's script raised (``traceback`` holds its text) or its process went away."""

    def __init__(self, rank: int, traceback: str) -> None:
        self.rank = rank
        self.traceback = traceback
        super().__init__(f"rank {rank} failed:\n{traceback.rstrip()}")

    def __reduce__(self) -> tuple[type["RankCrashed"], tuple[int, str]]:
        return RankCrashed, (self.rank, self.traceback)


class RegroupRanks(SimulationError):
    """Rank deduplication (``phantora.engine.rank_classes``) met a group its grid does not fit,
    or a witness whose GPU work differs from its representative's: the run must start again with
    ``groups`` known (and ``wrong`` excluded). ``reason`` says which rank, op and group."""

    def __init__(self, reason: str, groups: frozenset[tuple[int, ...]],
                 wrong: object | None = None) -> None:
        self.reason = reason
        self.groups = groups
        self.wrong = wrong
        super().__init__(reason)
