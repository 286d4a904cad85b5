"""Rank deduplication on real scripts: the same estimate with mirrored ranks as with every rank
live, fewer processes, and a rerun with every rank live when a witness diverges."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.live_examples import SCENARIO_DIR, parse_steps


def run_variant(tmp_path: Path, run_cli: Callable[[list[str]], None], scenario: str,
                dedup: str, **overrides: Any) -> tuple[dict[str, Any], list[float]]:
    """Run a bundled scenario, reproducible, with ``simulation.dedup`` set; its summary and
    rank 0's step times (ms)."""
    spec = yaml.safe_load((SCENARIO_DIR / scenario).read_text())
    spec["workload"]["script"] = str((SCENARIO_DIR / spec["workload"]["script"]).resolve())
    spec["simulation"] = {"reproducible": True, "dedup": dedup}
    for key, value in overrides.items():
        spec[key].update(value)
    path = tmp_path / f"{dedup}.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / dedup
    run_cli([str(path), "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    return summary, [s.wall_ms for s in parse_steps((out / "ranks" / "rank0.log").read_text())]


@pytest.mark.parametrize(("scenario", "overrides", "live_ranks", "regroups"), [
    ("2x4-h100-rail-gpt-ddp.yaml", {}, [0, 7], 0),  # DDP over 8 ranks, ns-3 between hosts
    # FSDP2 x TP=2 on 8 ranks: its first data-parallel all_gather shows the mesh, and the run
    # starts again with one replica of each TP rank
    ("h100x4-gpt-fsdp-tp.yaml",
     {"cluster": {"gpus_per_host": 8}, "workload": {"nproc_per_node": 8}}, [0, 1, 6, 7], 1),
])
def test_mirrored_ranks_give_the_estimate_every_live_rank_gives(
        tmp_path: Path, run_cli: Callable[[list[str]], None], scenario: str,
        overrides: dict[str, Any], live_ranks: list[int], regroups: int) -> None:
    mirrored, mirrored_steps = run_variant(tmp_path, run_cli, scenario, "auto", **overrides)
    live, live_steps = run_variant(tmp_path, run_cli, scenario, "off", **overrides)
    assert mirrored["dedup"]["live_ranks"] == live_ranks
    assert len(mirrored["dedup"].get("regroups", [])) == regroups
    assert not live["dedup"]
    assert sorted((tmp_path / "auto" / "ranks").glob("rank*.log")) == \
        [tmp_path / "auto" / "ranks" / f"rank{rank}.log" for rank in live_ranks]
    assert mirrored["simulated_ns"] == pytest.approx(live["simulated_ns"], rel=0.01)
    assert mirrored_steps == pytest.approx(live_steps, rel=0.01)
    assert [r["peak_memory_bytes"] for r in mirrored["ranks"]] == \
        [r["peak_memory_bytes"] for r in live["ranks"]]
    assert len(mirrored["collectives"]) == len(live["collectives"])


def test_pipeline_stages_are_found_and_run_live(tmp_path: Path,
                                                run_cli: Callable[[list[str]], None]) -> None:
    summary, steps = run_variant(tmp_path, run_cli, "h100x4-llama-pp-1f1b.yaml", "auto")
    # Stage-to-stage sends fit no grid of 4 ranks (or the witness, the last stage, differs):
    # the run starts again with every rank live.
    assert summary["dedup"]["regroups"] and "grid" not in summary["dedup"]
    assert steps and all(step > 0 for step in steps)
