"""The launcher's control channel: the coordinator's ``launch.launcher.Launcher`` and the
fork server that forks the ranks (``intercept.process.fork_server``), over one
``multiprocessing`` Connection (pickled).

Down (launcher -> fork server): the ``launch.spec.LaunchSpec`` first, then :class:`Spawn` per
rank and one :class:`Shutdown`. Up: :class:`Ready` or :class:`Failed` once the fork server has
prepared the fake device, then :class:`Spawned` per rank and :class:`RankExit` as ranks end.
"""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Spawn:
    """Fork rank ``rank``."""

    rank: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Kill and reap every rank, then exit."""


@dataclass(frozen=True, slots=True)
class Ready:
    """The fork server prepared the fake device and takes :class:`Spawn` requests."""


@dataclass(frozen=True, slots=True)
class Failed:
    """Preparing failed: ``error`` is the exception (``None`` where it does not pickle) and
    ``text`` its traceback."""

    error: BaseException | None
    text: str


@dataclass(frozen=True, slots=True)
class Spawned:
    """Rank ``rank`` runs as process ``pid``."""

    rank: int
    pid: int


@dataclass(frozen=True, slots=True)
class RankExit:
    """A rank process ended: ``returncode`` as ``subprocess`` reports it (``-N``: signal N)."""

    rank: int
    pid: int
    returncode: int


Request = Spawn | Shutdown
"""What the launcher sends after the ``LaunchSpec``."""
Report = Ready | Failed | Spawned | RankExit
"""What the fork server sends."""
