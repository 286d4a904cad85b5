"""NCCL's topology search and tuning model: tables vs NCCL's own log, selection, overrides."""

import pytest

from hwmodel.catalogue import lookup_gpu
from phantora.collectives import (
    Algorithm,
    CollectiveOp,
    CollectiveRequest,
    NcclConfig,
    NcclEfficiency,
    Protocol,
    SystemInfo,
    select,
)
from phantora.collectives.comm import Comm
from phantora.collectives.search import search_graphs
from phantora.collectives.tuning import TuningModel

MIB = 1 << 20
DEFAULTS = NcclConfig()


def system(hosts: int, gpus_per_host: int, gpu: str = "h200") -> SystemInfo:
    spec = lookup_gpu(gpu)
    return SystemInfo(hosts, gpus_per_host, spec, 400.0 if hosts > 1 else 0.0, spec.nvlink_gbps)


def model(hosts: int, gpus_per_host: int, gpu: str = "h200",
          config: NcclConfig = DEFAULTS) -> TuningModel:
    comm = Comm.of(system(hosts, gpus_per_host, gpu), range(hosts * gpus_per_host))
    return TuningModel(comm, search_graphs(comm, config))


def choice(op: str, n: int, nbytes: int, hosts: int = 1, gpu: str = "h200",
           config: NcclConfig = DEFAULTS) -> tuple[str, str, int]:
    sysinfo = system(hosts, n // hosts, gpu)
    picked = select(CollectiveRequest.make(op, range(n), nbytes, 2), sysinfo, config)
    return picked.algorithm.value, picked.protocol.value, picked.n_channels


# -- against NCCL 2.28's own log on 2x H200 (scripts/data/collectives/h200x2/README.md) ------

def test_search_finds_nccls_graphs_on_two_h200() -> None:
    graphs = model(1, 2).graphs
    assert (graphs.ring.n_channels, graphs.ring.bw_intra) == (12, 30.0)
    assert graphs.coll_channels == 24


@pytest.mark.parametrize("op,algo,proto,lat_us,bw_gbs", [
    ("all_reduce", "ring", "ll", 7.8, 141.0), ("all_reduce", "ring", "ll128", 17.8, 331.2),
    ("all_reduce", "ring", "simple", 15.2, 360.0), ("all_reduce", "tree", "ll", 8.0, 61.1),
    ("all_reduce", "tree", "ll128", 16.5, 180.6), ("all_reduce", "tree", "simple", 16.4, 232.2),
    ("all_gather", "ring", "ll", 7.2, 282.0), ("all_gather", "ring", "ll128", 15.9, 662.4),
    ("all_gather", "ring", "simple", 11.8, 720.0), ("broadcast", "ring", "ll", 7.2, 141.0),
    ("broadcast", "ring", "simple", 11.8, 360.0),
])
def test_tuning_table_matches_nccls_log(op: str, algo: str, proto: str, lat_us: float,
                                        bw_gbs: float) -> None:
    tuning = model(1, 2)
    args = (CollectiveOp(op), Algorithm(algo), Protocol(proto))
    assert tuning.latency(*args) == pytest.approx(lat_us, abs=0.05)
    assert tuning.bandwidth(*args) == pytest.approx(bw_gbs, abs=0.05)


@pytest.mark.parametrize("op,nbytes,proto", [
    ("all_reduce", 64 << 10, "ll"), ("all_reduce", 1 * MIB, "ll"),
    ("all_reduce", 2 * MIB, "simple"), ("all_reduce", 1 << 30, "simple"),
    ("all_gather", 2 * MIB, "ll"), ("all_gather", 4 * MIB, "simple"),
    ("broadcast", 1 * MIB, "ll"), ("broadcast", 2 * MIB, "simple"),
])
def test_protocol_switches_where_nccl_switched_on_two_h200(op: str, nbytes: int,
                                                           proto: str) -> None:
    assert choice(op, 2, nbytes)[:2] == ("ring", proto)


@pytest.mark.parametrize("nbytes,channels", [(64 << 10, 8), (128 << 10, 16), (1 * MIB, 24),
                                             (64 * MIB, 24)])
def test_channel_count_grows_with_size_like_nccls(nbytes: int, channels: int) -> None:
    assert choice("all_reduce", 2, nbytes)[2] == channels


# -- larger systems ----------------------------------------------------------------------------

def test_nvls_model_on_8_h100_reaches_its_476_gbs_bus_bandwidth() -> None:
    tuning = model(1, 8, "h100")
    bus = tuning.bus_bandwidth(CollectiveOp.ALL_REDUCE, Algorithm.NVLS, Protocol.SIMPLE)
    assert bus == pytest.approx(476.0, abs=0.1)


def test_8_h100_all_reduce_goes_from_ring_ll_to_nvls() -> None:
    assert choice("all_reduce", 8, 1 * MIB, gpu="h100")[:2] == ("ring", "ll")
    assert choice("all_reduce", 8, 64 * MIB, gpu="h100")[:2] == ("nvls", "simple")
    no_nvls = NcclConfig(nvls=False)
    assert choice("all_reduce", 8, 1 << 30, gpu="h100", config=no_nvls)[:2] == ("ring", "simple")


def test_64_h100_across_8_hosts_uses_trees_for_small_and_rings_for_large() -> None:
    assert choice("all_reduce", 64, 8 << 10, hosts=8, gpu="h100")[:2] == ("tree", "ll")
    assert choice("all_reduce", 64, 1 << 30, hosts=8, gpu="h100") == ("ring", "simple", 16)


def test_ring_plateau_factor_applies_to_multi_node_simple_only() -> None:
    tuning = model(2, 8, "h100")
    op, ring, simple = CollectiveOp.ALL_REDUCE, Algorithm.RING, Protocol.SIMPLE
    assert tuning.latency_factor(op, ring, simple, 1 << 30) == 1.4
    assert tuning.latency_factor(op, ring, Protocol.LL, 1 << 30) == 1.0
    assert model(1, 8, "h100").latency_factor(op, ring, simple, 1 << 30) == 1.0


# -- overrides ---------------------------------------------------------------------------------

def test_algorithm_and_protocol_overrides_are_honoured() -> None:
    forced = NcclConfig.make(algorithms="tree", protocols="ll128")
    assert choice("all_reduce", 2, 1 << 30, config=forced)[:2] == ("tree", "ll128")
    no_ll = NcclConfig.from_env({"NCCL_PROTO": "^LL"})
    assert choice("all_reduce", 2, 64 << 10, config=no_ll)[1] != "ll"


def test_channel_limits_are_honoured() -> None:
    assert choice("all_reduce", 2, 1 << 30, config=NcclConfig(max_channels=4))[2] == 4
    assert model(1, 2, config=NcclConfig(min_channels=32)).graphs.coll_channels == 32


def test_an_override_nothing_satisfies_says_what_the_op_can_use() -> None:
    with pytest.raises(ValueError, match="broadcast.*can use: ring"):
        choice("broadcast", 8, MIB, gpu="h100", config=NcclConfig.make(algorithms="tree"))


def test_from_env_reads_nccls_variables() -> None:
    config = NcclConfig.from_env({"NCCL_ALGO": "Ring,Tree", "NCCL_PROTO": "^ll128",
                                  "NCCL_MAX_NCHANNELS": "8", "NCCL_NVLS_ENABLE": "0"})
    assert config.algorithms == {Algorithm.RING, Algorithm.TREE}
    assert config.protocols == {Protocol.LL, Protocol.SIMPLE}
    assert (config.max_channels, config.nvls) == (8, False)
    with pytest.raises(ValueError, match="NCCL_ALGO.*'ringg'"):
        NcclConfig.from_env({"NCCL_ALGO": "ringg"})


# -- inputs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    (dict(op="allreduce", ranks=[0, 1], nbytes=8), "unknown collective op"),
    (dict(op="all_reduce", ranks=[0, 0], nbytes=8), "repeat a GPU"),
    (dict(op="all_reduce", ranks=[0, 1], nbytes=7), "whole number"),
    (dict(op="broadcast", ranks=[0, 1], nbytes=8, root=2), "root 2"),
    (dict(op="send_recv", ranks=[0, 1, 2], nbytes=8), r"\(src, dst\)"),
    (dict(op="all_to_allv", ranks=[0, 1], nbytes=0, splits=[[0, 1]]), "2 x 2"),
])
def test_bad_requests_say_what_is_wrong(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CollectiveRequest.make(dtype_bytes=2, **kwargs)


def test_nccl_efficiency_rejects_impossible_efficiencies() -> None:
    with pytest.raises(ValueError, match="expected \\(0, 1\\]"):
        NcclEfficiency({kind: 1.5 for kind in NcclEfficiency.payload_only().link_efficiency})
