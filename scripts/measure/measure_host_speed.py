"""Measure a host's speed on the host-CPU benchmark (``intercept.host_time.host_speed``).

Run on a GPU host to get its reference numbers, or here to see this machine's speed against
them (quiet, or with ``--load N`` busy-looping processes beside it). Needs only torch and the
standard library, so it runs with the device machines' own Python.

Usages (from the repository root):

 1. A host's numbers, raw text on stdout and a JSON record:
      python3 scripts/measure/measure_host_speed.py --repeats 10 --json /tmp/host.json
 2. This machine with two CPU-bound processes running beside it, against the shipped references:
      python3 scripts/measure/measure_host_speed.py --load 2
 3. Write (or replace) a reference host in the shipped data file from a JSON record:
      python3 scripts/measure/measure_host_speed.py --import-record scripts/measure/data/host/h100-x1.json \\
          --reference h100-host --gpus h100 --description "..." \\
          --write hwmodel/measured/data/host_speed.json

A *measurement* is :func:`intercept.host_time.host_benchmark.measure`: each component's fastest of
``--rounds`` rounds (thread CPU time). The script takes ``--repeats`` measurements one after the
other and reports each; a host's reference number for a component is the median of its
measurements.
"""

import json
import os
import platform
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

# After the path: intercept is this repository's. torch imported here so that the benchmark's
# torch component runs (it is skipped where torch is not imported).
import torch  # noqa: E402

from hwmodel.measured import host_references  # noqa: E402
from intercept.host_time import host_benchmark  # noqa: E402
from measurements.cpu_load import busy_cpus  # noqa: E402
from scripts import common  # noqa: E402

_NS_PER_MS = 1e6


def system() -> dict[str, Any]:
    """What the numbers were taken on."""
    return {"cpu": common.cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "platform": platform.platform(),
            "benchmark_version": host_references.BENCHMARK_VERSION}


def summarize(measurements: list[dict[str, int]]) -> dict[str, int]:
    """Each component's median over ``measurements``."""
    return {name: int(statistics.median(m[name] for m in measurements))
            for name in measurements[0]}


def _ms(ns: float) -> str:
    return f"{ns / _NS_PER_MS:7.3f}"


def report(measurements: list[dict[str, int]], summary: Mapping[str, int]) -> None:
    """Per-measurement and summary table, in ms, plus the ratio to each shipped reference."""
    names = list(summary)
    print("measurement " + " ".join(f"{n:>10}" for n in names) + "      total")
    for i, m in enumerate(measurements):
        print(f"{i:>11} " + " ".join(f"{_ms(m[n]):>10}" for n in names)
              + f" {_ms(sum(m.values())):>10}")
    totals = [sum(m.values()) for m in measurements]
    print(f"{'median':>11} " + " ".join(f"{_ms(summary[n]):>10}" for n in names)
          + f" {_ms(sum(summary.values())):>10}")
    print(f"total over measurements: min {_ms(min(totals))} ms, max {_ms(max(totals))} ms, "
          f"spread {(max(totals) - min(totals)) / min(totals):.1%}")
    try:
        references = host_references.references()
    except (OSError, ValueError, KeyError) as error:
        print(f"(no shipped references to compare with: {error})")
        return
    for reference in references.hosts.values():
        ratio = reference.ratio(summary)
        print(f"speed against {reference.name}: reference/local = {ratio.factor:.3f}")


def import_record(record_path: Path, name: str, gpus: list[str], description: str,
                  data_path: Path) -> None:
    """Put the record's median components into ``data_path`` as reference host ``name``."""
    record = json.loads(record_path.read_text())
    if record["system"]["benchmark_version"] != host_references.BENCHMARK_VERSION:
        raise SystemExit(f"{record_path} is of benchmark version "
                         f"{record['system']['benchmark_version']}, not "
                         f"{host_references.BENCHMARK_VERSION}")
    document: dict[str, Any] = (json.loads(data_path.read_text()) if data_path.exists() else
                                {"benchmark_version": host_references.BENCHMARK_VERSION,
                                 "fallback": name, "hosts": {}})
    system_info = record["system"]
    document["hosts"][name] = {
        "gpus": gpus,
        "description": description,
        "components_ns": record["median_ns"],
        "measured_on": {k: system_info[k] for k in ("cpu", "cpus", "python", "torch")},
        "source": str(record_path),
    }
    host_references.parse_references(document)  # refuse to write what the product could not read
    data_path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote reference {name!r} into {data_path}")


def main(argv: list[str] | None = None) -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--rounds", type=int, default=host_benchmark.ROUNDS,
                        help="rounds per measurement (fastest kept per component)")
    parser.add_argument("--repeats", type=int, default=10, help="measurements to take")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="busy-looping processes to run beside the measurements")
    parser.add_argument("--json", type=Path, help="write the record (system, all numbers) here")
    parser.add_argument("--import-record", type=Path, metavar="RECORD",
                        help="instead of measuring: put RECORD's medians into --write")
    parser.add_argument("--reference", help="reference host name for --import-record")
    parser.add_argument("--gpus", default="", help="comma-separated catalogue GPU keys whose "
                                                   "scenarios default to this reference")
    parser.add_argument("--description", default="", help="what the reference host is")
    parser.add_argument("--write", type=Path, help="the data file --import-record updates")
    args = parser.parse_args(argv)
    if args.import_record is not None:
        if not (args.reference and args.write):
            parser.error("--import-record needs --reference and --write")
        import_record(args.import_record, args.reference,
                      [g for g in args.gpus.split(",") if g], args.description, args.write)
        return
    if args.rounds < 1 or args.repeats < 1 or args.load < 0:
        parser.error("--rounds and --repeats are >= 1, --load >= 0")
    info = system()
    print(" | ".join(f"{k}: {v}" for k, v in info.items()) + f" | load: {args.load}")
    with busy_cpus(args.load):
        measurements = [host_benchmark.measure(args.rounds) for _ in range(args.repeats)]
    summary = summarize(measurements)
    report(measurements, summary)
    if args.json is not None:
        args.json.write_text(json.dumps({"system": info, "load": args.load, "rounds": args.rounds,
                                         "measurements_ns": measurements,
                                         "median_ns": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
