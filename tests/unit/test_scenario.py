"""Scenario loading: defaults resolved, and every error message naming file, key, value and fix."""

import json
import re
import textwrap
from pathlib import Path
from typing import Any, get_args

import pytest

from hwmodel.catalogue import CATALOGUE
from hwmodel.errors import ScenarioError
from phantora.scenario import DTYPE_BYTES, load_scenario, parse_scenario
from phantora.scenario.messages import did_you_mean
from phantora.scenario.model import Dtype

SOURCE = "scenarios/x.yaml"
WORKLOAD: dict[str, Any] = {"collectives": {"ops": ["all_reduce"], "sizes": [1048576]}}


def scenario(cluster: dict[str, Any], workload: dict[str, Any] | None = None,
             **top: Any) -> dict[str, Any]:
    return {"cluster": cluster, "workload": WORKLOAD if workload is None else workload, **top}


def problems(data: Any) -> list[str]:
    """The lines of the ScenarioError that ``data`` raises."""
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, SOURCE)
    lines = str(caught.value).splitlines()
    assert all(line.startswith(f"{SOURCE}: ") for line in lines), lines
    return lines


def only_problem(data: Any) -> str:
    lines = problems(data)
    assert len(lines) == 1, lines
    return lines[0]


def write(tmp_path: Path, text: str, name: str = "fsdp16.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# -- defaults and units -------------------------------------------------------------------------

def test_single_host_defaults_are_resolved() -> None:
    resolved = parse_scenario(scenario({"gpu": "h100"}), SOURCE)
    assert resolved.name == "x" and resolved.seed == 0 and resolved.source == SOURCE
    cluster = resolved.cluster
    assert (cluster.gpu, cluster.hosts, cluster.gpus_per_host) == ("h100", 1, 8)
    assert cluster.nvlink_gbps == 3600.0  # H100: 18 NVLink4 links x 25 GB/s per direction
    assert cluster.network is None
    assert resolved.nccl.model_dump() == {"algorithm": "auto", "protocol": "auto",
                                          "channels": None, "nvls": False}
    workload = resolved.workload
    assert workload.dtype == "bf16" and workload.dtype_bytes == 2
    assert workload.ranks == tuple(range(8))
    assert workload.sizes_bytes == (1048576,)


def test_multi_host_network_defaults_come_from_the_catalogue() -> None:
    network = parse_scenario(scenario({"gpu": "A100-80G", "hosts": 2}), SOURCE).cluster.network
    assert network is not None
    assert network.topology.kind == "rail-optimized"
    assert network.nic_gbps == 200.0 and network.link_gbps == 200.0  # DGX A100: 200G NICs
    assert network.link_latency_ns == 500 and network.mtu_bytes == 9000
    assert network.switch_buffer_bytes == 4 * 2**20
    assert (network.transport, network.backend) == ("roce", "ns3")
    assert network.roce is not None and network.roce.preset == "simai"


def test_roce_preset_scaled_to_the_nic_with_single_overrides() -> None:
    network = parse_scenario(scenario({"gpu": "A100-80G", "hosts": 2, "network": {
        "transport": "RoCE", "roce": {"preset": "dcqcn-paper", "pfc_watchdog": "5ms",
                                      "dcqcn_rate_ai": "100Mbps", "headroom": "200KB"}}}),
        SOURCE).cluster.network
    assert network is not None and network.roce is not None
    roce = network.roce
    assert roce.preset == "dcqcn-paper" and roce.ecn_kmin_bytes == 25_000  # 5 KB x 200G / 40G
    assert (roce.pfc_watchdog_ns, roce.dcqcn_rate_ai_gbps, roce.headroom_bytes) == (
        5_000_000, 0.1, 200_000)
    assert roce.dcqcn_rate_hai_gbps == 0.2 and roce.pfc  # the rest from the preset


def test_default_ecn_threshold_follows_the_dctcp_guideline() -> None:
    network = parse_scenario(scenario({"gpu": "h100", "hosts": 2}), SOURCE).cluster.network
    assert network is not None
    # Cross-rail path GPU-rail-spine-rail-GPU = 4 links: RTT = 2*4*500 ns + 4 * 9000 B * 8 /
    # 400 Gbps = 4720 ns; BDP = 400 Gbps * 4720 ns / 8 = 236000 B; K = 0.17 * BDP = 40120 B.
    assert network.ecn_threshold_bytes == 40120


def test_default_ecn_threshold_stays_below_half_the_buffer() -> None:
    cluster = {"gpu": "h100", "hosts": 2,
               "network": {"switch_buffer": 20000, "link_latency": "10us",
                           "transport": "dctcp"}}
    network = parse_scenario(scenario(cluster), SOURCE).cluster.network
    assert network is not None and network.ecn_threshold_bytes == 10000


def test_units_are_parsed_into_base_units() -> None:
    cluster = {"gpu": "h200", "hosts": 2, "nvlink_bandwidth": "450GBps",
               "network": {"nic_bandwidth": "50GBps", "link_bandwidth": "800Gbps",
                           "link_latency": "1.5us", "switch_buffer": "8MiB",
                           "ecn_threshold": "100KB", "transport": "dctcp"}}
    workload = {"collectives": {"ops": ["all_reduce"], "sizes": [65536, "1MiB", "1GiB"]}}
    resolved = parse_scenario(scenario(cluster, workload), SOURCE)
    network = resolved.cluster.network
    assert resolved.cluster.nvlink_gbps == 3600.0
    assert network is not None
    assert (network.nic_gbps, network.link_gbps, network.link_latency_ns) == (400.0, 800.0, 1500)
    assert (network.switch_buffer_bytes, network.ecn_threshold_bytes) == (8 * 2**20, 100_000)
    assert resolved.workload.sizes_bytes == (65536, 2**20, 2**30)


def test_size_sweep_expands_like_nccl_tests() -> None:
    sweep = {"ops": ["all_reduce"], "sizes": {"min": "64KiB", "max": "1MiB"}}
    assert parse_scenario(scenario({"gpu": "h100"}, {"collectives": sweep}), SOURCE) \
        .workload.sizes_bytes == (65536, 131072, 262144, 524288, 1048576)
    sweep["sizes"] = {"min": 1024, "max": 100000, "factor": 4}
    assert parse_scenario(scenario({"gpu": "h100"}, {"collectives": sweep}), SOURCE) \
        .workload.sizes_bytes == (1024, 4096, 16384, 65536)


def test_choices_are_case_insensitive() -> None:
    cluster = {"gpu": "H200", "hosts": 2, "network": {"topology": "Leaf-Spine",
                                                      "transport": "DCTCP", "backend": "Flow"}}
    nccl = {"algorithm": "Ring", "protocol": "LL128", "channels": "AUTO"}
    workload = {"collectives": {"ops": ["All_Reduce"], "sizes": [1024], "dtype": "FP32"}}
    resolved = parse_scenario(scenario(cluster, workload, nccl=nccl), SOURCE)
    assert resolved.cluster.gpu == "h200" and resolved.workload.ops == ("all_reduce",)
    assert (resolved.nccl.algorithm, resolved.nccl.protocol) == ("ring", "ll128")
    assert resolved.cluster.network is not None and resolved.cluster.network.backend == "flow"


def test_leaf_spine_spine_count_follows_oversubscription() -> None:
    def fabric(network: dict[str, Any]) -> Any:
        cluster = {"gpu": "h100", "hosts": 8, "network": {"topology": "leaf-spine", **network}}
        resolved_network = parse_scenario(scenario(cluster), SOURCE).cluster.network
        assert resolved_network is not None
        return resolved_network.topology

    # A leaf holds 32 // 8 = 4 hosts: 32 NICs x 400 Gbps = 12800 Gbps down.
    assert fabric({}).model_dump() == {"kind": "leaf-spine", "hosts_per_leaf": 4, "leaves": 2,
                                       "spines": 32, "oversubscription": 1.0}
    assert fabric({"oversubscription": 4}).spines == 8
    assert fabric({"spines": 16}).oversubscription == 2.0
    assert fabric({"spines": 8, "oversubscription": 4}).spines == 8  # consistent: accepted
    # 800G spine links: 12800 / 3 / 800 = 5.33 -> 6 spines, 12800 / 4800 = 2.67 as built.
    built = fabric({"oversubscription": 3, "link_bandwidth": "800Gbps"})
    assert built.spines == 6 and built.oversubscription == pytest.approx(12800 / 4800)


def test_fat_tree_k_defaults_to_the_smallest_that_fits() -> None:
    for hosts, k in ((2, 4), (3, 6), (8, 8)):  # k^3/4 = 16, 54, 128 NIC ports
        cluster = {"gpu": "h100", "hosts": hosts, "network": {"topology": "fat-tree"}}
        network = parse_scenario(scenario(cluster), SOURCE).cluster.network
        assert network is not None and network.topology.model_dump() == {"kind": "fat-tree",
                                                                          "k": k}


def test_name_seed_channels_and_ranks_are_kept() -> None:
    nccl = {"channels": 16, "nvls": True, "algorithm": "nvls"}
    workload = {"collectives": {"ops": ["all_gather"], "sizes": [4096], "ranks": [3, 1]}}
    resolved = parse_scenario(scenario({"gpu": "b200"}, workload, name="ag", seed=7, nccl=nccl),
                              SOURCE)
    assert (resolved.name, resolved.seed, resolved.nccl.channels) == ("ag", 7, 16)
    assert resolved.workload.ranks == (3, 1)


def test_echo_is_json_and_holds_resolved_values() -> None:
    echo = parse_scenario(scenario({"gpu": "h100", "hosts": 2}), SOURCE).echo()
    assert json.loads(json.dumps(echo)) == echo
    assert echo["cluster"]["num_gpus"] == 16
    assert echo["cluster"]["network"]["topology"] == {"kind": "rail-optimized", "spines": 2,
                                                      "oversubscription": 1.0}
    assert echo["workload"]["ranks"] == list(range(16))


def test_dtype_sizes_cover_every_dtype() -> None:
    assert set(DTYPE_BYTES) == set(get_args(Dtype))


# -- the error messages from the task, verbatim --------------------------------------------------

def test_rate_without_unit_names_file_key_value_and_fix() -> None:
    cluster = {"gpu": "h100", "hosts": 2, "network": {"link_bandwidth": "400G"}}
    assert only_problem(scenario(cluster)).startswith(
        'scenarios/x.yaml: cluster.network.link_bandwidth: got "400G"; expected a rate with a '
        'unit, e.g. "400Gbps" or "50GBps"')


def test_unknown_key_suggests_the_intended_one() -> None:
    assert only_problem(scenario({"gpu": "h100", "netwrok": {}})) == (
        'scenarios/x.yaml: cluster.netwrok: unknown key; did you mean "network"? '
        "(allowed: gpu, hosts, gpus_per_host, cpus_per_host, nvlink_bandwidth, network, "
        "calibration, host, host_speed)")


def test_unknown_gpu_lists_the_catalogue() -> None:
    assert only_problem(scenario({"gpu": "h300"})) == (
        'scenarios/x.yaml: cluster.gpu: got "h300"; expected one of '
        + ", ".join(sorted(CATALOGUE)))


def test_k_too_small_shows_every_factor() -> None:
    cluster = {"gpu": "h100", "hosts": 8, "network": {"topology": "fat-tree", "k": 4}}
    assert only_problem(scenario(cluster)) == (
        "scenarios/x.yaml: cluster.network.k: 4 gives 16 NIC ports (k^3/4), but cluster.hosts "
        "(8) x cluster.gpus_per_host (8) = 64 GPUs; use k >= 8")


# -- more key errors ---------------------------------------------------------------------------

@pytest.mark.parametrize(("data", "expected"), [
    (scenario({"gpu": "h100", "hosts": 0}),
     "cluster.hosts: got 0; expected an integer from 1 to 4096"),
    (scenario({"gpu": "h100", "hosts": "2"}),
     'cluster.hosts: got "2"; expected an integer from 1 to 4096'),
    (scenario({"gpu": "h100", "hosts": 10**30}),
     "cluster.hosts: got 1000000000000000000000000000000; expected an integer from 1 to 4096"),
    (scenario({"gpu": "h100", "gpus_per_host": 17}),
     "cluster.gpus_per_host: got 17; expected an integer from 1 to 16"),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"mtu": 100}}),
     "cluster.network.mtu: got 100; expected an integer from 1280 to 9216"),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"k": 5, "topology": "fat-tree"}}),
     "cluster.network.k: got 5; expected an even integer from 4 to 64"),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"oversubscription": 0.5}}),
     "cluster.network.oversubscription: got 0.5; expected a number >= 1"),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"nic_bandwidth": 400}}),
     'cluster.network.nic_bandwidth: got 400; expected a rate with a unit, e.g. "400Gbps"'),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"link_latency": 500}}),
     'cluster.network.link_latency: got 500; expected a duration with a unit, e.g. "500ns"'),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"switch_buffer": "8GiB"}}),
     'cluster.network.switch_buffer: got "8GiB"; expected at most 4294967295 bytes'),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"transport": "rdma"}}),
     'cluster.network.transport: got "rdma"; expected one of dctcp, roce'),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"transport": "roce",
                                                      "roce": {"dcqcn_g": 2}}}),
     "cluster.network.roce.dcqcn_g: got 2; expected a number > 0 and <= 1"),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"transport": "roce",
                                                      "roce": {"preset": "simia"}}}),
     'cluster.network.roce.preset: got "simia"; expected one of simai, dcqcn-paper, '
     'hpcc-dcqcn; did you mean "simai"?'),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"transport": "roce",
                                                      "roce": {"pfc_watchdg": "1ms"}}}),
     "cluster.network.roce.pfc_watchdg: unknown key"),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"transport": "roce",
                                                      "roce": {"ecn_kmin": "4MB"}}}),
     "cluster.network.roce.ecn_kmax: 3200000 bytes is not above ecn_kmin (4000000 bytes)"),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"transport": "roce",
                                                      "roce": {"dcqcn_min_rate": "400Gbps"}}}),
     "cluster.network.roce.dcqcn_min_rate: 400 Gbps is not below the NIC rate (400 Gbps)"),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"transport": "roce",
                                                      "ecn_threshold": "100KB"}}),
     "cluster.network.ecn_threshold: is a dctcp setting, but cluster.network.transport is "
     "roce; use cluster.network.roce.ecn_kmin/ecn_kmax instead"),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"transport": "dctcp",
                                                      "roce": {"pfc": False}}}),
     "cluster.network.roce: given, but cluster.network.transport is dctcp; set transport: "
     "roce or remove the roce section"),
    (scenario({"gpu": "h100", "hosts": 2, "network": {"topology": "torus"}}),
     'cluster.network.topology: got "torus"; expected one of rail-optimized, leaf-spine, '
     "fat-tree"),
    (scenario({"gpu": "h100"}, nccl={"algorithm": "rign"}),
     'nccl.algorithm: got "rign"; expected one of auto, ring, tree, nvls; did you mean "ring"?'),
    (scenario({"gpu": "h100"}, nccl={"channels": 0}),
     'nccl.channels: got 0; expected "auto" or an integer from 1 to 64'),
    (scenario({"gpu": "h100"}, nccl={"nvls": "yes"}),
     'nccl.nvls: got "yes"; expected true or false'),
    (scenario({"gpu": "h100"}, seed=-1),
     "seed: got -1; expected an integer from 0 to 4294967295"),
    (scenario({"gpu": "h100"}, {"script": "no_such_train.py"}),
     'workload.script: got "no_such_train.py"; no such file at '),
    (scenario({"gpu": "h100"}, {"module": "no_such_framework.train"}),
     'workload.module: got "no_such_framework.train"; no package "no_such_framework" is '
     "installed (install it in the environment phantora-ns3 runs in)"),
    (scenario({"gpu": "h100"}, {"module": "torchtitan/train.py"}),
     'workload.module: got "torchtitan/train.py"; not a dotted module name '),
    (scenario({"gpu": "h100"}, {"module": "json.tool", "script": "train.py"}),
     "workload: has script and module; keep one"),
    (scenario({"gpu": "h100"}, {"module": "json.tool", "workdir": "no_such_folder"}),
     'workload.workdir: got "no_such_folder"; no such folder at '),
    (scenario({"gpu": "h100"}, {"collectives": {"ops": [], "sizes": [1024]}}),
     "workload.collectives.ops: got []; expected a non-empty list"),
    (scenario({"gpu": "h100"}, {"collectives": {"ops": ["allgather"], "sizes": [1024]}}),
     'workload.collectives.ops[0]: got "allgather"; expected one of all_reduce, all_gather, '),
    (scenario({"gpu": "h100"}, {"collectives": {"ops": ["all_reduce"], "sizes": "1MiB"}}),
     'workload.collectives.sizes: got "1MiB"; expected a list of sizes, e.g. [65536, "1MiB"], '
     "or a sweep"),
    (scenario({"gpu": "h100"}, {"collectives": {"ops": ["all_reduce"], "sizes": ["1 MiBs"]}}),
     'workload.collectives.sizes[0]: got "1 MiBs"; expected a size in bytes, e.g. 65536, '
     '"64KiB" or "1GiB" (unknown size unit \'MiBs\''),
    (scenario({"gpu": "h100"}, {"collectives": {"ops": ["all_reduce"], "sizes": ["0KiB"]}}),
     'workload.collectives.sizes[0]: got "0KiB"; expected a size of at least 1 byte'),
    (scenario({"gpu": "h100"}, {"collectives": {"ops": ["all_reduce"],
                                                "sizes": {"min": 1024, "mux": 2048}}}),
     'workload.collectives.sizes.mux: unknown key; did you mean "max"? '
     "(allowed: min, max, factor)"),
    (scenario({"gpu": "h100"}, {"collectives": {"ops": ["all_reduce"], "sizes": [8],
                                                "ranks": [-1]}}),
     "workload.collectives.ranks[0]: got -1; expected an integer >= 0"),
    ({"cluster": "h100", "workload": WORKLOAD},
     'cluster: got "h100"; expected a mapping with keys gpu, hosts, gpus_per_host, '
     "cpus_per_host, nvlink_bandwidth"),
    ([1, 2], "top level: got [1, 2]; expected a mapping with keys name, seed, cluster, nccl, "
             "workload"),
])
def test_bad_values_get_one_precise_line(data: Any, expected: str) -> None:
    assert only_problem(data).startswith(f"{SOURCE}: {expected}")


def test_missing_required_key_says_what_to_add() -> None:
    assert only_problem(scenario({"hosts": 2})) == (
        "scenarios/x.yaml: cluster.gpu: required key missing; add it (GPU model: a "
        "hardware-catalogue key such as h100 or a100-80g, in any case)")


def test_misspelt_required_key_is_reported_once() -> None:
    assert only_problem({"clusetr": {"gpu": "h100"}, "workload": WORKLOAD}) == (
        'scenarios/x.yaml: clusetr: unknown key; did you mean "cluster"? '
        "(allowed: name, seed, cluster, nccl, workload, simulation, faults)")


def test_unknown_key_without_a_close_match_says_to_remove_it() -> None:
    assert only_problem(scenario({"gpu": "h100", "colour": "red"})) == (
        "scenarios/x.yaml: cluster.colour: unknown key; remove it or fix its spelling "
        "(allowed: gpu, hosts, gpus_per_host, cpus_per_host, nvlink_bandwidth, network, "
        "calibration, host, host_speed)")


def test_every_problem_gets_its_own_line() -> None:
    data = scenario({"gpu": "h300", "hosts": 0, "netwrok": {}},
                    {"collectives": {"ops": ["all_reduce"], "sizes": ["x"]}},
                    nccl={"protocol": "fast"})
    assert [line.split(": ")[1] for line in problems(data)] == [
        "cluster.gpu", "cluster.hosts", "cluster.netwrok", "nccl.protocol",
        "workload.collectives.sizes[0]"]


def test_did_you_mean_stays_quiet_when_two_options_tie() -> None:
    assert did_you_mean("h300", ["h100", "h200"]) is None
    assert did_you_mean("netwrok", ["gpu", "network"]) == "network"
    assert did_you_mean(3, ["three"]) is None


# -- cross-key checks ---------------------------------------------------------------------------

def test_network_on_a_single_host_is_rejected() -> None:
    assert only_problem(scenario({"gpu": "h100", "network": {}})) == (
        "scenarios/x.yaml: cluster.network: given, but cluster.hosts is 1, and a single host "
        "has no fabric (its GPUs talk over NVLink); remove cluster.network or raise "
        "cluster.hosts to 2 or more")


def test_inconsistent_spines_show_the_arithmetic() -> None:
    cluster = {"gpu": "h100", "hosts": 8,
               "network": {"topology": "leaf-spine", "spines": 2, "oversubscription": 2}}
    assert only_problem(scenario(cluster)) == (
        "scenarios/x.yaml: cluster.network.spines: 2 disagrees with "
        "cluster.network.oversubscription (2): each leaf has 4 hosts x 8 GPUs x 400 Gbps = "
        "12800 Gbps down, and ceil(12800 / 2 / 400) = 16 spine links of 400 Gbps carry that; "
        "give only one of spines and oversubscription, or set spines: 16")


def test_rail_spines_are_sized_by_hosts_per_rail() -> None:
    cluster = {"gpu": "h100", "hosts": 4, "network": {"spines": 1, "oversubscription": 1}}
    assert "each rail switch has 4 hosts x 400 Gbps = 1600 Gbps down" in only_problem(
        scenario(cluster))


@pytest.mark.parametrize(("cluster", "expected"), [
    ({"gpu": "h100", "hosts": 2, "network": {"hosts_per_leaf": 2}},
     "cluster.network.hosts_per_leaf: only used by topology leaf-spine, but "
     "cluster.network.topology is rail-optimized; remove hosts_per_leaf or set topology: "
     "leaf-spine"),
    ({"gpu": "h100", "hosts": 2, "network": {"topology": "fat-tree", "oversubscription": 2}},
     "cluster.network.oversubscription: only used by topologies leaf-spine and rail-optimized, "
     "but cluster.network.topology is fat-tree; remove oversubscription or change the topology"),
    ({"gpu": "h100", "hosts": 2, "network": {"topology": "leaf-spine", "spines": 2}},
     "cluster.network.spines: given, but cluster.hosts (2) fit under one leaf of 4 "
     "(hosts_per_leaf): no traffic crosses a spine; remove spines or lower hosts_per_leaf"),
    ({"gpu": "h100", "hosts": 2, "gpus_per_host": 1, "network": {"oversubscription": 2}},
     "cluster.network.oversubscription: given, but cluster.gpus_per_host is 1, so there is one "
     "rail: no traffic crosses a spine; remove oversubscription or raise gpus_per_host or use "
     "leaf-spine"),
    ({"gpu": "h100", "hosts": 2, "network": {"switch_buffer": "16KiB",
                                                "transport": "dctcp"}},
     "cluster.network.switch_buffer: 16KiB (16384 bytes) is less than 2 x cluster.network.mtu "
     "(9000) = 18000 bytes, so a port cannot hold two full packets; use at least 18000"),
    ({"gpu": "h100", "hosts": 2, "network": {"ecn_threshold": "4MiB", "transport": "dctcp"}},
     "cluster.network.ecn_threshold: 4MiB (4194304 bytes) must be at least cluster.network.mtu "
     "(9000 bytes) and below cluster.network.switch_buffer (4MiB (4194304 bytes)), so that ECN "
     "marks full packets before the queue drops any; use a value in [9000, 4194304)"),
])
def test_network_keys_must_fit_together(cluster: dict[str, Any], expected: str) -> None:
    assert only_problem(scenario(cluster)) == f"{SOURCE}: {expected}"


def test_derived_spine_count_is_bounded() -> None:
    cluster = {"gpu": "h100", "hosts": 4096, "network": {"link_bandwidth": "1Gbps"}}
    assert only_problem(scenario(cluster, {"collectives": {"ops": ["all_reduce"],
                                                           "sizes": [8], "ranks": [0]}})) == (
        "scenarios/x.yaml: cluster.network.spines: 1638400 needed, more than 1024: each rail "
        "switch has 4096 hosts x 400 Gbps = 1638400 Gbps down, and ceil(1638400 / 1 / 1) = "
        "1638400 spine links of 1 Gbps carry that; raise link_bandwidth or oversubscription")


@pytest.mark.parametrize(("gpu", "nccl", "expected"), [
    ("h100", {"algorithm": "nvls"},
     "nccl.algorithm: nvls needs nccl.nvls: true (NVLink SHARP), which is false; set "
     "nccl.nvls: true or pick another algorithm"),
    ("h100", {"algorithm": "nvls", "nvls": True, "protocol": "ll"},
     "nccl.protocol: got ll, but NCCL runs nvls with the simple protocol only; use protocol: "
     "simple or auto"),
    ("a100-80g", {"nvls": True},
     "nccl.nvls: true, but cluster.gpu a100-80g (sm_arch 80) has no NVLink SHARP, which needs "
     "sm_arch >= 90 (third-generation NVSwitch); set nvls: false"),
])
def test_nccl_overrides_must_fit_the_hardware(gpu: str, nccl: dict[str, Any],
                                              expected: str) -> None:
    assert only_problem(scenario({"gpu": gpu}, nccl=nccl)) == f"{SOURCE}: {expected}"


@pytest.mark.parametrize(("collectives", "expected"), [
    ({"ops": ["all_reduce", "all_gather", "reduce_scatter"], "sizes": [4096, 1000]},
     "workload.collectives.sizes[1]: 1000 bytes is not a multiple of dtype bf16 (2 bytes) x 16 "
     "ranks = 32 bytes, which all_gather and reduce_scatter need (nccl-tests splits the total "
     "size evenly over the ranks); use 992 or 1024"),
    ({"ops": ["all_to_all"], "sizes": [8], "dtype": "fp32"},
     "workload.collectives.sizes[0]: 8 bytes is not a multiple of dtype fp32 (4 bytes) x 16 "
     "ranks = 64 bytes, which all_to_all needs (nccl-tests splits the total size evenly over "
     "the ranks); use 64"),
    ({"ops": ["all_reduce", "broadcast"], "sizes": [6], "dtype": "fp32"},
     "workload.collectives.sizes[0]: 6 bytes is not a multiple of dtype fp32 (4 bytes), which "
     "every op needs (a collective moves whole elements); use 4 or 8"),
    ({"ops": ["reduce_scatter"], "sizes": {"min": 1002, "max": "1MiB"}, "ranks": [0, 1]},
     "workload.collectives.sizes.min: 1002 bytes is not a multiple of dtype bf16 (2 bytes) x 2 "
     "ranks = 4 bytes, which reduce_scatter needs (nccl-tests splits the total size evenly "
     "over the ranks); use 1000 or 1004"),
    ({"ops": ["all_reduce"], "sizes": {"min": "1MiB", "max": "1KiB"}},
     "workload.collectives.sizes.max: 1KiB (1024 bytes) is below workload.collectives.sizes.min "
     "(1MiB (1048576 bytes)); swap them"),
    ({"ops": ["all_reduce"], "sizes": ["1MiB", "1TiB"]},
     "workload.collectives.sizes[1]: 1024GiB (1099511627776 bytes) does not fit in the 85017493504 bytes "
     "of memory of one h100; use at most 85017493504"),
    ({"ops": ["all_reduce"], "sizes": {"min": "1MiB", "max": 10**30}},
     "workload.collectives.sizes.max: 1000000000000000000000000000000 bytes does not fit in "
     "the 85017493504 bytes of memory of one h100; use at most 85017493504"),
    ({"ops": ["all_reduce", "reduce", "all_reduce"], "sizes": [1024]},
     "workload.collectives.ops[2]: op all_reduce is already at [0]; list each op once"),
    ({"ops": ["all_reduce"], "sizes": [1024], "ranks": [0, 16]},
     "workload.collectives.ranks[1]: got 16; expected a GPU index from 0 to 15 (cluster.hosts "
     "(2) x cluster.gpus_per_host (8) = 16 GPUs)"),
    ({"ops": ["all_reduce"], "sizes": [1024], "ranks": [3, 4, 3]},
     "workload.collectives.ranks[2]: rank 3 is already at [0]; list each rank once"),
])
def test_workload_must_fit_the_cluster(collectives: dict[str, Any], expected: str) -> None:
    data = scenario({"gpu": "h100", "hosts": 2}, {"collectives": collectives})
    lines = problems(data)
    assert f"{SOURCE}: {expected}" in lines, lines


def test_workload_without_collectives_says_what_to_add() -> None:
    assert only_problem(scenario({"gpu": "h100"}, {})) == (
        "scenarios/x.yaml: workload: nothing to run; add workload.collectives, e.g. {ops: "
        "[all_reduce], sizes: {min: 1MiB, max: 1GiB, factor: 2}}, or workload.script")


# -- files and YAML -----------------------------------------------------------------------------

def test_load_scenario_reads_a_file_and_names_it_after_its_stem(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        cluster: {gpu: h100, hosts: 2, gpus_per_host: 8}
        workload:
          collectives: {ops: [all_reduce], sizes: {min: 64KiB, max: 1GiB, factor: 2}}
        """)
    resolved = load_scenario(path)
    assert resolved.name == "fsdp16" and resolved.source == str(path)
    assert len(resolved.workload.sizes_bytes) == 15


def test_value_errors_name_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        cluster:
          gpu: h100
          hosts: 2
          network: {link_bandwidth: 400G}
        workload: {collectives: {ops: [all_reduce], sizes: [1024]}}
        """)
    location = re.escape(f"{path}: cluster.network.link_bandwidth")
    with pytest.raises(ScenarioError, match=f'^{location}: got "400G"; expected a rate'):
        load_scenario(path)


@pytest.mark.parametrize(("text", "expected"), [
    ("cluster:\n  gpu: h100\n hosts: 2\n",
     r":3:2: invalid YAML: .*; check this line's indentation against the lines above it$"),
    ("cluster: {gpu: h100\nworkload: {}\n", r":2:9: invalid YAML: "),
    ("cluster:\n\tgpu: h100\n", r":2:1: invalid YAML: .*; indent with spaces, not tabs$"),
    ("cluster:\n  gpu: h100\n  hosts: 2\n  hosts: 4\n",
     r':4:3: invalid YAML: duplicate key "hosts" \(first at line 3\); keep only one$'),
])
def test_yaml_errors_give_line_and_column(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError, match=f"^{re.escape(str(path))}{expected}"):
        load_scenario(path)


def test_missing_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"nope.yaml: file not found \(looked in .*\); "
                                            r"check the path$"):
        load_scenario(tmp_path / "nope.yaml")


def test_empty_file_and_non_mapping_top_level(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"empty.yaml: the file is empty; expected a mapping "
                                            r"with keys name, seed, cluster, nccl, workload, "
                                            r"simulation, faults$"):
        load_scenario(write(tmp_path, "# nothing yet\n", "empty.yaml"))
    with pytest.raises(ScenarioError, match=r'list.yaml: top level: got \["h100"\]; expected a '
                                            r"mapping with keys name"):
        load_scenario(write(tmp_path, "- h100\n", "list.yaml"))


def test_non_utf8_file_is_a_scenario_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ScenarioError, match=r"latin1.yaml: not UTF-8 text \(byte 9\); save the "
                                            r"file as UTF-8$"):
        load_scenario(path)


# -- robustness ---------------------------------------------------------------------------------

FULL: dict[str, Any] = {
    "name": "n", "seed": 1,
    "cluster": {"gpu": "h100", "hosts": 2, "gpus_per_host": 8, "nvlink_bandwidth": "450GBps",
                "network": {"topology": "leaf-spine", "nic_bandwidth": "400Gbps",
                            "link_bandwidth": "400Gbps", "link_latency": "500ns",
                            "hosts_per_leaf": 1, "spines": 2, "mtu": 9000,
                            "switch_buffer": "4MiB", "ecn_threshold": "64KiB",
                            "transport": "dctcp", "backend": "ns3"}},
    "nccl": {"algorithm": "ring", "protocol": "simple", "channels": 4, "nvls": False},
    "workload": {"collectives": {"ops": ["all_reduce"], "sizes": {"min": 1024, "max": 4096},
                                 "dtype": "bf16", "ranks": [0, 1]}},
}
ODD_VALUES = [None, True, -1, 0, 2.5, float("nan"), 10**30, "", "x", "1e400", "1e400Gbps",
              "1e400s", [], [None], {}, {"x": 1}]


def _leaves(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for key, value in data.items():
        paths.append((*prefix, key))
        if isinstance(value, dict):
            paths += _leaves(value, (*prefix, key))
    return paths


def _replaced(data: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(data))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


def test_full_scenario_is_valid() -> None:
    assert parse_scenario(FULL, SOURCE).cluster.network is not None


@pytest.mark.parametrize("path", _leaves(FULL), ids=".".join)
def test_odd_values_anywhere_give_a_scenario_error_or_a_scenario(path: tuple[str, ...]) -> None:
    for value in ODD_VALUES:
        try:
            parse_scenario(_replaced(FULL, path, value), SOURCE)
        except ScenarioError as err:
            assert all(line.startswith(f"{SOURCE}: ") for line in str(err).splitlines())


def test_public_names_are_exported() -> None:
    import phantora.scenario as package

    assert all(hasattr(package, name) for name in package.__all__)


def _script_scenario(tmp_path: Path, **workload: object) -> dict[str, object]:
    (tmp_path / "train.py").write_text("print('hi')\n")
    return {"cluster": {"gpu": "h100", "hosts": 2, "gpus_per_host": 4},
            "workload": {"script": "train.py", **workload}}


def test_script_workload_resolves_relative_to_the_scenario_file(tmp_path: Path) -> None:
    data = _script_scenario(tmp_path, args=["--steps", "3"], env={"OMP_NUM_THREADS": 1})
    resolved = parse_scenario(data, str(tmp_path / "s.yaml"))
    workload = resolved.workload
    assert workload.kind == "script"
    assert workload.script == str(tmp_path / "train.py")
    assert workload.args == ("--steps", "3")
    assert (workload.nproc_per_node, workload.world_size) == (4, 8)
    assert workload.env == {"OMP_NUM_THREADS": "1"}


def test_too_many_processes_per_node_shows_every_factor(tmp_path: Path) -> None:
    data = _script_scenario(tmp_path, nproc_per_node=8)
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, str(tmp_path / "s.yaml"))
    assert str(err.value).endswith(
        "workload.nproc_per_node: workload.nproc_per_node (8) x cluster.hosts (2) = 16 ranks, "
        "but cluster.gpus_per_host (4) x cluster.hosts (2) = 8 GPUs; set nproc_per_node: 4")


def test_script_and_collectives_together_are_rejected(tmp_path: Path) -> None:
    data = _script_scenario(tmp_path, collectives={"ops": ["all_reduce"], "sizes": [1024]})
    with pytest.raises(ScenarioError, match="has collectives and script; keep one"):
        parse_scenario(data, str(tmp_path / "s.yaml"))


def test_sizes_overflowing_a_float_are_a_scenario_error_not_a_crash() -> None:
    with pytest.raises(ScenarioError, match=r"sizes\[0\]"):
        parse_scenario(scenario({"gpu": "h100"}, {"collectives": {"ops": ["all_reduce"],
                                                                  "sizes": ["1e400"]}}),
                       "scenarios/x.yaml")


def test_the_overlap_slowdown_is_on_unless_switched_off() -> None:
    assert parse_scenario(scenario({"gpu": "h100"}), SOURCE).simulation.overlap_slowdown
    off = scenario({"gpu": "h100"}, simulation={"overlap_slowdown": False})
    assert not parse_scenario(off, SOURCE).simulation.overlap_slowdown
    assert "simulation.overlap_slowdown" in only_problem(
        scenario({"gpu": "h100"}, simulation={"overlap_slowdown": "sometimes"}))


def test_simulation_cpus_defaults_by_machine_and_rank_count_and_is_checked(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    one_rank = {"script": str(tmp_path / "train.py"), "nproc_per_node": 1}
    two_ranks = {**one_rank, "nproc_per_node": 2}
    for usable, workload, default in (({0, 1}, one_rank, 1), ({0}, one_rank, 1),
                                      ({0, 1}, two_ranks, 2), (set(range(8)), one_rank, 8)):
        monkeypatch.setattr("os.sched_getaffinity", lambda pid, cpus=usable: cpus)
        parsed = parse_scenario(scenario({"gpu": "h100", "gpus_per_host": 2}, workload), SOURCE)
        assert parsed.simulation.cpus == default, (usable, workload)
    assert parse_scenario(scenario({"gpu": "h100"}, simulation={"cpus": 2}),
                          SOURCE).simulation.cpus == 2
    problem = only_problem(scenario({"gpu": "h100"}, simulation={"cpus": 9}))
    assert "simulation.cpus" in problem and "at most 8" in problem
    assert "simulation.cpus" in only_problem(scenario({"gpu": "h100"}, simulation={"cpus": 0}))
