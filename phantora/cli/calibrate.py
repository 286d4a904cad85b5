"""``phantora-ns3 calibrate PROFILE... [--gpu NAME --out FILE] [--host-out FILE]``: a kernel
calibration (``cluster.calibration``) and a host profile (``cluster.host``) from real PyTorch
profiler traces of one GPU (``docs/calibrate.md``)."""

import argparse
import json
from collections import Counter
from pathlib import Path

from rich.console import Console

from hwmodel.measured.host_profile import HostProfile, bundled_names
from hwmodel.catalogue import CATALOGUE, lookup_gpu
from hwmodel.compute.calibrated import Calibration
from phantora.cli.host_profile import default_reference
from phantora.profiles.calibrate import calibrate
from phantora.profiles.host_calibrate import fit_host_profile
from phantora.profiles.kineto import RankTrace, read_trace

SHOWN_LEFT_OUT = 3
"""Ops per trace the console names as left to the roofline."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profiles", type=Path, nargs="+", metavar="PROFILE",
                        help="Kineto traces (.json or .json.gz) of any scripts on one GPU: "
                             "torch.profiler.profile(activities=[CPU, CUDA], record_shapes=True) "
                             "around the script's steps, then export_chrome_trace")
    parser.add_argument("--gpu", metavar="NAME",
                        help="the catalogue GPU the traces ran on (needed with --out): "
                             f"{', '.join(sorted(CATALOGUE))}")
    parser.add_argument("--out", type=Path, metavar="FILE",
                        help="the kernel calibration to write (JSON), for cluster.calibration")
    parser.add_argument("--host-out", type=Path, metavar="FILE",
                        help="the host profile to write (JSON), fitted from the traces' CPU "
                             "side, for cluster.host")
    parser.add_argument("--host-name", metavar="NAME",
                        help="the host profile's name (default: the --host-out file's stem)")
    parser.add_argument("--host-reference", choices=bundled_names(), metavar="HOST",
                        help="the bundled profile that host costs the traces do not fit come "
                             "from (default: the traces' GPU's reference host): "
                             f"{', '.join(bundled_names())}")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors (exit 2): nothing to write, or a kernel table without its GPU."""
    if args.out is None and args.host_out is None:
        parser.error("give --out FILE (a kernel table), --host-out FILE (a host profile) or both")
    if args.out is not None and args.gpu is None:
        parser.error(f"--out needs --gpu NAME, the catalogue GPU the traces ran on: "
                     f"{', '.join(sorted(CATALOGUE))}")


def run_calibrate(args: argparse.Namespace, console: Console) -> int:
    """Build and write the calibration and/or the host profile, print what they hold; raises
    CatalogueError for an unknown GPU and ProfileError for traces that do not fit."""
    gpu = lookup_gpu(args.gpu) if args.out is not None else None
    traces = [read_trace(path) for path in args.profiles]
    if gpu is not None:
        calibration = calibrate(traces, gpu)
        calibration.write(args.out)
        for line in summary_lines(calibration):
            console.print(line, highlight=False)
        console.print(f"wrote {args.out}; use it with cluster: {{gpu: {gpu.name}, calibration: "
                      f"<its path relative to the scenario>}}", highlight=False)
    if args.host_out is not None:
        profile = fit_host_profile(traces, args.host_name or args.host_out.stem,
                                   args.host_reference or _reference(traces))
        args.host_out.parent.mkdir(parents=True, exist_ok=True)
        args.host_out.write_text(json.dumps(profile.to_json(), indent=1) + "\n")
        for line in host_lines(profile):
            console.print(line, highlight=False)
        console.print(f"wrote {args.host_out}; use it with cluster: {{host: <its path relative "
                      "to the scenario>}", highlight=False)
    return 0


def _reference(traces: list[RankTrace]) -> str:
    """The reference host of the traces' GPU (the first that names one)."""
    return default_reference(next((t.device_name for t in traces if t.device_name), None))


def host_lines(profile: HostProfile) -> list[str]:
    """What the host profile fitted from the traces (calls, median less the profiler's), and
    where every other cost comes from."""
    provenance = profile.provenance
    fitted = ", ".join(f"{key.split('.', 1)[1]} {fit['ns'] / 1e3:.1f} us ({fit['calls']})"
                       for key, fit in provenance["fitted"].items())
    per_event_us = provenance["profiler_ns_per_event"] / 1e3
    lines = [f"host profile {profile.name} (reference {profile.reference}), fitted from the "
             f"traces: {fitted or 'nothing'}; each less {per_event_us:g} us per runtime call "
             "inside it (the profiler's estimate)"]
    launch, gaps = provenance["launch"], provenance["python_gaps"]
    if launch["calls"]:
        lines.append(f"kernel launches: {launch['calls']} calls, median "
                     f"{launch['median_recorded_ns'] / 1e3:.1f} us as recorded (in the families' "
                     "costs)")
    if gaps["gaps"]:
        lines.append(f"gaps between top-level ops: {gaps['gaps']}, median "
                     f"{gaps['median_ns'] / 1e3:.1f} us (Python, bindings and the profiler; "
                     "reported, not fitted)")
    lines += [f"  {mechanism}: {source}" for mechanism, source in profile.sources().items()
              if "." not in mechanism]
    return lines


def summary_lines(calibration: Calibration) -> list[str]:
    """Rows per section; per trace the share of its GPU time the rows hold and what is left to
    the fitted roofline; the roofline's kinds."""
    sections = Counter(row["section"] for row in calibration.kernels)
    lines = [f"{len(calibration.kernels)} kernel rows for {calibration.gpu} ("
             + ", ".join(f"{count} {section}" for section, count in sorted(sections.items()))
             + ")"]
    for trace in calibration.traces:
        left = ", ".join(f"{name} {ns / 1e6:.2f} ms" for name, ns in
                         list(trace["left_to_roofline_ns"].items())[:SHOWN_LEFT_OUT])
        lines.append(f"{trace['path']}: {trace['calls']} op calls, {trace['used_share']:.0%} "
                     "of its op-launched GPU time in rows"
                     + (f"; left to the roofline: {left}" if left else ""))
    roofline = calibration.roofline
    lines.append(f"roofline fitted to the rows: matmul {', '.join(sorted(roofline.matmul)) or '-'}"
                 f", attention {', '.join(sorted(roofline.attention)) or '-'}, memory-bound ops; "
                 f"kernel floor {roofline.floor_ns / 1e3:.1f} us")
    return lines
