"""A sweep's results table: one row per point, written as CSV and (with pyarrow) Parquet."""

import csv
from pathlib import Path

import pytest
from rich.console import Console

from phantora.study.results import write_table


def test_a_swept_key_of_mixed_types_is_written_as_text(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [{"point": 0, "nccl.channels": "auto", "status": "ok", "simulated_ms": 1, "busbw_gbs": None},
            {"point": 1, "nccl.channels": 16, "status": "ok", "simulated_ms": 2.5, "busbw_gbs": None},
            {"point": 2, "nccl.channels": 8, "status": "error", "simulated_ms": None, "busbw_gbs": None}]
    written = write_table(rows, tmp_path, Console(quiet=True))
    table = pq.read_table(tmp_path / "results.parquet").to_pydict()
    assert table["nccl.channels"] == ["auto", "16", "8"]
    assert table["simulated_ms"] == [1.0, 2.5, None]  # ints and floats stay numbers
    with (tmp_path / "results.csv").open() as out:
        assert [row["nccl.channels"] for row in csv.DictReader(out)] == ["auto", "16", "8"]
    assert tmp_path / "results.csv" in written
