"""The ``sweep:`` block: validation naming the key, grid and zip expansion, replay vs live."""

from pathlib import Path

import pytest

from hwmodel.errors import ScenarioError
from phantora.study.sweep import load_sweep

SCRIPT = """
cluster: {gpu: h100, hosts: 2, gpus_per_host: 1, network: {topology: leaf-spine}}
workload: {script: train.py, nproc_per_node: 1}
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "train.py").write_text("")
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def test_a_scenario_without_sweep_is_not_a_sweep(tmp_path: Path) -> None:
    assert load_sweep(write(tmp_path, SCRIPT)) is None


def test_grid_expands_every_combination_and_network_points_are_replays(tmp_path: Path) -> None:
    sweep = load_sweep(write(tmp_path, SCRIPT + """
sweep:
  parameters:
    cluster.network.nic_bandwidth: [100Gbps, 400Gbps]
    nccl.protocol: [simple, ll, ll128]
"""))
    assert sweep is not None and len(sweep.points) == 6
    assert sweep.points[1].values == {"cluster.network.nic_bandwidth": "100Gbps",
                                      "nccl.protocol": "ll"}
    assert sweep.points[1].scenario is not None
    assert sweep.points[1].scenario.nccl.protocol == "ll"
    assert all(point.replayable for point in sweep.points) and sweep.needs_recording


def test_zip_pairs_values_and_other_keys_run_live(tmp_path: Path) -> None:
    sweep = load_sweep(write(tmp_path, SCRIPT + """
sweep:
  mode: zip
  parameters:
    cluster.hosts: [2, 4]
    workload.nproc_per_node: [1, 1]
"""))
    assert sweep is not None and [p.values["cluster.hosts"] for p in sweep.points] == [2, 4]
    assert not any(point.replayable for point in sweep.points)
    assert not sweep.needs_recording


def test_zip_lists_of_different_lengths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="zip mode needs lists of one length"):
        load_sweep(write(tmp_path, SCRIPT + """
sweep: {mode: zip, parameters: {nccl.protocol: [ll, simple], nccl.channels: [2]}}
"""))


@pytest.mark.parametrize(("sweep", "message"), [
    ("{parameters: {cluster.network.bandwith: [1]}}", "has no key 'bandwith'"),
    ("{parameters: {nccl.protocol.x: [1]}}", "is a value, not a section"),
    ("{parameters: {nccl.protocol: []}}", "sweep.parameters"),
    ("{mode: cartesian, parameters: {nccl.protocol: [ll]}}", "sweep.mode"),
])
def test_bad_sweep_blocks_name_the_key(tmp_path: Path, sweep: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load_sweep(write(tmp_path, SCRIPT + f"sweep: {sweep}\n"))


def test_a_point_the_schema_rejects_is_kept_with_its_error(tmp_path: Path) -> None:
    sweep = load_sweep(write(tmp_path, SCRIPT + """
sweep: {parameters: {nccl.protocol: [ll, fast]}}
"""))
    assert sweep is not None
    good, bad = sweep.points
    assert good.scenario is not None and not good.error
    assert bad.scenario is None and "nccl.protocol" in bad.error


@pytest.mark.parametrize("study", sorted((Path(__file__).resolve().parents[2] / "scenarios"
                                          / "studies").glob("*.yaml")), ids=lambda p: p.stem)
def test_bundled_studies_expand_to_valid_points(study: Path) -> None:
    sweep = load_sweep(study)
    assert sweep is not None and sweep.points
    assert [point.error for point in sweep.points if point.error] == []


def test_a_sweep_over_faults_replays_the_recording(tmp_path: Path) -> None:
    sweep = load_sweep(write(tmp_path, SCRIPT + """
sweep:
  parameters:
    faults:
      - []
      - [{kind: nic_degrade, hosts: [1], factor: 0.5}]
"""))
    assert sweep is not None and len(sweep.points) == 2
    assert all(point.replayable for point in sweep.points) and sweep.needs_recording
    assert [len(p.scenario.faults) for p in sweep.points if p.scenario] == [0, 1]
