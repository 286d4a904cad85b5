"""Readers of the raw measurement data under ``data/`` that the scripts (which write and
validate it) and the tests both use: where each set lives, text that may be stored gzipped,
a traced or simulated step's kernel time, and a load of busy CPUs to measure under.

Not part of the installed product: nothing in ``phantora``, ``intercept``, ``launch``,
``hwmodel`` or ``wire`` imports it (``[tool.importlinter]`` in ``pyproject.toml``)."""

from __future__ import annotations

import gzip
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository root."""
DATA = ROOT / "data"
"""The raw measurements, one folder per set, each with a README (``data/README.md``)."""
STEPS = DATA / "steps"
TRACES = DATA / "traces"
COLLECTIVES = DATA / "collectives"
TRAFFIC = DATA / "traffic"
MEASURE = DATA / "measure"
"""What only the measuring scripts and their fits read (kernels, ops, host costs, ...)."""


def stored(path: Path) -> Path:
    """``path`` as stored: itself, or ``<path>.gz`` where only the compressed copy is there."""
    if path.exists() or path.suffix == ".gz":
        return path
    packed = path.with_name(path.name + ".gz")
    return packed if packed.exists() else path


def read_text(path: Path) -> str:
    """The text of ``path`` or of its gzipped copy ``<path>.gz``; a ``.gz`` path is unpacked."""
    path = stored(path)
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as stream:
            return stream.read()
    return path.read_text(encoding="utf-8")


def stored_glob(folder: Path, pattern: str) -> list[Path]:
    """The files of ``folder`` matching ``pattern``, each plain or gzipped (``<name>.gz``), in the
    order of their plain names."""
    found = {*folder.glob(pattern), *folder.glob(pattern + ".gz")}
    return sorted(found, key=lambda path: str(path)[:-3] if path.name.endswith(".gz") else str(path))


def plain_name(path: Path) -> str:
    """``path``'s name without a ``.gz`` ending: the name its readers know it by."""
    return path.name[:-3] if path.name.endswith(".gz") else path.name
