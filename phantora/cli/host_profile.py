"""``phantora-ns3 host-profile --out FILE``: measure this machine's host as a host profile
(``docs/models/host.md``), for a scenario's ``cluster.host``.

The microbenchmarks run in a fresh interpreter (``intercept.host_time.mechanisms``: the rank
side's code, started by module path as the launcher starts ranks), with the host-speed probe
beside them; without a CUDA GPU only the Python mechanisms are measured, and the file says that
the rest comes from its reference profile.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from hwmodel.measured.host_profile import (MEASURED_KEYS, HostProfile, bundled,
                                               bundled_names)
from hwmodel.measured.host_references import references
from hwmodel.errors import PhantoraError

MECHANISMS_MODULE = "intercept.host_time.mechanisms"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, metavar="FILE",
                        help="the host profile to write (JSON), for cluster.host")
    parser.add_argument("--name", default=None,
                        help="the profile's name (default: the file's stem)")
    parser.add_argument("--reference", default=None, choices=bundled_names(),
                        help="the bundled profile that costs not measured here come from "
                             "(default: the GPU's reference host, else "
                             f"{references().fallback})")
    parser.add_argument("--rounds", type=int, default=7,
                        help="timed rounds per microbenchmark (default 7)")


def default_reference(gpu_name: str | None) -> str:
    """The bundled profile of the GPU the measurement ran beside (its marketing name, e.g.
    ``NVIDIA H200``), else the fallback."""
    refs = references()
    for host in refs.hosts.values():
        if gpu_name and any(gpu.upper() in gpu_name.upper() for gpu in host.gpus):
            return host.name
    return refs.fallback


def measure(rounds: int) -> dict:
    """The microbenchmarks' record (``intercept.host_time.mechanisms``), run here."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "mechanisms.json"
        done = subprocess.run([sys.executable, "-m", MECHANISMS_MODULE, "--out", str(out),
                               "--rounds", str(rounds)], check=False)
        if done.returncode != 0 or not out.exists():
            raise PhantoraError(f"host-profile: the microbenchmarks ({MECHANISMS_MODULE}) "
                                f"failed with exit code {done.returncode}; their output is "
                                "above")
        return json.loads(out.read_text())


NOT_CHARGED = {"tensor_subclass_ns": "the microbenchmark times a bare DTensor op without grad "
                                     "(~10 us on an H100 host); in a step DTensor's dispatch "
                                     "with grads, hooks and redistribution costs several times "
                                     "that, which the reference's fitted constant holds"}
"""Mechanisms the microbenchmarks record that a profile does not charge (yet), and why."""


def profile_of(record: dict, name: str, reference: str | None) -> HostProfile:
    """The profile a microbenchmark record makes: its measured costs but those of
    :data:`NOT_CHARGED` and differences that came out at or below zero (noise larger than the
    cost), each left out with the reason in the provenance."""
    reference = reference or default_reference(record.get("gpu"))
    bundled(reference)  # a known reference, or a clear error
    measured, left_out = {}, {}
    for key, value in record["measured"].items():
        if key in NOT_CHARGED:
            left_out[key] = f"{value} ns measured, not charged: {NOT_CHARGED[key]}"
        elif key in MEASURED_KEYS and isinstance(value, (int, float)) and value <= 0:
            left_out[key] = f"{value} ns measured: a difference below its noise; the reference's"
        elif key in MEASURED_KEYS:
            measured[key] = value
    provenance = {k: record[k] for k in ("cuda", "gpu", "torch", "python", "cpu", "cpus")
                  if k in record}
    provenance["left_out"] = left_out
    provenance["cases"] = record.get("cases", [])
    return HostProfile(name, reference, dict(record["probe_ns"]), measured,
                       provenance=provenance)


def run_host_profile(args: argparse.Namespace, console: Console) -> int:
    """Measure, write the profile, say what it measured and what it took from its reference."""
    record = measure(args.rounds)
    profile = profile_of(record, args.name or args.out.stem, args.reference)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(profile.to_json(), indent=1) + "\n")
    for mechanism, source in profile.sources().items():
        console.print(f"  {mechanism}: {source}", highlight=False)
    console.print(f"wrote {args.out}; use it with cluster: {{host: <its path relative to the "
                  f"scenario>}}", highlight=False)
    return 0
