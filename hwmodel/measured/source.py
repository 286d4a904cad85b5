"""The records every measured value of :mod:`hwmodel.measured` is kept in."""

from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

UNKNOWN = "unknown"
"""A provenance field the measurement does not record."""
NO_NCCL = "n/a (one GPU, no NCCL)"
"""The NCCL field of a measurement that ran no collective."""


@dataclass(frozen=True, slots=True)
class Source:
    """Where a measured value comes from."""

    file: str
    """The raw data, relative to the repository root (``scripts/data/...``, ``docs/...``), or
    the public reference it was read off."""
    date: str
    """When it was measured (``YYYY-MM-DD``), or :data:`UNKNOWN`."""
    gpu: str
    """The GPU (and machine) it was measured on, or :data:`UNKNOWN`."""
    nccl: str
    """The NCCL library that ran, :data:`NO_NCCL`, or :data:`UNKNOWN`."""
    torch: str
    """The torch build that ran, or :data:`UNKNOWN`."""
    how: str = ""
    """How the value follows from the raw data."""


@dataclass(frozen=True, slots=True)
class Measured(Generic[T]):
    """A measured value and its source."""

    value: T
    source: Source


@dataclass(frozen=True, slots=True)
class Table:
    """A measured table shipped in ``hwmodel/measured/data/`` and its source (the file
    carries the details: rows, statistics, its own provenance block where it has one)."""

    path: Path
    source: Source
