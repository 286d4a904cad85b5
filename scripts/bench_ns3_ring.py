"""Drive the ns-3 backend with the inter-host traffic of a ring all-reduce and time it.

Pattern (the network part of ``scenarios/bench/allreduce-64gpu.yaml``): 8 hosts x 8 GPUs on a
rail-optimized fabric; ring ``r`` links GPU ``r`` of every host (same rail, so NIC -> rail
switch -> NIC); every ring does ``2 * (ranks - 1)`` steps over 64 ranks; in each step every
ring hop sends one message, which starts as soon as the previous step's message into the
sending GPU has arrived. Defaults: 126 steps x 64 connections x 2 MiB = 15.75 GiB.

Usage:
  1. python scripts/bench_ns3_ring.py                      # the benchmark, default config
  2. python scripts/bench_ns3_ring.py --steps 20           # a shorter run
  3. python scripts/bench_ns3_ring.py --mtu 1500           # any integer Ns3Config field
  4. python scripts/bench_ns3_ring.py --transport dctcp    # default roce
  5. python scripts/bench_ns3_ring.py --single-flow        # one 400 Gbps flow: goodput
  6. python scripts/bench_ns3_ring.py --export-result r.json
"""

import argparse
import dataclasses
import json
import platform
import resource
import subprocess
import time
from pathlib import Path

from phantora.cluster.topology import HostSpec, rail_optimized
from phantora.network.ns3 import Ns3Backend, Ns3Config
from phantora.network.ns3.config import TRANSPORTS


def ring_all_reduce(backend: Ns3Backend, hosts: int, rings: int, steps: int,
                    message_bytes: int) -> int:
    """Run the step-by-step ring pattern; returns the simulated end time in ns."""
    gpus_per_host = rings
    # ring r, member h: GPU r of host h sends to GPU r of host h+1
    hops = [(h * gpus_per_host + r, ((h + 1) % hosts) * gpus_per_host + r)
            for r in range(rings) for h in range(hosts)]
    receiver_of = {flow_src: dst for flow_src, dst in hops}
    sent_step = {src: 0 for src, _ in hops}
    flow_src: dict[int, int] = {}
    for src, dst in hops:
        flow_src[backend.add_flow(src, dst, message_bytes, 0, tag=0)] = src
    end_ns = 0
    while flow_src:
        for done in backend.advance_to(2**62):
            src = flow_src.pop(done.flow_id)
            end_ns = done.end_ns
            dst = receiver_of[src]  # the message into `dst` arrived: dst sends its next step
            if sent_step[dst] + 1 < steps:
                sent_step[dst] += 1
                flow_src[backend.add_flow(dst, receiver_of[dst], message_bytes, done.end_ns)] = dst
    return end_ns


def single_flow(backend: Ns3Backend, gpus_per_host: int, message_bytes: int) -> int:
    """One flow from GPU 0 to GPU 0 of the next host; returns its end time in ns."""
    backend.add_flow(0, gpus_per_host, message_bytes, 0)
    while not (done := backend.advance_to(2**62)):
        pass
    return done[0].end_ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--gpus-per-host", type=int, default=8)
    parser.add_argument("--steps", type=int, default=126)
    parser.add_argument("--message-bytes", type=int, default=2 * 2**20)
    parser.add_argument("--nic-gbps", type=float, default=400.0)
    parser.add_argument("--latency-ns", type=int, default=1000)
    parser.add_argument("--single-flow", action="store_true")
    parser.add_argument("--export-result", type=Path)
    parser.add_argument("--transport", choices=TRANSPORTS, default="roce")
    for f in dataclasses.fields(Ns3Config):
        if f.name not in ("transport", "roce"):  # every other field is an integer
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=int, dest=f.name)
    args = parser.parse_args()
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(Ns3Config)
                 if getattr(args, f.name, None) is not None}
    config = Ns3Config(**overrides)

    cpu0 = time.process_time()
    topology = rail_optimized(HostSpec(args.gpus_per_host, 3600.0, 500, args.nic_gbps),
                              hosts=args.hosts, spines=2, link_gbps=args.nic_gbps,
                              latency_ns=args.latency_ns)
    backend = Ns3Backend(topology, config)
    cpu_setup = time.process_time() - cpu0
    cpu1 = time.process_time()
    if args.single_flow:
        end_ns = single_flow(backend, args.gpus_per_host, args.message_bytes)
    else:
        end_ns = ring_all_reduce(backend, args.hosts, args.gpus_per_host, args.steps,
                                 args.message_bytes)
    cpu_run = time.process_time() - cpu1
    stats = backend.stats()
    backend.close()
    extra = stats.extra
    result = {
        "config": dataclasses.asdict(config),
        "pattern": "single-flow" if args.single_flow else "ring",
        "flows": stats.flows, "bytes": stats.bytes,
        "simulated_ms": end_ns / 1e6,
        "goodput_gbs": stats.bytes / end_ns if args.single_flow else None,
        "cpu_setup_s": round(cpu_setup, 2), "cpu_run_s": round(cpu_run, 2),
        "events_per_cpu_s": round(extra["events"] / cpu_run),
        "packet_hops_per_cpu_s": round(extra["packet_hops"] / cpu_run),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "stats": extra,
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}",
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True, check=False).stdout.strip(),
    }
    print(json.dumps(result, indent=1))
    if args.export_result:
        args.export_result.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
