"""Long rings: one block of all steps per rank, close to the step-by-step ring."""

from collections import Counter

import pytest

from hwmodel.catalogue import lookup_gpu
from phantora.cluster.topology import HostSpec, Topology, rail_optimized
from phantora.collectives import (
    CollectiveRequest,
    FlowDag,
    NcclConfig,
    NcclEfficiency,
    SystemInfo,
    plan_collective,
)
from phantora.engine.flow_scheduler import run_dag
from phantora.network.composite import CompositeBackend
from phantora.network.flow import FluidBackend

STEPWISE = NcclConfig(stepwise_ring_ranks=1 << 20)
COARSE = NcclConfig(stepwise_ring_ranks=2)


def cluster(hosts: int) -> tuple[Topology, SystemInfo]:
    spec = lookup_gpu("h100")
    topology = rail_optimized(HostSpec(8, spec.nvlink_gbps, 300, 400.0), hosts, 8, 400.0, 500)
    return topology, SystemInfo.from_topology(topology, spec)


def plan(op: str, gpus: int, nbytes: int, system: SystemInfo, config: NcclConfig,
         nccl_efficiency: NcclEfficiency | None = None) -> FlowDag:
    request = CollectiveRequest.make(op, list(range(gpus)), nbytes, 2)
    if nccl_efficiency is None:
        return plan_collective(request, system, config)
    return plan_collective(request, system, config, nccl_efficiency=nccl_efficiency)


def simulate(dag: FlowDag, topology: Topology) -> int:
    backend = CompositeBackend(topology, FluidBackend(topology, "intra"),
                               FluidBackend(topology, "inter"))
    return run_dag(dag, backend, 0)


def sent_by(dag: FlowDag) -> Counter[int]:
    out: Counter[int] = Counter()
    for flow in dag.flows:
        out[flow.src] += flow.nbytes
    return out


def test_a_1024_rank_all_gather_is_one_flow_per_rank_ring_and_pxn_hop() -> None:
    _, system = cluster(128)
    dag = plan("all_gather", 1024, 436_000_000, system, NcclConfig())
    data = [flow for flow in dag.flows if flow.nbytes]
    # 8 rings (16 channels) x (1024 ranks + 128 PXN legs), plus one zero-byte hold per rank.
    assert dag.algorithm == "ring" and len(data) == 8 * (1024 + 128)
    assert len(dag.flows) == len(data) + 8 * 1024
    assert all(not flow.deps for flow in dag.flows)


def test_one_block_carries_the_bytes_of_every_step() -> None:
    _, system = cluster(16)
    for op in ("all_gather", "reduce_scatter", "all_reduce"):
        # Payload-only wire bytes: no per-flow rounding of protocol overhead.
        payload = NcclEfficiency.payload_only()
        coarse = plan(op, 128, 96 << 20, system,
                      NcclConfig.make(algorithms="ring", stepwise_ring_ranks=2), payload)
        stepwise = plan(op, 128, 96 << 20, system,
                        NcclConfig.make(algorithms="ring", stepwise_ring_ranks=128), payload)
        assert sent_by(coarse) == sent_by(stepwise), op


def test_a_merged_block_holds_its_data_for_the_hops_it_stands_for() -> None:
    """8 hosts: the 63 steps of a block cross 55 NVLink and 8 NIC hops (or 56 and 7) of the
    ring, not 63 of the sender's own hop."""
    _, system = cluster(8)
    stepwise = plan("all_gather", 64, 64 << 20, system, STEPWISE)
    # Step latencies (propagation included) and the base latency, read off the exact ring.
    nvlink = next(f for f in stepwise.flows if f.deps and system.host_of(f.src)
                  == system.host_of(f.dst))
    nic = next(f for f in stepwise.flows if f.deps and system.host_of(f.src)
               != system.host_of(f.dst))
    first = next(f for f in stepwise.flows if not f.deps and system.host_of(f.src)
                 == system.host_of(f.dst))
    intra_ns = nvlink.delay_ns + system.nvlink_hop_latency_ns
    inter_ns = nic.delay_ns + system.net_hop_latency_ns
    base_ns = first.delay_ns - nvlink.delay_ns
    coarse = plan("all_gather", 64, 64 << 20, system, COARSE)
    holds = {flow.delay_ns for flow in coarse.flows if not flow.nbytes}
    assert holds == {base_ns + 55 * intra_ns + 8 * inter_ns, base_ns + 56 * intra_ns + 7 * inter_ns}


@pytest.mark.parametrize(("op", "nbytes", "tolerance"), [
    ("all_gather", 436_000_000, 0.035),
    ("all_reduce", 1 << 30, 0.01),
    ("all_gather", 1 << 20, 0.06),
])
def test_coarse_ring_is_close_to_the_step_by_step_ring(op: str, nbytes: int,
                                                       tolerance: float) -> None:
    topology, system = cluster(8)
    ring = NcclConfig.make(algorithms="ring", stepwise_ring_ranks=1 << 20)
    coarse = NcclConfig.make(algorithms="ring", stepwise_ring_ranks=2)
    exact_ns = simulate(plan(op, 64, nbytes, system, ring), topology)
    coarse_ns = simulate(plan(op, 64, nbytes, system, coarse), topology)
    assert abs(coarse_ns - exact_ns) <= tolerance * exact_ns


def test_rings_up_to_64_ranks_stay_step_by_step() -> None:
    _, system = cluster(8)
    dag = plan("all_gather", 64, 64 << 20, system, NcclConfig())
    assert all(flow.nbytes for flow in dag.flows)
    assert dag.flows == plan("all_gather", 64, 64 << 20, system, STEPWISE).flows
