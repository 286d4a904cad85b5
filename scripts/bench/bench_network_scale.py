"""CPU cost of the collective model and the network backends at scale (issue 19).

The workload of a Llama-3-8B FSDP2 step, one collective at a time on the world group:
all_gather of a layer's bf16 params (436 MB gathered), reduce_scatter of its fp32 grads
(872 MB input), all_reduce of 1 GB and of 1 MB, on 8 GPUs per host, rail-optimized
400 Gbps fabric. Per collective: NCCL's choice, plan time (``plan_collective``), simulate
time on a fresh backend (``cold``: routes computed) and again on the same backend (``warm``:
a training step's later collectives), flows and simulated time. The live engine caches
plans, so a repeated collective costs its warm simulate time.

Usage:
  1. python scripts/bench/bench_network_scale.py                     # flow backend, 8..1024 GPUs
  2. python scripts/bench/bench_network_scale.py --gpus 64 128 --exact
                                              # also the step-by-step ring, and the difference
  3. python scripts/bench/bench_network_scale.py --backend ns3 --gpus 16 64
  4. python scripts/bench/bench_network_scale.py --export-result out.json
  5. python scripts/bench/bench_network_scale.py --import-result out.json    # reprint a saved run
"""

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from hwmodel.catalogue import lookup_gpu  # noqa: E402
from phantora.collectives import (CollectiveRequest, NcclConfig, SystemInfo,  # noqa: E402
                                  plan_collective)
from phantora.engine.flow_scheduler import run_dag  # noqa: E402
from phantora.run.assemble import make_backend  # noqa: E402
from phantora.scenario.cluster_graph import build_topology  # noqa: E402
from phantora.scenario import Scenario, parse_scenario  # noqa: E402
from scripts import common  # noqa: E402

COLLECTIVES: tuple[tuple[str, str, int, int], ...] = (
    ("all_gather 436 MB", "all_gather", 436_000_000, 2),
    ("reduce_scatter 872 MB", "reduce_scatter", 872_000_000, 4),
    ("all_reduce 1 GiB", "all_reduce", 1 << 30, 4),
    ("all_reduce 1 MiB", "all_reduce", 1 << 20, 4),
)
"""(label, op, nccl-tests bytes, dtype bytes)."""

EXACT = NcclConfig(flow_budget=10**9, stepwise_ring_ranks=10**6)
"""Every ring step by step: the reference the coarse ring is measured against."""


@dataclass
class Row:
    backend: str
    gpus: int
    collective: str
    choice: str
    plan_s: float
    cold_s: float
    warm_s: float
    flows: int
    simulated_ms: float
    exact_ms: float | None


def scenario(gpus: int, backend: str) -> Scenario:
    """``gpus / 8`` H100 hosts; more than one on a rail-optimized 400 Gbps fabric."""
    cluster: dict[str, object] = {"gpu": "h100", "hosts": gpus // 8, "gpus_per_host": 8}
    if gpus > 8:
        cluster["network"] = {"topology": "rail-optimized", "nic_bandwidth": "400Gbps",
                              "backend": backend}
    return parse_scenario({"cluster": cluster, "workload": {"collectives": {
        "ops": ["all_reduce"], "sizes": ["1MiB"]}}}, f"bench-{gpus}gpu")


def measure(gpus: int, backend: str, exact: bool) -> list[Row]:
    """Every collective of :data:`COLLECTIVES` on ``gpus`` GPUs."""
    spec = scenario(gpus, backend)
    topology = build_topology(spec.cluster)
    system = SystemInfo.from_topology(topology, lookup_gpu(spec.cluster.gpu))
    rows = []
    for label, op, nbytes, dtype in COLLECTIVES:
        request = CollectiveRequest.make(op, list(range(gpus)), nbytes, dtype)
        start = time.perf_counter()
        dag = plan_collective(request, system)
        plan_s = time.perf_counter() - start
        network = make_backend(topology, spec.cluster.network, spec.seed)
        times = []
        for _ in range(2 if backend == "flow" else 1):
            begin_ns = network.now_ns()
            start = time.perf_counter()
            end_ns = run_dag(dag, network, begin_ns)
            times.append(time.perf_counter() - start)
            network.advance_to(end_ns)
        network.close()
        simulated_ms = (end_ns - begin_ns) / 1e6
        exact_ms = None
        if exact:
            reference = plan_collective(request, system, EXACT)
            exact_ms = run_dag(reference, make_backend(topology, spec.cluster.network,
                                                       spec.seed), 0) / 1e6
        rows.append(Row(backend, gpus, label, f"{dag.algorithm}/{dag.protocol}/{dag.channels}",
                        plan_s, times[0], times[-1], sum(1 for f in dag.flows if f.nbytes),
                        simulated_ms, exact_ms))
    return rows


def table(rows: list[Row]) -> Table:
    out = Table(title="collective model + network backend at scale (one collective, world group)")
    for name in ("backend", "GPUs", "collective", "algo/proto/ch", "plan s", "sim cold s",
                 "sim warm s", "flows", "simulated ms", "vs step-by-step"):
        out.add_column(name, justify="left" if name in ("backend", "collective") else "right")
    for r in rows:
        diff = ("" if r.exact_ms is None
                else f"{100 * (r.simulated_ms - r.exact_ms) / r.exact_ms:+.2f}%")
        out.add_row(r.backend, str(r.gpus), r.collective, r.choice, f"{r.plan_s:.3f}",
                    f"{r.cold_s:.3f}", f"{r.warm_s:.3f}", str(r.flows), f"{r.simulated_ms:.4f}",
                    diff)
    return out


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 64, 256, 1024])
    parser.add_argument("--backend", choices=("flow", "ns3"), default="flow")
    parser.add_argument("--exact", action="store_true",
                        help="also simulate every ring step by step and print the difference")
    common.add_result_flags(parser)
    args = parser.parse_args()
    console = Console(width=160)
    if saved := common.imported_result(args):
        console.print(saved["header"])
        console.print(table([Row(**row) for row in saved["rows"]]))
        return
    header = common.machine_header()
    console.print(header)
    rows = []
    for gpus in args.gpus:
        rows += measure(gpus, args.backend, args.exact)
        console.print(table(rows[-len(COLLECTIVES):]))
    common.export_result(args, header, [asdict(r) for r in rows])


if __name__ == "__main__":
    main()
