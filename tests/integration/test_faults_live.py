"""Faults on real runs (``scenarios/faults/``): a straggler GPU moves the steps a synchronous DDP
script logs (and a replay with the fault gives the faulted run), half-rate NICs slow a large
cross-host all_reduce on both network backends, and a link that fails mid-collective loses no
flow."""

import json
from collections.abc import Callable
from pathlib import Path
from statistics import mean
from typing import Any

import pytest
import yaml

from phantora.cli import main
from tests.integration.live_examples import SCENARIO_DIR, parse_steps

FAULTS_DIR = SCENARIO_DIR / "faults"
RunCli = Callable[[list[str]], None]


def run_with_and_without(tmp_path: Path, run_cli: RunCli, scenario: str,
                         **network: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A bundled fault scenario (``network`` keys changed) run without its faults, in
    ``tmp_path/healthy``, and as it is, in ``tmp_path/faulted``: both summaries."""
    spec = yaml.safe_load((FAULTS_DIR / scenario).read_text())
    if "script" in spec["workload"]:
        spec["workload"]["script"] = str((FAULTS_DIR / spec["workload"]["script"]).resolve())
    spec["cluster"].get("network", {}).update(network)
    summaries = []
    for name, faults in (("healthy", []), ("faulted", spec["faults"])):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**spec, "faults": faults}))
        run_cli([str(path), "--out", str(tmp_path / name)])
        summaries.append(json.loads((tmp_path / name / "summary.json").read_text()))
    return summaries[0], summaries[1]


def steady_step_ms(out: Path) -> float:
    """Rank 0's mean logged step time after the first step (which builds the caches)."""
    steps = parse_steps((out / "ranks" / "rank0.log").read_text())
    assert len(steps) == 3, steps
    return mean(step.wall_ms for step in steps[1:])


def test_a_slow_gpu_moves_the_steps_of_compute_bound_ddp(
        tmp_path: Path, run_cli: RunCli, capsys: pytest.CaptureFixture[str]) -> None:
    healthy, slow = run_with_and_without(tmp_path, run_cli, "h100x4-gpt-ddp-slow-gpu.yaml")
    healthy_ms, slow_ms = (steady_step_ms(tmp_path / name) for name in ("healthy", "faulted"))
    assert slow_ms > 1.2 * healthy_ms, (healthy_ms, slow_ms)
    # the attribution shows the others waiting for the straggler at the all_reduce
    waiting = {row["ranks"][0]: row["share"]["waiting"]
               for row in slow["attribution"]["steady_by_rank"]}
    assert min(waiting[rank] for rank in (0, 1, 2)) > 0.1 > 0.01 > waiting[3], waiting
    assert healthy["attribution"]["steady"]["share"]["waiting"] < 0.02
    added = slow["faults"][0]["gpu_ns_added"]
    assert list(added) == ["3"] and added["3"] > 0
    # Rank deduplication mirrors ranks 1 and 2 onto rank 0, but not with a rank slowed.
    assert healthy["dedup"]["mirrored_ranks"] == {"1": 0, "2": 0} and not slow["dedup"]
    assert "rank deduplication off: slow_gpu slows rank(s) 3" in capsys.readouterr().out

    # The healthy run's recording replayed with the fault gives the faulted live run: rank 3,
    # the witness, has a timeline of its own; a mirrored rank has none to slow.
    run_cli(["replay", str(tmp_path / "healthy"), str(tmp_path / "faulted.yaml"),
             "--out", str(tmp_path / "replay")])
    replayed = json.loads((tmp_path / "replay" / "summary.json").read_text())
    assert replayed["simulated_ns"] == pytest.approx(slow["simulated_ns"], rel=1e-3)
    assert replayed["faults"] == slow["faults"]
    spec = yaml.safe_load((tmp_path / "faulted.yaml").read_text())
    spec["faults"][0]["ranks"] = [1]
    mirror = tmp_path / "mirror.yaml"
    mirror.write_text(yaml.safe_dump(spec))
    assert main(["replay", str(tmp_path / "healthy"), str(mirror), "--out",
                 str(tmp_path / "refused")]) == 1
    assert "record the run with simulation.dedup: off" in capsys.readouterr().out


def all_reduce_us(summary: dict[str, Any], nbytes: int) -> float:
    (row,) = [row for row in summary["collectives"] if row["bytes"] == nbytes]
    return float(row["time_us"])


LARGE = 64 * 2**20


@pytest.mark.parametrize("backend", ["flow", "ns3"])
def test_half_rate_nics_slow_a_large_all_reduce(tmp_path: Path, run_cli: RunCli,
                                                 backend: str) -> None:
    healthy, degraded = run_with_and_without(tmp_path, run_cli, "2x2-h100-rail-nic-degrade.yaml",
                                             backend=backend)
    assert all_reduce_us(degraded, LARGE) > 1.5 * all_reduce_us(healthy, LARGE)
    row = degraded["faults"][0]
    assert (row["nic_gbps_before"], row["nic_gbps_after"]) == (400.0, 200.0)
    assert row["bytes_through_nics"] > LARGE  # host 1's share of the all_reduce's traffic


@pytest.mark.parametrize("backend", ["flow", "ns3"])
def test_a_link_failing_mid_collective_loses_no_flow(tmp_path: Path, run_cli: RunCli,
                                                     backend: str) -> None:
    healthy, failed = run_with_and_without(tmp_path, run_cli,
                                           "2x2-h100-leafspine-link-down.yaml", backend=backend)
    # The 64 MiB all_reduce starts after the 1 MiB one: the link fails while it runs.
    start_us = all_reduce_us(healthy, 2**20)
    assert start_us < 500 < start_us + all_reduce_us(healthy, LARGE)
    assert [row["bytes"] for row in failed["collectives"]] == [2**20, LARGE]
    assert failed["network"]["flows"] == healthy["network"]["flows"]
    counters = failed["faults"][0]["network"]
    assert counters["link_failures"] == 1
    assert counters.get("rerouted_connections", counters.get("changed_routes", 0)) > 0
    if backend == "flow":  # max-min fills both spines until one fails
        assert all_reduce_us(failed, LARGE) > 1.1 * all_reduce_us(healthy, LARGE)
    else:  # every flow's last byte arrived (hash ECMP had crowded one spine already)
        assert failed["network"]["extra"]["inter.completed_flows"] == \
            healthy["network"]["extra"]["inter.completed_flows"]
