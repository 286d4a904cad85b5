"""Golden ``summary.json`` numbers of deterministic bundled scenarios: every run of one gives the
same simulated numbers, to the ns.

If a golden changed on purpose, rewrite the goldens with
``PHANTORA_UPDATE_GOLDEN=1 python3 -m pytest tests/integration/test_golden_summaries.py`` and
say why in the commit.
"""

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.live_examples import ROOT

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE_GOLDEN = os.environ.get("PHANTORA_UPDATE_GOLDEN") == "1"

GOLDEN_SCENARIOS = {
    "h200x2-nvswitch-collectives": ({}, 0.0, 0.0),
    "2x8-h100-rail-allreduce": ({}, 0.0, 0.0),
    "h100x2-gpt-ddp": ({"simulation": {"reproducible": True}}, 0.0, 0.0),
}
"""Bundled scenario -> (overrides, relative tolerance of simulated times, of a collective's mean
time). Every run of a scenario gives the same numbers to the ns, scripts included (the live
engine fixes what a kernel beside a collective sees at the kernel's start, however far the
other ranks have run: ``phantora.engine.overlap``), so no tolerance."""


def _numbers(summary: dict[str, Any]) -> dict[str, Any]:
    """What a golden keeps of a summary: simulated results only (no wall or CPU times)."""
    kept: dict[str, Any] = {"simulated_ns": summary["simulated_ns"],
                            "collectives": [{k: row[k] for k in ("op", "bytes", "ranks",
                                                                 "time_us", "algorithm",
                                                                 "protocol", "channels",
                                                                 "flows", "count")}
                                            for row in summary["collectives"]]}
    if summary["workload"] == "script":
        kept["ranks"] = [{k: rank[k] for k in ("rank", "clock_ns", "kernels", "collectives",
                                               "peak_memory_bytes", "peak_reserved_bytes")}
                         for rank in summary["ranks"]]
    return kept


def _assert_close(actual: Any, golden: Any, rel: float, where: str,
                  collective_rel: float = 0.0) -> None:
    """Equal structure; ints and floats named like times within ``rel`` (a collective's mean
    time, under ``collectives``, within ``collective_rel``), the rest exact."""
    if isinstance(golden, dict):
        assert actual.keys() == golden.keys(), where
        for key in golden:
            _assert_close(actual[key], golden[key], rel, f"{where}.{key}", collective_rel)
    elif isinstance(golden, list):
        assert len(actual) == len(golden), where
        for index, (a, g) in enumerate(zip(actual, golden, strict=True)):
            _assert_close(a, g, rel, f"{where}[{index}]", collective_rel)
    elif where.endswith(("_ns", "_us")):
        bound = max(rel, collective_rel) if ".collectives[" in where else rel
        assert actual == pytest.approx(golden, rel=bound, abs=0), where
    else:
        assert actual == golden, where


@pytest.mark.parametrize("name", sorted(GOLDEN_SCENARIOS))
def test_bundled_scenario_matches_its_golden_summary(name: str, tmp_path: Path,
                                                     run_cli: Any) -> None:
    overrides, rel, collective_rel = GOLDEN_SCENARIOS[name]
    source = ROOT / "scenarios" / f"{name}.yaml"
    scenario = {**yaml.safe_load(source.read_text()), **overrides}
    workload = scenario["workload"]
    if "script" in workload:
        workload["script"] = str(source.parent / workload["script"])
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(scenario))
    run_cli([str(path), "--out", str(tmp_path / "out")])
    actual = _numbers(json.loads((tmp_path / "out" / "summary.json").read_text()))
    golden_path = GOLDEN / f"{name}.json"
    if UPDATE_GOLDEN:
        golden_path.parent.mkdir(exist_ok=True)
        golden_path.write_text(json.dumps(actual, indent=1) + "\n")
    golden = json.loads(golden_path.read_text())
    _assert_close(actual, golden, rel, name, collective_rel)
