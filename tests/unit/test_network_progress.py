"""The network's progress reporter samples without changing what the backend returns."""

from phantora.cluster.topology import HostSpec, rail_optimized
from phantora.network.flow import FluidBackend
from phantora.network.progress import Progress, ProgressBackend, network_events


def test_progress_reports_clock_and_flows_and_passes_everything_through() -> None:
    topology = rail_optimized(HostSpec(2, 3600.0, 100, 400.0), hosts=2, spines=1,
                              link_gbps=400.0, latency_ns=500)
    samples: list[Progress] = []
    backend = ProgressBackend(FluidBackend(topology, scope="inter"), samples.append, every_s=0)
    plain = FluidBackend(topology, scope="inter")
    for net in (backend, plain):
        net.add_flow(0, 2, 1_000_000, 0)
        net.add_flow(1, 3, 2_000_000, 10)
    done = [backend.advance_to(2**40) for _ in range(2)]
    assert done == [plain.advance_to(2**40) for _ in range(2)]
    assert [sample.simulated_ns for sample in samples] == [d[0].end_ns for d in done]
    assert samples[-1].flows == 2 and samples[-1].events == 0
    assert "ms simulated, 2 flows" in samples[-1].line()


def test_events_are_summed_over_the_backends_parts() -> None:
    topology = rail_optimized(HostSpec(2, 3600.0, 100, 400.0), hosts=2, spines=1,
                              link_gbps=400.0, latency_ns=500)
    stats = FluidBackend(topology, scope="inter").stats()
    stats.extra.update({"inter.events": 7, "intra.events": 5, "inter.events_per_s": 1.0})
    assert network_events(stats) == 12
