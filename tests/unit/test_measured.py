"""Every measured value of ``hwmodel.measured`` names a source that exists, with each
provenance field filled in (``unknown`` where the measurement does not say)."""

import re
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path

import pytest

from hwmodel.measured import collectives, gpu, tables
from hwmodel.measured.source import Measured, Source, Table

ROOT = Path(__file__).resolve().parents[2]
REPO_PATH = re.compile(r"(?:scripts|docs)/[\w./-]+")


def _records() -> list[tuple[str, Measured[object] | Table]]:
    found: list[tuple[str, Measured[object] | Table]] = []
    for module in (gpu, collectives, tables):
        for name, value in vars(module).items():
            if isinstance(value, Measured | Table):
                found.append((f"{module.__name__}.{name}", value))
            elif isinstance(value, Mapping):
                found += [(f"{module.__name__}.{name}[{key}]", item)
                          for key, item in value.items() if isinstance(item, Measured | Table)]
    return found


RECORDS = _records()


def test_the_records_are_found() -> None:
    names = {name.split(".")[-1].split("[")[0] for name, _ in RECORDS}
    assert {"KERNEL_GAP_NS", "HOST_LINK_GBS", "KERNEL_BY_COLLECTIVE_COMPUTE", "LINK_EFFICIENCY",
            "LATENCY_SCALE", "KERNEL_TABLES", "HOST_COSTS", "HOST_SPEED"} <= names


@pytest.mark.parametrize(("name", "record"), RECORDS, ids=[name for name, _ in RECORDS])
def test_a_source_is_complete_and_its_files_exist(name: str, record: Measured[object] | Table
                                                  ) -> None:
    source: Source = record.source
    for field in fields(Source):
        if field.name != "how":
            assert getattr(source, field.name).strip(), f"{name}: {field.name} is empty"
    for path in REPO_PATH.findall(source.file):
        assert (ROOT / path.rstrip(".,")).exists(), f"{name}: {path} does not exist"
    if isinstance(record, Table):
        assert record.path.is_file(), record.path
