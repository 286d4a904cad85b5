"""An output folder holds one run: an earlier run's outputs go, other files stay."""

from pathlib import Path

import pytest

from hwmodel.errors import ScenarioError
from phantora.cli import main
from phantora.report.out_dir import clear_run, clear_sweep

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _fill(folder: Path, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        if "." in name:
            (folder / name).write_text("old")
        else:
            (folder / name).mkdir()
            (folder / name / "inside.txt").write_text("old")


def test_a_run_removes_an_earlier_runs_outputs_and_keeps_other_files(tmp_path: Path) -> None:
    _fill(tmp_path, ["summary.json", "trace.json", "graph", "chakra", "ranks", "notes.txt",
                     "mine"])
    clear_run(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "notes.txt"]


def test_a_replay_may_not_write_over_the_run_it_reads(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="is the run being replayed"):
        clear_run(tmp_path / "run" / ".." / "run", reads=tmp_path / "run")


def test_a_sweep_removes_its_points_results_and_base(tmp_path: Path) -> None:
    _fill(tmp_path, ["results.csv", "results.parquet", "plots", "base", "p0", "p12", "pool",
                     "notes.txt"])
    clear_sweep(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "pool"]


def test_the_cli_leaves_no_stale_trace_or_recording_beside_a_new_summary(tmp_path: Path) -> None:
    _fill(tmp_path, ["trace.json", "graph", "summary.json"])
    assert main([str(SCENARIOS / "h200x2-nvswitch-collectives.yaml"), "--out",
                 str(tmp_path)]) == 0
    assert (tmp_path / "summary.json").read_text() != "old"
    assert not (tmp_path / "trace.json").exists() and not (tmp_path / "graph").exists()
