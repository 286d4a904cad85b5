"""CPU cost of the fluid network backend on a multi-host ring all-reduce.

The workload is the one the fluid model must handle fast: a ring all-reduce over
``hosts x gpus_per_host`` GPUs with ``channels`` rings (one connection tag each), ``2(n-1)``
steps, one flow of ``chunk`` bytes per rank, channel and step; a rank sends step ``s`` once it
received step ``s-1`` from its ring predecessor. Channel ``c`` visits each host's GPUs starting
at local GPU ``c``, so every NIC carries one channel, as NCCL spreads rings over rails.

Usage:
  1. python scripts/bench_fluid.py                         # 8x8 H100, 8 channels, 2 MiB flows
  2. python scripts/bench_fluid.py --backend all           # one FluidBackend for everything
  3. python scripts/bench_fluid.py --hosts-per-leaf 8      # one leaf: no ECMP collisions, so
                                                           #    the rings stay in lockstep
  4. python scripts/bench_fluid.py --hosts 2 --channels 2  # a quick smaller run
  5. python scripts/bench_fluid.py --export-result out.json
"""

import argparse
import json
import platform
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from phantora.cluster.catalogue import lookup_gpu
from phantora.cluster.topology import HostSpec, Topology, leaf_spine
from phantora.collectives.dag import FlowDag
from phantora.network.base import NetworkBackend
from phantora.network.composite import CompositeBackend
from phantora.network.flow import FluidBackend


@dataclass
class Result:
    backend: str
    hosts: int
    hosts_per_leaf: int
    gpus_per_host: int
    channels: int
    chunk_bytes: int
    intra_flows: int
    inter_flows: int
    simulated_ns: int
    busbw_gbs: float
    cpu_build_s: float
    cpu_simulate_s: float
    stats: dict[str, int | float]
    machine: str
    commit: str


def ring_allreduce_dag(topology: Topology, channels: int, chunk_bytes: int) -> FlowDag:
    """Flows of a ``channels``-ring all-reduce in which every flow carries ``chunk_bytes``."""
    g = topology.gpus_per_host
    dag = FlowDag(algorithm="ring", protocol="simple", channels=channels)
    for channel in range(channels):
        ring = [host * g + (channel + k) % g for host in range(topology.hosts) for k in range(g)]
        n = len(ring)
        previous: list[int] = []
        for _ in range(2 * (n - 1)):
            previous = [dag.add(ring[r], ring[(r + 1) % n], chunk_bytes, channel,
                                deps=(previous[(r - 1) % n],) if previous else ())
                        for r in range(n)]
    return dag


def run_dag(backend: NetworkBackend, dag: FlowDag) -> int:
    """Run ``dag`` from time 0 the way the engine will; return when its last flow completed."""
    waiting_on = [len(flow.deps) for flow in dag.flows]
    children: list[list[int]] = [[] for _ in dag.flows]
    for index, flow in enumerate(dag.flows):
        for dep in flow.deps:
            children[dep].append(index)
    spec_of: dict[int, int] = {}

    def launch(index: int, ready_ns: int) -> None:
        flow = dag.flows[index]
        flow_id = backend.add_flow(flow.src, flow.dst, flow.nbytes, ready_ns + flow.delay_ns,
                                   flow.tag)
        spec_of[flow_id] = index

    for index, count in enumerate(waiting_on):
        if count == 0:
            launch(index, 0)
    end_ns = 0
    while (next_ns := backend.next_event_ns()) is not None:
        for done in backend.advance_to(next_ns):
            end_ns = done.end_ns
            for child in children[spec_of.pop(done.flow_id)]:
                waiting_on[child] -= 1
                if waiting_on[child] == 0:
                    launch(child, done.end_ns)
    return end_ns + dag.tail_ns


def make_backend(kind: str, topology: Topology) -> NetworkBackend:
    if kind == "all":
        return FluidBackend(topology, "all")
    return CompositeBackend(topology, FluidBackend(topology, "intra"),
                            FluidBackend(topology, "inter"))


def measure(kind: str, hosts: int, hosts_per_leaf: int, channels: int,
            chunk_bytes: int) -> Result:
    gpu = lookup_gpu("h100")
    host = HostSpec(gpus_per_host=8, nvlink_gbps=gpu.nvlink_gbps, nvlink_latency_ns=500,
                    nic_gbps=gpu.default_nic_gbps)
    # Leaves non-blocking towards the spines: 800 Gbps to each of 4 spines per host.
    topology = leaf_spine(host, hosts=hosts, hosts_per_leaf=hosts_per_leaf,
                          spines=4 * hosts_per_leaf, link_gbps=800.0, latency_ns=1000)
    cpu0 = time.process_time()
    dag = ring_allreduce_dag(topology, channels, chunk_bytes)
    backend = make_backend(kind, topology)
    cpu1 = time.process_time()
    simulated_ns = run_dag(backend, dag)
    cpu2 = time.process_time()
    n = topology.num_gpus
    intra = sum(topology.same_host(f.src, f.dst) for f in dag.flows)
    per_rank_bytes = chunk_bytes * n * channels
    busbw = per_rank_bytes / simulated_ns * 2 * (n - 1) / n
    stats = backend.stats()
    backend.close()
    return Result(kind, hosts, hosts_per_leaf, host.gpus_per_host, channels, chunk_bytes, intra,
                  len(dag.flows) - intra, simulated_ns, round(busbw, 3), round(cpu1 - cpu0, 3),
                  round(cpu2 - cpu1, 3), stats.extra, platform.processor() or platform.machine(),
                  _commit())


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False, cwd=Path(__file__).parent)
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["composite", "all"], default="composite",
                        help="fluid NVLink + fluid fabric under CompositeBackend, or one "
                             "FluidBackend of scope 'all'")
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--hosts-per-leaf", type=int, default=2)
    parser.add_argument("--channels", type=int, default=8)
    parser.add_argument("--chunk-bytes", type=int, default=2 * 2**20)
    parser.add_argument("--export-result", type=Path, help="write the result as JSON here")
    args = parser.parse_args()
    result = measure(args.backend, args.hosts, args.hosts_per_leaf, args.channels,
                     args.chunk_bytes)
    for key, value in asdict(result).items():
        print(f"{key:>16}: {value}")
    if args.export_result:
        args.export_result.write_text(json.dumps(asdict(result), indent=2) + "\n")


if __name__ == "__main__":
    main()
