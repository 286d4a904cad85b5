"""Every bundled collectives scenario runs end to end through the CLI and writes a sane
summary.json (script scenarios: ``test_live_scenarios.py``)."""

import json
from pathlib import Path

import pytest
import yaml

from phantora.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(path for path in (ROOT / "scenarios").glob("*.yaml")
                   if "collectives" in yaml.safe_load(path.read_text())["workload"])


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_bundled_scenario_runs(scenario: Path, tmp_path: Path) -> None:
    assert main([str(scenario), "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["schema_version"] == 1
    workload = summary["scenario"]["workload"]
    assert len(summary["collectives"]) == len(workload["ops"]) * len(workload["sizes_bytes"])
    for result in summary["collectives"]:
        assert result["time_us"] > 0
        assert result["busbw_gbs"] > 0
        assert result["flows"] > 0
    assert summary["simulated_ns"] > 0


def test_same_scenario_same_numbers(tmp_path: Path) -> None:
    scenario = ROOT / "scenarios" / "2x8-h100-rail-allreduce.yaml"
    runs = []
    for name in ("a", "b"):
        assert main([str(scenario), "--out", str(tmp_path / name)]) == 0
        runs.append(json.loads((tmp_path / name / "summary.json").read_text())["collectives"])
    assert runs[0] == runs[1]


def test_bad_scenario_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {gpu: h300, hosts: 2}\n"
                   "workload: {collectives: {ops: [all_reduce], sizes: [1MiB]}}\n")
    assert main([str(bad)]) == 2
    out = capsys.readouterr().out
    assert 'cluster.gpu: got "h300"' in out
    assert "Traceback" not in out


def test_roce_counters_reach_summary_and_console(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """An oversubscribed spine under a RoCE fabric: the counters of the fabric are in
    summary.json (network.extra under ``inter.``, network.hot_ports) and on the console."""
    scenario = tmp_path / "oversubscribed.yaml"
    scenario.write_text(
        "cluster: {gpu: h100, hosts: 4, gpus_per_host: 1, network: {topology: leaf-spine,\n"
        "  hosts_per_leaf: 1, spines: 1, transport: roce,\n"
        "  roce: {preset: dcqcn-paper, buffer: 2MB}}}\n"
        "workload: {collectives: {ops: [all_to_all], sizes: [16MiB]}}\n")
    assert main([str(scenario), "--out", str(tmp_path / "out")]) == 0
    network = json.loads((tmp_path / "out" / "summary.json").read_text())["network"]
    extra = network["extra"]
    assert extra["inter.transport"] == "roce" and extra["inter.drops"] == 0
    assert extra["inter.ecn_marks"] > 0 and extra["inter.cnps"] > 0
    assert extra["inter.queue_pairs"] % 12 == 0  # every host to every other, per channel
    assert network["hot_ports"][0]["max_queue_bytes"] > 0
    out = capsys.readouterr().out
    assert "fabric (ns-3 roce):" in out and "busiest fabric ports" in out
