"""Measure what a line of Python costs on a GPU host as a function of how recently that same line
ran and whether a GPU op was launched just before it: evidence on what the cold-code factor of
``intercept.host_time.python_work`` stands for (``docs/models/host.md``, known limits).

Run on a lent GPU host (its CPU is the reference), with the device machines' own Python and torch:

    python3 scripts/measure/measure_python_reuse.py --json $OUT/python_reuse.json

A *unit* is a small function of the kinds a training step's Python is made of (attribute reads,
a dict store, an ``isinstance``, a helper call): 6 lines, 2 calls. One iteration runs a segment of
``K`` unit calls, either

* ``same``: one unit called ``K`` times in a loop (a ZeRO hook walking its parameters), or
* ``distinct``: ``K`` different units, each its own code object and data, called once each in
  straight-line code (a model's forward: every line runs once a step),

after either nothing (``none``) or one launch of a small CUDA op (``launch``). Per combination:
ns per iteration less the same loop's with an empty segment, the fastest of ``--rounds`` rounds
of enough iterations to fill ``--round-ms``, the combinations taken in a shuffled order in
``--passes`` passes (a lent host's speed drifts within a minute), the fastest pass kept. Without
a GPU (``--device cpu``) the launch is a CPU op: the timing runs, the figures mean nothing.

What the figures answer: per line, ``distinct`` against ``same`` is what a line costs whose code
and data were last touched a whole segment ago; ``launch`` against ``none`` is what a launch
leaves cold behind it; both as ``K`` grows.
"""

import functools
import json
import math
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.measure.measure_python_work import count  # noqa: E402

SEGMENTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
"""Units per segment (``K``)."""

UNIT_TEMPLATE = """
def unit_{i}(state, store):
    width = state.width_{j} + state.depth
    if isinstance(width, int):
        store["key_{i}"] = width
    scaled = helper_{i}(width, state.scale)
    return scaled

def helper_{i}(x, s):
    return x * s
"""


class State:
    """The attributes units read; ``width_j`` spread over many names, as a model's are."""

    def __init__(self, names: int) -> None:
        self.depth, self.scale = 12, 0.5
        for j in range(names):
            setattr(self, f"width_{j}", j)


def make_units(n: int) -> list[Callable[[State, dict[str, int]], float]]:
    """``n`` distinct units, each its own code object reading its own attribute."""
    namespace: dict[str, Any] = {}
    exec(compile("".join(UNIT_TEMPLATE.format(i=i, j=i) for i in range(n)),
                 "<units>", "exec"), namespace)
    return [namespace[f"unit_{i}"] for i in range(n)]


def make_segment(kind: str, k: int, units: list[Callable[..., float]]) -> Callable[..., None]:
    """A function running ``k`` unit calls: a loop over one unit, or ``k`` distinct calls in a
    row (straight-line code, one line per call)."""
    if kind == "same":
        unit = units[0]

        def same(state: State, store: dict[str, int]) -> None:
            for _ in range(k):
                unit(state, store)
        return same
    body = "".join(f"    u[{i}](state, store)\n" for i in range(k)) or "    pass\n"
    namespace: dict[str, Any] = {}
    exec(compile(f"def distinct(state, store, u):\n{body}", f"<segment {k}>", "exec"), namespace)
    segment, chosen = namespace["distinct"], units[:k]
    return lambda state, store: segment(state, store, chosen)


def time_iteration(segment: Callable[..., None], launch: Callable[[], None] | None,
                   state: State, rounds: int, round_ms: float, sync: Callable[[], None]) -> float:
    """ns per iteration (launch, then the segment): the fastest round."""
    store: dict[str, int] = {}

    def run(n: int) -> float:
        sync()
        start = time.perf_counter_ns()
        if launch is None:
            for _ in range(n):
                segment(state, store)
        else:
            for _ in range(n):
                launch()
                segment(state, store)
        elapsed = time.perf_counter_ns() - start
        sync()
        return elapsed / n

    per = run(20)
    n = max(20, int(round_ms * 1e6 / max(per, 1.0)))
    return min(run(n) for _ in range(rounds))


def measure(device: str, rounds: int, round_ms: float, passes: int) -> dict[str, Any]:
    import torch

    units = make_units(max(SEGMENTS))
    state = State(max(SEGMENTS))
    a = torch.ones(256, device=device)
    b, out = torch.ones_like(a), torch.empty_like(a)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def launch() -> None:
        torch.add(a, b, out=out)

    afters: dict[str, Callable[[], None] | None] = {"none": None, "launch": launch}
    segments = {(kind, k): make_segment(kind, k, units) for kind in ("same", "distinct")
                for k in (0, *SEGMENTS)}
    combos = [(kind, k, after) for (kind, k) in segments for after in afters]
    best: dict[tuple[str, int, str], float] = {}
    order = random.Random(0)
    for _ in range(passes):
        order.shuffle(combos)
        for kind, k, after in combos:
            ns = time_iteration(segments[kind, k], afters[after], state, rounds, round_ms, sync)
            best[kind, k, after] = min(best.get((kind, k, after), math.inf), ns)
    rows = []
    for kind in ("same", "distinct"):
        for k in SEGMENTS:
            lines, calls = count(functools.partial(segments[kind, k], state, {}))
            for after in afters:
                ns = best[kind, k, after] - best[kind, 0, after]
                rows.append({"kind": kind, "k": k, "after": after, "lines": lines,
                             "calls": calls, "ns": round(ns, 1)})
                print(f"{kind:9s} K={k:5d} after {after:6s} {lines:6d} lines {ns / 1000:9.2f} us "
                      f"{ns / lines:7.1f} ns/line", flush=True)
    return {"provenance": {"python": platform.python_version(), "torch": torch.__version__,
                           "machine": platform.node(), "cpu": common.cpu_model(),
                           "device": device, "rounds": rounds, "round_ms": round_ms,
                           "passes": passes, "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())},
            "baseline_ns": {after: round(best["same", 0, after], 1) for after in afters},
            "rows": rows}


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-ms", type=float, default=20.0)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the raw record here")
    args = parser.parse_args()
    record = measure(args.device, args.rounds, args.round_ms, args.passes)
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
