"""Host paths simulated against real runs on one GPU: collectives timed by the host clock on a
one-rank communicator, a DTensor tensor-parallel MLP on a one-rank mesh, and the
synchronisation and event calls.

Real runs: ``scripts/measure/measure_host_paths.sh`` on a GPU machine, one folder per host
instance under ``scripts/measure/data/host_paths/`` (two runs of each timing script, the host
watch beside them, and two records of ``intercept.host_time.mechanisms``, the microbenchmarks
``phantora-ns3 host-profile`` runs). Each timing scenario of ``scenarios/timing/`` is simulated
with the bundled profile of its GPU (``h100-host``) and with the instance's own host profile
(``cluster.host``: a profile made from its first mechanisms record, as ``host-profile`` makes
it; an instance without one, from the c10d rows of its ``measure_host_costs.py`` record alone,
every other cost the reference's: a check of the collective call's mechanism on that host), and
each line the script prints is set beside the real runs' median.

  python3 scripts/validate/validate_host_paths.py            # table to stdout and results/
  python3 scripts/validate/validate_host_paths.py --no-save
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from hwmodel.measured.host_profile import HostProfile  # noqa: E402
from hwmodel.measured.host_references import references  # noqa: E402
from phantora.cli.host_profile import profile_of  # noqa: E402
from scripts.validate.variants import simulate_variant  # noqa: E402

REFERENCE = "h100-host"
C10D_CASES = {"all_reduce": "all_reduce async 16 MiB", "all_gather": "all_gather_into_tensor async",
              "reduce_scatter": "reduce_scatter_tensor async", "broadcast": "broadcast async",
              "all_to_all": "all_to_all_single async"}
"""``measure_host_costs.py``'s c10d cases per ``collectives_ns`` row (its ``COLLECTIVE_CASES``
and ``OPTIONAL_COLLECTIVE_CASES``; that script imports torch)."""
BLOCKING = ("all_reduce async 16 MiB", "all_reduce sync 16 MiB")
"""Its ``BLOCKING_CASES``: ``collective_async_extra_ns`` is the first less the second."""

DATA = REPO / "scripts" / "measure" / "data" / "host_paths"
RESULTS = REPO / "scripts" / "validate" / "results" / "validate_host_paths.txt"
SCENARIOS = {"collectives": "h100x1-time-collectives-small.yaml",
             "dtensor": "h100x1-time-dtensor-linear.yaml",
             "sync": "h100x1-time-sync-calls.yaml"}
"""Real log kind -> the timing scenario that runs the same script."""
LINE = re.compile(r"^(?P<case>[\w .]+?(?: \d+ [KM]iB)?|[\w. ]+): (?P<us>[\d.]+) us")


def timings(text: str) -> dict[str, list[float]]:
    """Every ``<case>: <us> us`` line of a log, per case, in order."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if match:
            out.setdefault(match["case"], []).append(float(match["us"]))
    return out


@cache
def simulate(kind: str, host: str | None, out: Path) -> dict[str, float]:
    """The timing scenario of ``kind`` simulated (``cluster.host`` = ``host`` if given)."""
    source = REPO / "scenarios" / "timing" / SCENARIOS[kind]
    run_dir = simulate_variant(source, {} if host is None else {"host": host}, out,
                               "bundled" if host is None else Path(host).stem)
    return {case: values[0] for case, values in
            timings((run_dir / "ranks" / "rank0.log").read_text()).items()}


def error(sim: float, real: float) -> str:
    return f"{(sim - real) / real * 100:+.1f}%"


def c10d_profile(record: dict, name: str) -> HostProfile | None:
    """A profile of the c10d rows of a ``measure_host_costs.py`` record alone (its one-rank
    collective calls, async and blocking), every other cost and the probe the reference's; None
    where the record has no c10d rows."""
    us = {row["case"]: row["us_median"] for row in record["rows"]
          if row.get("family") == "c10d" and row.get("valid_rounds")}
    collectives = {op: round(us[case] * 1000) for op, case in C10D_CASES.items() if case in us}
    if not collectives:
        return None
    measured: dict = {"collectives_ns": collectives}
    if set(BLOCKING) <= set(us) and us[BLOCKING[0]] > us[BLOCKING[1]]:
        measured["collective_async_extra_ns"] = round((us[BLOCKING[0]] - us[BLOCKING[1]]) * 1000)
    return HostProfile(f"{name}-c10d", REFERENCE, dict(references().hosts[REFERENCE].components_ns),
                       measured)


def instance_rows(instance: Path, out: Path) -> list[str]:
    """The table rows of one host instance's runs."""
    records = sorted(instance.glob("*_mechanisms*.json"))
    costs = sorted(instance.glob("*_host_costs.json"))
    profile, profiled_kinds = None, set(SCENARIOS)
    if records:  # the first record, as host-profile would have written it on that host
        profile = profile_of(json.loads(records[0].read_text()), instance.name, None)
    elif costs:  # its collective calls alone: only the collectives script
        profile = c10d_profile(json.loads(costs[0].read_text()), instance.name)
        profiled_kinds = {"collectives"}
    profile_path = None
    if profile is not None:
        profile_path = out / f"{instance.name}-profile.json"
        profile_path.write_text(json.dumps(profile.to_json(), indent=1))
    rows = []
    for kind in SCENARIOS:
        logs = list(instance.glob(f"*_{kind}.log"))
        if not logs:
            continue
        real = timings(logs[0].read_text())
        bundled = simulate(kind, None, out)
        profiled = (simulate(kind, str(profile_path), out)
                    if profile_path and kind in profiled_kinds else {})
        for case, values in real.items():
            if case not in bundled:
                continue
            median = statistics.median(values)
            runs = "/".join(f"{v:.1f}" for v in values)
            own = (f"{profiled[case]:.1f} ({error(profiled[case], median)})" if case in profiled
                   else "-")
            rows.append(f"| {instance.name} | {kind} | {case} | {runs} | {bundled[case]:.1f} "
                        f"({error(bundled[case], median)}) | {own} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    lines = ["| instance | script | line | real runs (us) | simulated, bundled h100-host (us) "
             "| simulated, the instance's own host profile (us) |",
             "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for instance in sorted(p for p in DATA.iterdir() if p.is_dir()):
            lines += instance_rows(instance, Path(tmp))
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if not args.no_save:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
