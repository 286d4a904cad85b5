"""``simulation.host_cpu`` and ``host_time``: validated against the shipped reference hosts,
defaulted by GPU; ``native`` only with measured host time."""

from typing import Any

import pytest

from hwmodel.errors import ScenarioError
from phantora.scenario import parse_scenario

SOURCE = "scenarios/x.yaml"


def scenario(gpu: str = "h100", **simulation: Any) -> dict[str, Any]:
    return {"cluster": {"gpu": gpu, "hosts": 1, "gpus_per_host": 1},
            "workload": {"collectives": {"ops": ["all_reduce"], "sizes": [1048576]}},
            **({"simulation": simulation} if simulation else {})}


@pytest.mark.parametrize("gpu,host", [("h100", "h100-host"), ("h200", "h200-host"),
                                      ("a100-80g", "h100-host"), ("b200", "h100-host")])
def test_default_is_the_reference_host_of_the_gpu_else_the_h100s(gpu: str, host: str) -> None:
    assert parse_scenario(scenario(gpu), SOURCE).simulation.host_cpu == host


@pytest.mark.parametrize("given,resolved", [("native", "native"), ("NATIVE", "native"),
                                            ("h200-host", "h200-host")])
def test_a_given_host_cpu_is_kept(given: str, resolved: str) -> None:
    parsed = parse_scenario(scenario("h100", host_cpu=given, host_time="measured"), SOURCE)
    assert parsed.simulation.host_cpu == resolved
    assert parsed.echo()["simulation"]["host_cpu"] == resolved


def test_an_unknown_host_cpu_names_the_key_and_the_choices() -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario(host_cpu="h100host"), SOURCE)
    assert str(caught.value) == (
        f'{SOURCE}: simulation.host_cpu: got "h100host"; expected one of h100-host, h200-host, '
        'native; did you mean "h100-host"?')


def test_host_cpu_must_be_text() -> None:
    with pytest.raises(ScenarioError, match=r"simulation\.host_cpu: got 1;"):
        parse_scenario(scenario(host_cpu=1), SOURCE)


def test_host_time_is_counted_by_default_and_native_needs_it_measured() -> None:
    assert parse_scenario(scenario(), SOURCE).simulation.host_time == "counted"
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(scenario(host_cpu="native"), SOURCE)
    assert "host_cpu: native means this machine's measured CPU time; set host_time: " \
           "measured with it" in str(caught.value)
    assert parse_scenario(scenario(host_cpu="native", reproducible=True), SOURCE)
    with pytest.raises(ScenarioError, match=r"simulation\.host_time: .*counted.*measured"):
        parse_scenario(scenario(host_time="exact"), SOURCE)
