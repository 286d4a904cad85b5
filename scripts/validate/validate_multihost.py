"""Multi-host checks: all_reduce busbw saturates at the NIC speed, and an oversubscribed
spine slows it as expected.

Reference: on 400 Gb/s NDR NICs nccl-tests reaches 46-48 GB/s of busbw per NIC
(nccl-tests #290; validation_anchors.md 4.2); 8 x 200G HDR DGX-A100 nodes reach 192 GB/s
(NVIDIA/nccl #1576), i.e. busbw ~ NICs per host x per-NIC rate when NVLink is not the limit.
With one GPU (one NIC) per host the ring is purely NIC-bound; with 8 GPUs per host NVLink
(~333 GB/s per GPU in the collective model) binds before 8 x 400G NICs do. With a leaf-spine
whose uplinks are oversubscribed x:1 and one host per leaf, every ring hop crosses the spine:
with perfect spreading busbw would fall to 1/x of the non-blocking case, but per-flow ECMP
hashes each host's 8 ring connections onto the uplinks, so collisions already slow the 1:1
case (8 flows on 8 uplinks: the busiest uplink carries 2-3) and the slowdown with x is
milder than 1/x (8 flows on 8/x uplinks). The ``ideal`` column is the perfect-spreading 1/x.
Each check runs on ns-3 with each transport (roce: PFC + DCQCN, simai preset; dctcp) and on
the fluid flow backend.

Usage:
  1. python scripts/validate/validate_multihost.py                  # both checks, roce, dctcp and flow
  2. python scripts/validate/validate_multihost.py --backend flow   # fast fluid-only cross-check
  3. python scripts/validate/validate_multihost.py --size 64MiB
"""

import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from phantora.run import run_scenario  # noqa: E402
from phantora.scenario import parse_scenario  # noqa: E402
from scripts import common  # noqa: E402

REFERENCE_PER_NIC_GBS = (46.0, 48.0)
BACKENDS = ("roce", "dctcp", "flow")
"""ns-3 with each transport, and the fluid model."""


def network_keys(backend: str) -> dict[str, str]:
    """``cluster.network`` keys selecting ``backend`` (one of :data:`BACKENDS`)."""
    return {"backend": "flow"} if backend == "flow" else {"backend": "ns3", "transport": backend}


def scenario(hosts: int, gpus_per_host: int, network: dict[str, Any], size: str) -> dict[str, Any]:
    return {"cluster": {"gpu": "h100", "hosts": hosts, "gpus_per_host": gpus_per_host,
                        "network": {"nic_bandwidth": "400Gbps", **network}},
            "workload": {"collectives": {"ops": ["all_reduce"], "sizes": [size]}}}


def busbw(data: dict[str, Any], work: Path) -> float:
    parsed = parse_scenario(data, source="validate_multihost")
    summary = run_scenario(parsed, work, Console(quiet=True))
    return summary.collectives[0].busbw_gbs


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--backend", nargs="*", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--size", default="256MiB")
    args = parser.parse_args()
    console = Console(width=200)  # full rows even when piped to a file
    console.print(f"{common.machine_header()}; all_reduce of {args.size}, H100, 400 Gbps NICs")
    saturation = Table(title="NIC saturation (rail-optimized): busbw per NIC vs 46-48 GB/s")
    for column in ("hosts x GPUs", "backend", "busbw GB/s", "per NIC GB/s", "vs 47 GB/s"):
        saturation.add_column(column, justify="right")
    oversub = Table(title="Oversubscribed spine (leaf-spine, 1 host per leaf, 4 x 8 GPUs)")
    for column in ("oversubscription", "backend", "busbw GB/s", "vs 1:1", "ideal (1/x)"):
        oversub.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for hosts, gpus in ((2, 1), (4, 1), (2, 8), (4, 8)):
            for backend in args.backend:
                bw = busbw(scenario(hosts, gpus, {"topology": "rail-optimized",
                                                  **network_keys(backend)}, args.size), work)
                per_nic = bw / gpus
                saturation.add_row(f"{hosts} x {gpus}", backend, f"{bw:.1f}", f"{per_nic:.1f}",
                                   f"{(per_nic / 47.0 - 1) * 100:+.1f}%")
        for backend in args.backend:
            base = 0.0
            for ratio in (1, 2, 4):
                network = {"topology": "leaf-spine", "hosts_per_leaf": 1,
                           "oversubscription": ratio, **network_keys(backend)}
                bw = busbw(scenario(4, 8, network, args.size), work)
                base = base or bw
                oversub.add_row(f"{ratio}:1", backend, f"{bw:.1f}", f"{bw / base:.2f}",
                                f"{1 / ratio:.2f}")
    console.print(saturation)
    console.print(oversub)


if __name__ == "__main__":
    main()
