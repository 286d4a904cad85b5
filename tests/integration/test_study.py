"""Sweeps, record and replay end to end through the CLI (sequential path: CI has no Ray)."""

import csv
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from phantora.cli import main
from phantora.report.attribution import PARTS

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

COLLECTIVES_SWEEP = """
cluster: {gpu: h100, hosts: 2, gpus_per_host: 2, network: {backend: flow}}
workload: {collectives: {ops: [all_reduce], sizes: [1MiB]}}
sweep:
  parameters:
    cluster.network.nic_bandwidth: [100Gbps, 400Gbps]
    nccl.protocol: [simple, bogus]
"""


def rows(out: Path) -> list[dict[str, str]]:
    with (out / "results.csv").open() as table:
        return list(csv.DictReader(table))


def test_a_collectives_sweep_runs_every_point_and_keeps_failed_ones(tmp_path: Path) -> None:
    scenario = tmp_path / "sweep.yaml"
    scenario.write_text(COLLECTIVES_SWEEP)
    assert main([str(scenario), "--out", str(tmp_path / "out")]) == 0
    table = rows(tmp_path / "out")
    assert [row["status"] for row in table] == ["ok", "error", "ok", "error"], table
    assert all(row["mode"] == "live" for row in table if row["status"] == "ok")
    assert "nccl.protocol" in table[1]["error"]
    slow, fast = float(table[0]["busbw_gbs"]), float(table[2]["busbw_gbs"])
    assert fast > 2 * slow  # 400G NICs against 100G


@pytest.mark.slow
def test_script_sweep_records_once_and_replays_every_point(tmp_path: Path) -> None:
    """The bundled 4-point NCCL sweep: one live recording, four replays; then the recording
    replays on its own scenario within 5% and is refused (exit 2) for another rank count."""
    study = SCENARIOS / "studies" / "h100x2-gpt-ddp-nccl-sweep.yaml"
    out = tmp_path / "sweep"
    assert main([str(study), "--out", str(out)]) == 0
    table = rows(out)
    assert len(table) == 4 and {row["mode"] for row in table} == {"replay"}
    assert all(row["status"] == "ok" for row in table), table
    assert (out / "base" / "graph" / "meta.json").is_file()
    busbw = {(row["nccl.protocol"], row["nccl.channels"]): float(row["busbw_gbs"])
             for row in table}
    assert busbw[("ll", "16")] > busbw[("ll", "2")]  # channels matter to the collectives
    for row in table:  # each point's steady step, split into its attribution's parts
        parts_ms = sum(float(row[f"{part}_ms"]) for part in PARTS)
        assert float(row["step_ms"]) == pytest.approx(parts_ms, rel=1e-3)
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "plots" / "attribution.png").is_file()

    replay_out = tmp_path / "replay"
    assert main(["replay", str(out / "base"), str(SCENARIOS / "h100x2-gpt-ddp.yaml"),
                 "--out", str(replay_out)]) == 0
    summary = json.loads((replay_out / "summary.json").read_text())
    assert abs(summary["replay"]["difference_pct"]) <= 5.0
    live = json.loads((out / "base" / "summary.json").read_text())
    assert summary["simulated_ns"] == pytest.approx(live["simulated_ns"], rel=0.05)
    assert summary["replay"]["not_replayed"]
    # the replay moves the live run's step ends onto its own clock
    replayed, recorded = summary["attribution"], live["attribution"]
    assert len(replayed["steps"]) == len(recorded["steps"]) > 1
    assert replayed["steady"]["step_ns"] == pytest.approx(recorded["steady"]["step_ns"],
                                                          rel=0.05)

    assert main(["replay", str(out / "base"), str(SCENARIOS / "2x4-h100-rail-gpt-ddp.yaml"),
                 "--out", str(tmp_path / "bad")]) == 2
    shutil.rmtree(out / "base" / "graph")
    assert main(["replay", str(out / "base"), str(SCENARIOS / "h100x2-gpt-ddp.yaml"),
                 "--out", str(tmp_path / "bad")]) == 2
