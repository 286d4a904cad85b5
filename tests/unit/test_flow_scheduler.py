"""The DAG runner on a hand-computable backend: dependencies, delays, sync points, errors."""

import pytest

from hwmodel.errors import SimulationError
from phantora.collectives.dag import FlowDag
from phantora.engine.flow_scheduler import run_dag
from tests.unit.fixed_rate import FixedRateBackend


def test_chain_of_flows_adds_durations_and_delays() -> None:
    net = FixedRateBackend(gbps=8.0, latency_ns=100)  # 1 byte per ns
    dag = FlowDag(tail_ns=7)
    a = dag.add(0, 1, 1000, tag=0, delay_ns=5)
    b = dag.add(1, 2, 500, tag=0, deps=(a,), delay_ns=10)
    dag.add(2, 3, 200, tag=0, deps=(b,))
    end = run_dag(dag, net, start_ns=1000)
    assert end == 1000 + 5 + 1100 + 10 + 600 + 300 + 7


def test_flow_waits_for_its_latest_dependency() -> None:
    net = FixedRateBackend(gbps=8.0, latency_ns=0)
    dag = FlowDag()
    short = dag.add(0, 1, 100, tag=0)
    long = dag.add(2, 1, 900, tag=0)
    dag.add(1, 0, 50, tag=0, deps=(short, long))
    assert run_dag(dag, net, start_ns=0) == 950
    starts = [start for *_, start, _tag in net.injected]
    assert starts == [0, 0, 900]


def test_zero_byte_flows_are_sync_points_not_network_traffic() -> None:
    net = FixedRateBackend(gbps=8.0, latency_ns=0)
    dag = FlowDag()
    a = dag.add(0, 1, 100, tag=0)
    sync = dag.add(1, 1, 0, tag=0, deps=(a,), delay_ns=40)
    dag.add(1, 2, 100, tag=0, deps=(sync,))
    assert run_dag(dag, net, start_ns=0) == 240
    assert len(net.injected) == 2


def test_forward_dependency_is_rejected() -> None:
    dag = FlowDag()
    dag.add(0, 1, 10, tag=0, deps=(1,))
    dag.add(1, 0, 10, tag=0)
    with pytest.raises(SimulationError, match="not earlier"):
        run_dag(dag, FixedRateBackend(8.0, 0), start_ns=0)


def test_start_before_network_clock_is_rejected() -> None:
    net = FixedRateBackend(8.0, 0)
    net.advance_to(50)
    with pytest.raises(SimulationError, match="before the network clock"):
        run_dag(FlowDag(), net, start_ns=10)
