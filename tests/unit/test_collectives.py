"""The NCCL collective model's flow DAGs: bytes vs closed forms, structure, groups, budgets."""

from collections import Counter, defaultdict

import pytest

from hwmodel.catalogue import lookup_gpu
from phantora.cluster.topology import HostSpec, rail_optimized, single_host
from phantora.collectives import (
    Algorithm,
    CollectiveRequest,
    FlowDag,
    NcclConfig,
    NcclEfficiency,
    Protocol,
    SystemInfo,
    plan_collective,
)
from phantora.collectives.tree import btree, dtree
from phantora.engine.flow_scheduler import run_dag
from phantora.network.composite import CompositeBackend
from phantora.network.flow import FluidBackend

PAYLOAD = NcclEfficiency.payload_only()
MIB = 1 << 20
DEFAULTS = NcclConfig()


def system(hosts: int, gpus_per_host: int, gpu: str = "h100") -> SystemInfo:
    spec = lookup_gpu(gpu)
    host = HostSpec(gpus_per_host, spec.nvlink_gbps, 300, 400.0)
    topo = single_host(host) if hosts == 1 else rail_optimized(host, hosts, 2, 400.0, 500)
    return SystemInfo.from_topology(topo, spec)


def plan(op: str, ranks, nbytes: int, sysinfo: SystemInfo, config: NcclConfig = DEFAULTS,
         nccl_efficiency: NcclEfficiency = PAYLOAD, **kwargs) -> FlowDag:
    request = CollectiveRequest.make(op, list(ranks), nbytes, 2, **kwargs)
    return plan_collective(request, sysinfo, config, nccl_efficiency=nccl_efficiency)


def sent_by(dag: FlowDag) -> Counter:
    out: Counter = Counter()
    for flow in dag.flows:
        out[flow.src] += flow.nbytes
    return out


def nic_egress_by_host(dag: FlowDag, sysinfo: SystemInfo) -> Counter:
    out: Counter = Counter()
    for flow in dag.flows:
        if sysinfo.host_of(flow.src) != sysinfo.host_of(flow.dst):
            out[sysinfo.host_of(flow.src)] += flow.nbytes
    return out


RING_SIMPLE = NcclConfig.make(algorithms="ring", protocols="simple")


# -- bytes vs closed forms ---------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_sends_2_n_minus_1_over_n_of_the_buffer_per_rank(n: int) -> None:
    size = 3 * 5 * 7 * 64 * MIB  # divisible by every channel x rank split below
    dag = plan("all_reduce", range(n), size, system(1, n), RING_SIMPLE)
    assert dag.algorithm == "ring"
    assert set(sent_by(dag).values()) == {2 * (n - 1) * size // n}


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_ring_all_gather_and_reduce_scatter_send_n_minus_1_over_n(op: str) -> None:
    n, size = 8, 8 * 24 * MIB
    dag = plan(op, range(n), size, system(1, n), RING_SIMPLE)
    assert set(sent_by(dag).values()) == {(n - 1) * size // n}


def test_multi_host_ring_all_reduce_moves_2_n_minus_1_over_n_out_of_every_host() -> None:
    sysinfo = system(4, 4)
    n, size = 16, 16 * 16 * 4 * MIB
    dag = plan("all_reduce", range(n), size, sysinfo, RING_SIMPLE)
    assert set(nic_egress_by_host(dag, sysinfo).values()) == {2 * (n - 1) * size // n}


def test_multi_host_ring_traffic_stays_on_its_rail() -> None:
    sysinfo = system(4, 8)
    dag = plan("all_reduce", range(32), 256 * MIB, sysinfo, RING_SIMPLE)
    cross = [f for f in dag.flows if sysinfo.host_of(f.src) != sysinfo.host_of(f.dst)]
    assert cross and all(sysinfo.local_of(f.src) == sysinfo.local_of(f.dst) for f in cross)
    assert {sysinfo.local_of(f.src) for f in cross} == set(range(8))  # every NIC carries a ring


def test_broadcast_and_reduce_move_the_buffer_once_over_every_chain_hop() -> None:
    sysinfo, size = system(1, 8), 64 * MIB
    for op in ("broadcast", "reduce"):
        dag = plan(op, range(8), size, sysinfo, RING_SIMPLE, root=3)
        receivers = Counter()
        for flow in dag.flows:
            receivers[flow.dst] += flow.nbytes
        root_gets = receivers.pop(3, 0)
        if op == "broadcast":
            assert root_gets == 0 and set(receivers.values()) == {size}
        else:
            assert sent_by(dag)[3] == 0 and set(sent_by(dag).values()) == {size}


def test_tree_all_reduce_sends_the_buffer_up_and_down_every_edge() -> None:
    sysinfo, size = system(4, 2), 64 * MIB
    dag = plan("all_reduce", range(8), size, sysinfo, NcclConfig.make(algorithms="tree",
                                                                      protocols="simple"))
    per_edge: Counter = Counter()
    for flow in dag.flows:
        per_edge[frozenset((flow.src, flow.dst))] += flow.nbytes
    # Every channel's tree spans the 8 GPUs (7 edges); every byte goes up and down each edge.
    n_trees = len({flow.tag for flow in dag.flows})
    assert sum(per_edge.values()) == 2 * 7 * size
    assert n_trees == 2 * 2  # the double binary tree's two trees on each of the 2 rails


def test_nvls_loads_every_nvlink_with_n_plus_1_over_n_of_the_buffer() -> None:
    sysinfo, size = system(1, 8), 8 * 9 * 7 * MIB
    dag = plan("all_reduce", range(8), size, sysinfo, NcclConfig.make(algorithms="nvls"))
    assert dag.algorithm == "nvls"
    received: Counter = Counter()
    for flow in dag.flows:
        received[flow.dst] += flow.nbytes
    assert set(sent_by(dag).values()) == set(received.values()) == {size * 9 // 8}


def test_all_to_allv_respects_the_byte_matrix() -> None:
    sysinfo = system(2, 2)
    splits = [[0, 100, 0, 4096], [7, 0, 1 << 20, 0], [0, 5, 0, 64], [3 << 20, 0, 9, 0]]
    dag = plan("all_to_allv", range(4), 0, sysinfo, splits=splits)
    moved: Counter = Counter()
    for flow in dag.flows:
        moved[(flow.src, flow.dst)] += flow.nbytes
    expected = {(i, j): b for i, row in enumerate(splits) for j, b in enumerate(row) if b}
    assert dict(moved) == expected


def test_all_to_all_sends_one_nth_to_every_peer() -> None:
    dag = plan("all_to_all", range(4), 4 * MIB, system(1, 4))
    moved: Counter = Counter()
    for flow in dag.flows:
        moved[(flow.src, flow.dst)] += flow.nbytes
    assert len(moved) == 12 and set(moved.values()) == {MIB}


def test_send_recv_across_hosts_stripes_over_channels_on_one_rail() -> None:
    sysinfo = system(2, 8)
    dag = plan("send_recv", (3, 11), 64 * MIB, sysinfo)
    assert {(f.src, f.dst) for f in dag.flows} == {(3, 11)}
    assert sum(f.nbytes for f in dag.flows) == 64 * MIB
    assert len({f.tag for f in dag.flows}) == len(dag.flows) > 1


# -- DAG structure ----------------------------------------------------------------------------

CASES = [
    ("all_reduce", 1, 8, 8), ("all_reduce", 1, 8, 64 * MIB), ("all_reduce", 4, 4, 1 * MIB),
    ("all_reduce", 4, 4, 512 * MIB), ("all_gather", 2, 4, 4 * MIB),
    ("reduce_scatter", 2, 4, 64 * MIB), ("broadcast", 2, 4, 16 * MIB),
    ("reduce", 2, 4, 16 * MIB), ("all_to_all", 2, 4, 4 * MIB), ("all_reduce", 1, 2, 256),
]


@pytest.mark.parametrize("op,hosts,gph,size", CASES)
def test_dag_is_well_formed_and_every_rank_takes_part(op: str, hosts: int, gph: int,
                                                      size: int) -> None:
    sysinfo = system(hosts, gph)
    n = hosts * gph
    dag = plan(op, range(n), size, sysinfo, nccl_efficiency=NcclEfficiency.payload_only())
    assert dag.flows
    for index, flow in enumerate(dag.flows):
        assert all(0 <= dep < index for dep in flow.deps), f"flow {index} deps {flow.deps}"
        assert flow.src != flow.dst and flow.delay_ns >= 0 and flow.nbytes >= 0
    touched = {f.src for f in dag.flows} | {f.dst for f in dag.flows}
    assert touched == set(range(n))


def test_ring_step_depends_on_the_previous_step_arriving_from_the_left_neighbour() -> None:
    dag = plan("all_reduce", range(4), 4 * MIB, system(1, 4), RING_SIMPLE)
    # One ring: flow (step s, position p) is flows[4*s + p]; it waits for (s-1, p-1).
    assert len(dag.flows) == 4 * 6
    for s in range(1, 6):
        for p in range(4):
            flow = dag.flows[4 * s + p]
            left = dag.flows[4 * (s - 1) + (p - 1) % 4]
            assert flow.deps == (4 * (s - 1) + (p - 1) % 4,)
            assert left.dst == flow.src


def test_sub_communicator_only_touches_its_gpus_and_matches_the_full_group_bytes() -> None:
    sysinfo = system(2, 8)
    group = [1, 3, 9, 11]
    dag = plan("all_reduce", group, 64 * MIB, sysinfo, RING_SIMPLE)
    assert {f.src for f in dag.flows} | {f.dst for f in dag.flows} == set(group)
    assert set(nic_egress_by_host(dag, sysinfo).values()) == {2 * 3 * 64 * MIB // 4}


def test_one_rank_or_zero_bytes_is_an_empty_dag() -> None:
    sysinfo = system(1, 8)
    assert plan("all_reduce", [5], 64 * MIB, sysinfo).flows == []
    assert plan("all_gather", range(8), 0, sysinfo).flows == []


def test_tiny_all_reduce_costs_nccls_latency_uncongested() -> None:
    """8 B on 8 GPUs: ring/LL, 14 steps; NCCL models 6.6 + 14 x 0.6 us, scaled x0.9."""
    spec = lookup_gpu("h100")
    topo = single_host(HostSpec(8, spec.nvlink_gbps, 300, 400.0))
    dag = plan("all_reduce", range(8), 8, SystemInfo.from_topology(topo, spec),
               nccl_efficiency=NcclEfficiency(PAYLOAD.link_efficiency,
                                              latency_scale={(Algorithm.RING, Protocol.LL): 1.0}))
    assert (dag.algorithm, dag.protocol) == ("ring", "ll")
    end_ns = run_dag(dag, CompositeBackend(topo, FluidBackend(topo, "intra"), None), 0)
    assert end_ns == pytest.approx(15_000, abs=20)


# -- trees ------------------------------------------------------------------------------------

def test_btree_matches_nccls_picture_for_14_ranks() -> None:
    # trees.cc: 0 -> 8; 8 -> 4, 12; 4 -> 2, 6; 12 -> 10, 13; 2 -> 1, 3; 10 -> 9, 11.
    assert btree(14, 0) == (-1, [8])
    assert btree(14, 8) == (0, [4, 12])
    assert btree(14, 12) == (8, [10, 13])
    assert btree(14, 13) == (12, [])
    assert btree(14, 6) == (4, [5, 7])


@pytest.mark.parametrize("n", [2, 5, 8, 13])
def test_double_binary_tree_spans_every_node_twice(n: int) -> None:
    for which in (0, 1):
        parents = {r: dtree(n, r, which)[0] for r in range(n)}
        assert sum(1 for p in parents.values() if p == -1) == 1
        for r in range(n):
            for child in dtree(n, r, which)[1]:
                assert parents[child] == r
    if n % 2 == 0:  # mirror tree: no rank is interior in both trees
        interior = [r for r in range(n) if dtree(n, r, 0)[1] and dtree(n, r, 1)[1]]
        assert interior == []


# -- budget ------------------------------------------------------------------------------------

def test_headline_64_gpu_all_reduce_stays_within_the_flow_budget() -> None:
    dag = plan("all_reduce", range(64), 1 << 30, system(8, 8))
    assert dag.algorithm == "ring"
    assert len(dag.flows) <= NcclConfig().flow_budget
    assert len(dag.flows) >= 8 * 64 * 126  # no steps merged: 8 rails x 64 ranks x 126 steps


def test_a_smaller_budget_merges_steps_but_keeps_the_bytes() -> None:
    sysinfo, size = system(2, 4), 8 * 16 * MIB
    full = plan("all_reduce", range(8), size, sysinfo, RING_SIMPLE)
    small = plan("all_reduce", range(8), size, sysinfo,
                 NcclConfig.make(algorithms="ring", protocols="simple", flow_budget=100))
    assert len(small.flows) <= 100 < len(full.flows)
    assert sent_by(small) == sent_by(full)


def test_pipelines_merge_chunks_under_the_budget() -> None:
    sysinfo = system(1, 8)
    config = NcclConfig.make(algorithms="ring", protocols="simple", flow_budget=70)
    dag = plan("broadcast", range(8), 1 << 30, sysinfo, config)
    assert len(dag.flows) <= 70
    per_dst = defaultdict(int)
    for flow in dag.flows:
        per_dst[flow.dst] += flow.nbytes
    assert set(per_dst.values()) == {1 << 30}


def _all_to_all_busbw(gpus: int, nbytes: int) -> float:
    """Simulated bus bandwidth (GB/s, nccl-tests' (n-1)/n) of an all_to_all on one H200 host,
    default NCCL efficiencies."""
    from phantora.collectives.efficiency import DEFAULT_NCCL_EFFICIENCY
    spec = lookup_gpu("h200")
    topo = single_host(HostSpec(gpus, spec.nvlink_gbps, 300, 400.0))
    dag = plan("all_to_all", range(gpus), nbytes, SystemInfo.from_topology(topo, spec),
               nccl_efficiency=DEFAULT_NCCL_EFFICIENCY)
    end_ns = run_dag(dag, CompositeBackend(topo, FluidBackend(topo, "intra"), None), 0)
    return nbytes / end_ns * (gpus - 1) / gpus


def test_all_to_all_peers_share_the_link_not_each_a_cta_limit_of_it() -> None:
    """Each transfer's channels cap its own share of the NVLink: a GPU sending to more peers
    at once keeps its bandwidth. Real 4 x H200, 32 MiB (``scripts/data/traces/h200x4/
    h200x4_ep-moe-600m-b4-balanced``, shortest instance over the ranks): 83 us, busbw 303 GB/s."""
    two, four, eight = (_all_to_all_busbw(n, 32 * MIB) for n in (2, 4, 8))
    assert four >= 0.9 * two and eight >= 0.9 * four
    assert 32 * MIB / four * 3 / 4 / 1e3 == pytest.approx(83.0, rel=0.15)
