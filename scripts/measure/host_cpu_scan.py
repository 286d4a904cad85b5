"""Which of a lent host's CPUs run at the reference's speed: one host-speed benchmark round
(``intercept.host_time.host_benchmark``) pinned to each allowed CPU in turn, ``--sweeps`` times.

``host_watch.py`` reads a lent host flipping between ~0.45 and ~0.95 of its reference within
seconds. If the slow readings belong to some virtual CPUs (ones whose hardware thread another
tenant shares), pinning the real runs to the others takes the flips out of their steps; if every
CPU flips, pinning cannot help. The table says which: a row per CPU, a column per sweep, and
the CPU's median. ``FAST`` names the CPUs whose median is within ``--within`` of the best, for
``taskset -c``.

    python3 scripts/measure/host_cpu_scan.py --sweeps 12 --out /tmp/scan.json

Needs only torch and the standard library (the device machines' own Python).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from hwmodel.measured.host_references import ReferenceHost, references  # noqa: E402
from intercept.host_time.host_benchmark import measure  # noqa: E402


def siblings(cpu: int) -> str:
    """The CPUs the kernel says share ``cpu``'s core ('?' where sysfs does not say)."""
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    try:
        return path.read_text().strip()
    except OSError:
        return "?"


def scan(cpus: list[int], sweeps: int, reference: ReferenceHost) -> dict[int, list[float]]:
    """Each CPU's factor against ``reference`` in each sweep (1.0: the reference's speed)."""
    factors: dict[int, list[float]] = {cpu: [] for cpu in cpus}
    for _ in range(sweeps):
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            measure(rounds=1)  # the move's first round pays for cold caches
            factors[cpu].append(reference.ratio(measure(rounds=1)).factor)
    os.sched_setaffinity(0, set(cpus))
    return factors


def fast_cpus(factors: dict[int, list[float]], within: float) -> list[int]:
    """The CPUs whose median factor is at least ``1 - within`` of the best median."""
    medians = {cpu: statistics.median(values) for cpu, values in factors.items()}
    best = max(medians.values())
    return sorted(cpu for cpu, m in medians.items() if m >= (1 - within) * best)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweeps", type=int, default=12, help="rounds per CPU (default 12)")
    parser.add_argument("--gpu", default="h200", help="the reference host of this GPU "
                        "(default h200)")
    parser.add_argument("--within", type=float, default=0.1,
                        help="FAST: median within this share of the best (default 0.1)")
    parser.add_argument("--out", type=Path, help="also write the factors as JSON here")
    args = parser.parse_args(argv)
    if args.sweeps < 1:
        parser.error(f"--sweeps is {args.sweeps}; it must be >= 1")
    import torch  # noqa: F401  (the benchmark's torch component runs only where torch is imported)

    reference = references().for_gpu(args.gpu)
    cpus = sorted(os.sched_getaffinity(0))
    measure(rounds=1)  # warm: the first round pays for the torch component's first use
    factors = scan(cpus, args.sweeps, reference)
    print(f"factor of {reference.name} per CPU (a column per sweep)")
    for cpu, values in factors.items():
        row = " ".join(f"{v:.2f}" for v in values)
        print(f"cpu {cpu:3d} (siblings {siblings(cpu):>7s}) median "
              f"{statistics.median(values):.3f} | {row}")
    fast = fast_cpus(factors, args.within)
    print("FAST " + ",".join(str(cpu) for cpu in fast))
    if args.out:
        args.out.write_text(json.dumps({"reference": reference.name,
                                        "factors": {str(c): v for c, v in factors.items()},
                                        "fast": fast}, indent=1))


if __name__ == "__main__":
    main()
