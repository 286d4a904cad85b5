"""Host paths simulated against real runs on one GPU: collectives timed by the host clock on a
one-rank communicator, a DTensor tensor-parallel MLP on a one-rank mesh, and the
synchronisation and event calls.

Real runs: ``scripts/measure/measure_host_paths.sh`` on a GPU machine, one folder per host
instance under ``scripts/measure/data/host_paths/`` (two runs of each timing script, the host
watch beside them, and two records of ``intercept.host_time.mechanisms``, the microbenchmarks
``phantora-ns3 host-profile`` runs). Each timing scenario of ``scenarios/timing/`` is simulated
with the bundled profile of its GPU (``h100-host``) and with the instance's own host profile
(``cluster.host``: a profile made from its first mechanisms record, as ``host-profile`` makes
it), and each line the script prints is set beside the real runs' median.

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

from phantora.cli.host_profile import profile_of  # noqa: E402
from scripts.validate.variants import simulate_variant  # noqa: E402

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


def instance_rows(instance: Path, out: Path) -> list[str]:
    """The table rows of one host instance's runs."""
    records = sorted(instance.glob("*_mechanisms*.json"))
    profile_path = None
    if records:  # the first record, as host-profile would have written it on that host
        profile_path = out / f"{instance.name}-profile.json"
        profile = profile_of(json.loads(records[0].read_text()), instance.name, None)
        profile_path.write_text(json.dumps(profile.to_json(), indent=1))
    rows = []
    for kind in SCENARIOS:
        logs = list(instance.glob(f"*_{kind}.log"))
        if not logs:
            continue
        real = timings(logs[0].read_text())
        bundled = simulate(kind, None, out)
        profiled = simulate(kind, str(profile_path), out) if profile_path else {}
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
