"""Host profiles (``hwmodel.measured.host_profile``): the file's round trip, clear errors on
a bad one, and the host-cost table and Python weights a profile makes
(``intercept.host_time.host_profile_costs``)."""

import json
from pathlib import Path

import pytest

from hwmodel.measured.host_profile import (HostProfile, HostProfileError, bundled,
                                               load_profile, resolve_host)
from hwmodel.measured.host_references import references
from intercept.host_time.host_cost import load_table
from intercept.host_time.host_profile_costs import (load_host_profile, table_for_profile,
                                                    weights_for_profile)
from intercept.host_time.python_work import weights_for

REFERENCE = "h100-host"


def _profile(tmp_path: Path, **measured: object) -> Path:
    probe = {k: v * 2 for k, v in references().hosts[REFERENCE].components_ns.items()}
    path = tmp_path / "my-host.json"
    path.write_text(json.dumps(HostProfile("my-host", REFERENCE, probe, measured).to_json()))
    return path


def test_a_profile_file_reads_back_as_written(tmp_path: Path) -> None:
    path = _profile(tmp_path, script_call_ns=150, sync_ns={"device": 4000},
                    families_ns={"matmul": 30000})
    profile = load_profile(path)
    assert (profile.name, profile.reference, profile.path) == ("my-host", REFERENCE,
                                                               path.resolve())
    assert profile.measured == {"script_call_ns": 150, "sync_ns": {"device": 4000},
                                "families_ns": {"matmul": 30000}}
    assert profile.probe_scale("calls") == 2.0
    assert load_profile(path).to_json() == json.loads(path.read_text())


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.pop("probe_ns"), "probe_ns: missing"),
    (lambda d: d.update(host_profile_version=7), "host_profile_version: is 7"),
    (lambda d: d.update(reference="laptop"), "'laptop' is no bundled profile"),
    (lambda d: d["measured"].update(warp_drive_ns=3), "measured.warp_drive_ns: unknown"),
    (lambda d: d["measured"].update(script_call_ns=-1), "script_call_ns: -1 is not a positive"),
    (lambda d: d["measured"].update(sync_ns={"teleport": 5}), "measured.sync_ns.teleport"),
])
def test_a_bad_profile_file_names_the_file_the_key_and_the_fix(tmp_path: Path, edit: object,
                                                                words: str) -> None:
    path = _profile(tmp_path, script_call_ns=150)
    data = json.loads(path.read_text())
    edit(data)  # type: ignore[operator]
    path.write_text(json.dumps(data))
    with pytest.raises(HostProfileError) as error:
        load_profile(path)
    assert str(path) in str(error.value) and words in str(error.value)
    assert "phantora-ns3 host-profile --out FILE" in str(error.value)


def test_a_file_that_is_not_json_or_missing_is_refused_clearly(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(HostProfileError, match="not JSON"):
        load_profile(broken)
    with pytest.raises(HostProfileError, match="neither a bundled host profile"):
        resolve_host("nowhere.json", tmp_path)
    assert resolve_host(REFERENCE, tmp_path).bundled


def test_a_bundled_profile_charges_the_shipped_table_and_weights() -> None:
    profile = bundled(REFERENCE)
    assert table_for_profile(profile) == load_table()
    assert weights_for_profile(profile) == weights_for(REFERENCE)
    assert profile.sources() == {"all": f"bundled reference {REFERENCE}"}


def test_a_profile_replaces_what_it_measured_and_scales_the_rest(tmp_path: Path) -> None:
    base = load_table()
    profile = load_host_profile(str(_profile(
        tmp_path, families_ns={"matmul": base.families_ns["matmul"] * 3,
                               "view": base.families_ns["view"] * 3},
        sync_ns={"device": 7000}, tensor_subclass_ns=20000)))
    table = table_for_profile(profile)
    assert table.families_ns["matmul"] == base.families_ns["matmul"] * 3
    # unmeasured costs scale by the measured families' median ratio, not the probe's
    assert table.families_ns["norm"] == round(base.families_ns["norm"] * 3)
    assert table.ops_ns["sort"] == round(base.ops_ns["sort"] * 3)
    assert table.sync_ns["device"] == 7000
    assert table.sync_ns["query"] == round(base.sync_ns["query"] * 3)
    assert table.layers_ns["tensor_subclass"] == 20000
    # Python follows the probe's calls component (2x the reference's) where not measured
    ref = weights_for(REFERENCE)
    assert weights_for_profile(profile).hot.line_ns == pytest.approx(ref.hot.line_ns * 2)
    assert "families_ns" in profile.sources()
    timed = load_host_profile(str(_profile(tmp_path, python_line_ns=40.0, python_call_ns=90.0)))
    weights = weights_for_profile(timed)
    assert (weights.hot.line_ns, weights.hot.call_ns) == (40.0, 90.0)
    assert weights.cold.line_ns / weights.hot.line_ns == pytest.approx(
        ref.cold.line_ns / ref.hot.line_ns)


def test_host_speed_divides_every_host_cost() -> None:
    base = load_table()
    fast = bundled(REFERENCE).at_speed(2.0)
    table = table_for_profile(fast)
    assert table.families_ns["matmul"] == round(base.families_ns["matmul"] / 2)
    assert table.sync_ns["device"] == round(base.sync_ns["device"] / 2)
    assert weights_for_profile(fast).cold.line_ns == pytest.approx(
        weights_for(REFERENCE).cold.line_ns / 2)
    with pytest.raises(HostProfileError, match="positive"):
        bundled(REFERENCE).at_speed(0)


def test_host_profile_without_a_gpu_measures_python_and_says_the_rest_is_the_references(
        tmp_path: Path) -> None:
    from rich.console import Console

    from phantora.cli.commands import run_subcommand

    out = tmp_path / "laptop.json"
    console = Console(record=True, width=200)
    assert run_subcommand("host-profile", ["--out", str(out), "--rounds", "2"], console) == 0
    profile = load_profile(out)
    assert profile.name == "laptop" and profile.reference == references().fallback
    assert profile.provenance["cuda"] is False
    assert {"script_call_ns", "python_line_ns", "python_call_ns"} <= set(profile.measured)
    assert "sync_ns" not in profile.measured
    sources = profile.sources()
    assert sources["other host costs"].startswith(f"{profile.reference} x the probe's torch_ops")
    text = console.export_text()
    assert "other host costs" in text and f"wrote {out}" in text
    # the profile simulates: a table and weights come of it
    assert table_for_profile(profile).reference == "laptop"


def test_a_scenario_names_its_host_profile_and_refuses_a_bad_one(tmp_path: Path) -> None:
    from hwmodel.errors import ScenarioError
    from phantora.scenario import load_scenario

    def scenario(host: str, speed: float = 1.0) -> Path:
        path = tmp_path / "run.yaml"
        path.write_text(f"cluster: {{gpu: h200, gpus_per_host: 1, host: {host}, "
                        f"host_speed: {speed}}}\nworkload: {{script: train.py}}\n")
        (tmp_path / "train.py").write_text("")
        return path

    _profile(tmp_path)
    resolved = load_scenario(scenario("my-host.json", 0.8)).cluster
    assert (resolved.host, resolved.host_speed) == (str((tmp_path / "my-host.json").resolve()),
                                                    0.8)
    assert load_scenario(scenario("h100-host")).cluster.host == "h100-host"
    with pytest.raises(ScenarioError, match="cluster.host") as error:
        load_scenario(scenario("missing.json"))
    assert "neither a bundled host profile" in str(error.value)
    with pytest.raises(ScenarioError, match="cluster.host_speed"):
        load_scenario(scenario("h100-host", 0))
