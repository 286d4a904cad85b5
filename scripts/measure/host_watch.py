"""Watch a GPU host's CPU speed while real runs go on beside it: one host-speed benchmark round
(``intercept.host_time.host_benchmark``, ~5 ms of CPU) every ``--every-s``, one JSON line each.

A lent host's speed moves by up to 2x within minutes (``scripts/data/steps/README.md``), so a
benchmark taken before a session does not say how fast its runs went. Run beside them, the
rounds that fall inside a run say it (:func:`speed_during`): ``measure_steps.py run
--host-watch`` starts this, and writes each run's reading into its log as an ``=== HOST`` line.
Each line also has the host's cumulative CPU ticks from ``/proc/stat``: all, and the ``steal``
ones (time a virtual CPU was runnable while the hypervisor ran something else), where the kernel
reports them.

    python3 scripts/measure/host_watch.py --out /tmp/watch.jsonl --every-s 0.25   # until killed

Needs only torch and the standard library (the device machines' own Python).
"""

from __future__ import annotations

import argparse
import gzip
import json
import signal
import statistics
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from hwmodel.measured.host_references import ReferenceHost  # noqa: E402
from intercept.host_time.host_benchmark import measure  # noqa: E402

EVERY_S = 0.25
"""Seconds between rounds: a round costs ~5 ms of one CPU, 2% of it at this rate."""


@dataclass(frozen=True)
class Reading:
    """One benchmark round, at wall time ``t`` (``time.time()``)."""

    t: float
    components_ns: Mapping[str, int]
    cpu_ticks: int | None
    steal_ticks: int | None


@dataclass(frozen=True)
class RunSpeed:
    """The host's speed over one run: the reference over the median round inside it."""

    factor: float
    """``reference_ns / local_ns`` of the components' medians: 1.0 is the reference's speed."""
    rounds: int
    lowest: float
    highest: float
    """The slowest and fastest single round, as factors."""
    steal_share: float | None
    """Stolen CPU ticks over all ticks between the first round and the last (None where the
    host reports none, or one round only)."""

    def log_line(self, run: str, reference: str) -> str:
        steal = "n/a" if self.steal_share is None else f"{100 * self.steal_share:.1f}%"
        return (f"=== HOST {run}: {self.factor:.3f} of {reference} ({self.rounds} rounds, "
                f"{self.lowest:.3f}-{self.highest:.3f}; steal {steal})")


def cpu_ticks(stat_text: str) -> tuple[int, int | None] | None:
    """(all ticks, steal ticks) of the ``cpu`` line of ``/proc/stat``; steal None where the line
    has no such column, None where there is no ``cpu`` line."""
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:]]
            return sum(values), (values[7] if len(values) > 7 else None)
    return None


def read_ticks() -> tuple[int | None, int | None]:
    try:
        ticks = cpu_ticks(Path("/proc/stat").read_text())
    except OSError:
        return None, None
    return ticks if ticks is not None else (None, None)


def read_watch(path: Path) -> list[Reading]:
    """The rounds a watch wrote, plain or gzipped (``.gz``; a line cut short by its end is
    skipped)."""
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    readings = []
    for line in text.splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        readings.append(Reading(float(data["t"]), dict(data["ns"]), data.get("cpu_ticks"),
                                data.get("steal_ticks")))
    return readings


def speed_during(readings: Iterable[Reading], start_t: float, end_t: float,
                 reference: ReferenceHost) -> RunSpeed | None:
    """The host's speed over ``[start_t, end_t]`` from the rounds inside it; None if none is."""
    inside = [r for r in readings if start_t <= r.t <= end_t]
    if not inside:
        return None
    names = sorted(set.intersection(*(set(r.components_ns) for r in inside)))
    median_ns = {n: int(statistics.median(r.components_ns[n] for r in inside)) for n in names}
    singles = [reference.ratio({n: r.components_ns[n] for n in names}).factor for r in inside]
    first, last = inside[0], inside[-1]
    steal = None
    if (len(inside) > 1 and None not in (first.cpu_ticks, last.cpu_ticks, first.steal_ticks,
                                         last.steal_ticks)
            and last.cpu_ticks > first.cpu_ticks):
        steal = (last.steal_ticks - first.steal_ticks) / (last.cpu_ticks - first.cpu_ticks)
    return RunSpeed(reference.ratio(median_ns).factor, len(inside), min(singles), max(singles),
                    steal)


def watch(out: Path, every_s: float) -> None:
    """Append one round a line to ``out`` until SIGTERM or SIGINT."""
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    measure(rounds=1)  # warm: the first round pays for the torch component's first use
    with open(out, "a") as sink:
        while not stop:
            components = measure(rounds=1)
            all_ticks, steal = read_ticks()
            sink.write(json.dumps({"t": round(time.time(), 4), "ns": components,
                                   "cpu_ticks": all_ticks, "steal_ticks": steal}) + "\n")
            sink.flush()
            time.sleep(every_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, appended")
    parser.add_argument("--every-s", type=float, default=EVERY_S,
                        help=f"seconds between rounds (default {EVERY_S})")
    args = parser.parse_args(argv)
    if args.every_s <= 0:
        parser.error(f"--every-s is {args.every_s}; it must be > 0")
    import torch  # noqa: F401  (the benchmark's torch component runs only where torch is imported)

    watch(args.out, args.every_s)


if __name__ == "__main__":
    main()
