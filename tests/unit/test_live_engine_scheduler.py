"""The incremental flow-DAG scheduler the live engine shares between concurrent collectives."""

import pytest

from hwmodel.errors import SimulationError
from phantora.collectives.dag import FlowDag
from phantora.engine.flow_scheduler import FOREVER_NS, DagDone, FlowScheduler
from phantora.network.flow import FluidBackend
from tests.unit.fixed_rate import FixedRateBackend
from tests.unit.test_live_engine import make_topology


def one_flow(nbytes: int, tag: int = 0, src: int = 0, dst: int = 1) -> FlowDag:
    dag = FlowDag(tail_ns=10)
    dag.add(src, dst, nbytes, tag=tag)
    return dag


def drain(scheduler: FlowScheduler) -> dict[int, int]:
    """Step until idle; ticket -> end time."""
    ends: dict[int, int] = {}
    while not scheduler.idle:
        finished = scheduler.step(FOREVER_NS)
        assert finished is not None
        ends.update((done.ticket, done.end_ns) for done in finished)
    return ends


def test_concurrent_dags_share_the_network() -> None:
    nbytes = 8 << 20
    alone = FlowScheduler(FluidBackend(make_topology(2)))
    alone.submit(one_flow(nbytes), 0)
    (alone_end,) = drain(alone).values()

    both = FlowScheduler(FluidBackend(make_topology(2)))
    first = both.submit(one_flow(nbytes, tag=0), 0)
    second = both.submit(one_flow(nbytes, tag=1), 0)
    ends = drain(both)
    # Two equal flows on one NVLink direction get half the rate each: twice the transfer time.
    transfer_ns = alone_end - 10 - 600  # minus the tail and two 300 ns link latencies
    assert ends[first] == ends[second] == pytest.approx(alone_end + transfer_ns, abs=2)


def test_dags_starting_together_enter_the_network_in_key_order() -> None:
    net = FixedRateBackend(gbps=8.0, latency_ns=0)
    scheduler = FlowScheduler(net)
    scheduler.submit(one_flow(100, src=2, dst=3), 500, order_key=("coll", "b", 0, 0, 0))
    scheduler.submit(one_flow(100, src=0, dst=1), 500, order_key=("coll", "a", 0, 0, 0))
    scheduler.submit(one_flow(100, src=4, dst=5), 400, order_key=("coll", "z", 0, 0, 0))
    drain(scheduler)
    assert [src for src, *_ in net.injected] == [4, 0, 2]


def test_step_stops_at_the_limit_and_says_when_nothing_happened() -> None:
    net = FixedRateBackend(gbps=8.0, latency_ns=0)
    scheduler = FlowScheduler(net)
    ticket = scheduler.submit(one_flow(1000), 100)
    assert scheduler.step(99) is None and net.injected == []
    assert scheduler.step(500) == []  # the DAG started at 100: its flow is on the network
    assert scheduler.next_ns() == 1100
    assert scheduler.step(1099) is None and net.now_ns() <= 1099
    assert scheduler.step(FOREVER_NS) == [DagDone(ticket, 1110)]
    assert scheduler.idle and scheduler.next_ns() is None


def test_an_empty_dag_finishes_at_its_start_plus_tail() -> None:
    scheduler = FlowScheduler(FixedRateBackend(gbps=8.0, latency_ns=0))
    ticket = scheduler.submit(FlowDag(tail_ns=7), 250)
    assert scheduler.step(FOREVER_NS) == [DagDone(ticket, 257)]


def test_submitting_into_the_past_is_refused() -> None:
    scheduler = FlowScheduler(FixedRateBackend(gbps=8.0, latency_ns=0))
    scheduler.submit(one_flow(1000), 0)
    drain(scheduler)
    with pytest.raises(SimulationError, match="before the network clock"):
        scheduler.submit(one_flow(10), 500)


def test_recorded_flows_carry_their_dag_and_times() -> None:
    scheduler = FlowScheduler(FixedRateBackend(gbps=8.0, latency_ns=100), record_flows=True)
    dag = FlowDag()
    first = dag.add(0, 1, 1000, tag=0)
    dag.add(1, 2, 500, tag=0, deps=(first,), delay_ns=50)
    ticket = scheduler.submit(dag, 0)
    drain(scheduler)
    assert [(f.ticket, f.src, f.dst, f.start_ns, f.end_ns) for f in scheduler.flows] == [
        (ticket, 0, 1, 0, 1100), (ticket, 1, 2, 1150, 1750)]
