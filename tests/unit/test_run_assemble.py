"""Scenario cluster → Topology: node and link counts per topology, rates and latencies."""

from collections import Counter
from typing import Any

import pytest

from phantora.cluster.topology import LinkKind, Topology
from phantora.scenario.cluster_graph import NVLINK_LATENCY_NS, build_topology, host_spec
from phantora.scenario import ClusterConfig, parse_scenario


def cluster(**keys: Any) -> ClusterConfig:
    data = {"cluster": keys, "workload": {"collectives": {"ops": ["all_reduce"], "sizes": [64]}}}
    return parse_scenario(data, "test.yaml").cluster


def counts(topo: Topology) -> tuple[dict[str, int], dict[str, int]]:
    """(nodes per kind, links per kind)."""
    return (dict(Counter(node.kind.value for node in topo.nodes)),
            dict(Counter(link.kind.value for link in topo.links)))


def assert_all_pairs_routed(topo: Topology) -> None:
    """Every GPU reaches every GPU on another host through the fabric."""
    for src in range(topo.num_gpus):
        for dst in range(topo.num_gpus):
            if not topo.same_host(src, dst):
                path = topo.fabric_path(src, dst, flow_key=src * 1000 + dst)
                assert topo.links[path[0]].kind is LinkKind.NIC
                assert topo.links[path[-1]].kind is LinkKind.NIC


def test_single_host_is_gpus_on_one_nvswitch() -> None:
    topo = build_topology(cluster(gpu="h100", gpus_per_host=4))
    assert topo.name == "single-host"
    assert counts(topo) == ({"nvswitch": 1, "gpu": 4}, {"nvlink": 4})
    assert {(link.gbps, link.latency_ns) for link in topo.links} == {(3600.0, NVLINK_LATENCY_NS)}


def test_single_host_nic_rate_comes_from_the_catalogue() -> None:
    assert host_spec(cluster(gpu="a100-80g")).nic_gbps == 200.0


def test_rail_optimized_has_one_rail_per_local_gpu() -> None:
    topo = build_topology(cluster(gpu="h100", hosts=4, gpus_per_host=8))
    # Rail switch: 4 hosts x 400 Gbps down -> 4 spines of 400 Gbps up; 8 rails x 4 spines.
    assert counts(topo) == ({"nvswitch": 4, "gpu": 32, "rail": 8, "spine": 4},
                            {"nvlink": 32, "nic": 32, "fabric": 32})
    assert_all_pairs_routed(topo)


def test_rail_optimized_with_one_gpu_per_host_has_no_spines() -> None:
    topo = build_topology(cluster(gpu="h100", hosts=3, gpus_per_host=1))
    assert counts(topo) == ({"nvswitch": 3, "gpu": 3, "rail": 1}, {"nvlink": 3, "nic": 3})
    assert_all_pairs_routed(topo)


def test_leaf_spine_follows_hosts_per_leaf_and_oversubscription() -> None:
    topo = build_topology(cluster(gpu="h100", hosts=8, network={
        "topology": "leaf-spine", "oversubscription": 4}))
    # 4 hosts per leaf (32 // 8) -> 2 leaves; 32 x 400 Gbps down / 4 / 400 Gbps = 8 spines.
    assert counts(topo) == ({"nvswitch": 8, "gpu": 64, "leaf": 2, "spine": 8},
                            {"nvlink": 64, "nic": 64, "fabric": 16})
    assert_all_pairs_routed(topo)


def test_leaf_spine_on_one_leaf_has_no_spines() -> None:
    topo = build_topology(cluster(gpu="h100", hosts=3, gpus_per_host=4,
                                  network={"topology": "leaf-spine", "hosts_per_leaf": 4}))
    assert counts(topo) == ({"nvswitch": 3, "gpu": 12, "leaf": 1}, {"nvlink": 12, "nic": 12})


def test_fat_tree_has_five_k_squared_over_four_switches() -> None:
    topo = build_topology(cluster(gpu="h100", hosts=8, network={"topology": "fat-tree"}))
    # 64 GPUs -> k = 8 (128 ports): 8 pods x (4 edge + 4 agg) + 16 cores; edge-agg links
    # 8 pods x 4 x 4 = 128, agg-core links 8 pods x 4 aggs x 4 = 128.
    assert counts(topo) == ({"nvswitch": 8, "gpu": 64, "leaf": 32, "agg": 32, "core": 16},
                            {"nvlink": 64, "fabric": 256, "nic": 64})
    assert_all_pairs_routed(topo)


@pytest.mark.parametrize("topology", ["rail-optimized", "leaf-spine", "fat-tree"])
def test_links_carry_the_configured_rates_and_latency(topology: str) -> None:
    topo = build_topology(cluster(gpu="h200", hosts=2, gpus_per_host=2, nvlink_bandwidth="1Tbps",
                                  network={"topology": topology, "nic_bandwidth": "200Gbps",
                                           "link_bandwidth": "800Gbps", "link_latency": "1us"}))
    expected = {LinkKind.NVLINK: (1000.0, NVLINK_LATENCY_NS), LinkKind.NIC: (200.0, 1000),
                LinkKind.FABRIC: (800.0, 1000)}
    for link in topo.links:
        assert (link.gbps, link.latency_ns) == expected[link.kind]
