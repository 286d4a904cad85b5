"""CPU cost of the simulated caching allocator per allocation or free (it runs for every fake
CUDA tensor a rank creates or drops).

  python3 scripts/bench/bench_allocator.py

Replays 40,000 allocations and frees of a training step's mix of sizes, best of 5, minus the
cost of the same loop with no-op malloc/free, and prints the cost per call.
"""

import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from intercept.memory.allocator import CachingAllocator  # noqa: E402
from scripts import common  # noqa: E402

MiB = 2**20
CALLS = 40_000
SIZES = [3 * MiB + 1000, 4096, 25 * MiB, 600_000, 50 * MiB, 8192, 1536, 12 * MiB]


def traffic_cpu_s(malloc: Callable[[int, int], Any], free: Callable[[Any], None]) -> float:
    """CPU seconds of :data:`CALLS` allocations and frees of :data:`SIZES`."""
    rng = random.Random(0)
    live: list[Any] = []
    start = time.process_time()
    for i in range(CALLS):
        if live and (len(live) > 200 or rng.random() < 0.5):
            free(live.pop(rng.randrange(len(live))))
        else:
            live.append(malloc(SIZES[i % len(SIZES)], 0))
    return time.process_time() - start


def main() -> None:
    common.parser(__doc__).parse_args()  # no options: --help only
    loop_s = min(traffic_cpu_s(lambda n, s: n, lambda b: None) for _ in range(5))
    model_s = min(traffic_cpu_s(a.malloc, a.free)
                  for a in (CachingAllocator(0, 80 * 2**30) for _ in range(5)))
    print(f"allocator: {(model_s - loop_s) / CALLS * 1e6:.2f} us CPU per allocation or free "
          f"(best of 5 x {CALLS} calls)")


if __name__ == "__main__":
    main()
