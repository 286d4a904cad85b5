"""``cluster.cpus_per_host``: the simulated host's logical CPUs, by default the GPU's reference
server per GPU times ``gpus_per_host`` (``hwmodel/catalogue.py``)."""

from typing import Any

import pytest

from hwmodel.errors import ScenarioError
from phantora.scenario import parse_scenario

SOURCE = "scenarios/x.yaml"


def scenario(gpu: str = "h100", gpus_per_host: int = 8, **cluster: Any) -> dict[str, Any]:
    return {"cluster": {"gpu": gpu, "hosts": 1, "gpus_per_host": gpus_per_host, **cluster},
            "workload": {"collectives": {"ops": ["all_reduce"], "sizes": [1048576]}}}


@pytest.mark.parametrize("gpu,gpus_per_host,cpus", [
    ("h100", 8, 224), ("h200", 8, 224), ("b200", 8, 224),  # DGX: 2 x 56 cores, 2 threads each
    ("a100-80g", 8, 256), ("h100", 1, 28), ("h200", 2, 56)])
def test_default_is_the_reference_server_per_gpu(gpu: str, gpus_per_host: int, cpus: int) -> None:
    parsed = parse_scenario(scenario(gpu, gpus_per_host), SOURCE)
    assert parsed.cluster.cpus_per_host == cpus
    assert parsed.echo()["cluster"]["cpus_per_host"] == cpus


def test_a_given_count_is_kept() -> None:
    assert parse_scenario(scenario(cpus_per_host=16), SOURCE).cluster.cpus_per_host == 16


@pytest.mark.parametrize("value", [0, 5000, "many"])
def test_a_count_outside_one_to_4096_names_the_key(value: Any) -> None:
    with pytest.raises(ScenarioError, match=r"cluster\.cpus_per_host: got"):
        parse_scenario(scenario(cpus_per_host=value), SOURCE)
