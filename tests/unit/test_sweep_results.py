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


def test_points_that_differ_only_in_faults_get_their_own_labelled_bars() -> None:
    """The attribution plot places a bar per point: two points whose dotted keys agree (one
    with a fault) used to share one place, the later bar hiding the earlier."""
    from phantora.study.plots import _point_label

    keys = ["cluster.network.topology", "cluster.network.oversubscription"]
    healthy = {"point": 0, "cluster.network.topology": "rail-optimized",
               "cluster.network.oversubscription": 1, "faults": "[]"}
    degraded = {**healthy, "point": 9,
                "faults": "[{'kind': 'nic_degrade', 'hosts': [3], 'factor': 0.5}]"}
    assert _point_label(healthy, keys) == "p0\nrail-optimized\noversubscription=1"
    assert _point_label(degraded, keys) == "p9\nrail-optimized\noversubscription=1\nnic_degrade"
