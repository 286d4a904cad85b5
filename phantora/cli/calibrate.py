"""``phantora-ns3 calibrate PROFILE... --gpu NAME --out FILE``: a kernel calibration from real
PyTorch profiler traces of one GPU (``docs/calibrate.md``), for ``cluster.calibration``."""

import argparse
from collections import Counter
from pathlib import Path

from rich.console import Console

from phantora.cluster.catalogue import CATALOGUE, lookup_gpu
from phantora.compute.calibrated import Calibration
from phantora.profiles.calibrate import calibrate
from phantora.profiles.kineto import read_trace

SHOWN_LEFT_OUT = 3
"""Ops per trace the console names as left to the roofline."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("profiles", type=Path, nargs="+", metavar="PROFILE",
                        help="Kineto traces (.json or .json.gz) of any scripts on one GPU: "
                             "torch.profiler.profile(activities=[CPU, CUDA], record_shapes=True) "
                             "around the script's steps, then export_chrome_trace")
    parser.add_argument("--gpu", required=True, metavar="NAME",
                        help=f"the catalogue GPU the traces ran on: {', '.join(sorted(CATALOGUE))}")
    parser.add_argument("--out", type=Path, required=True, metavar="FILE",
                        help="the calibration file to write (JSON), for cluster.calibration")


def run_calibrate(args: argparse.Namespace, console: Console) -> int:
    """Build and write the calibration, print what it holds; raises CatalogueError for an
    unknown GPU and ProfileError for traces that do not fit."""
    gpu = lookup_gpu(args.gpu)
    calibration = calibrate([read_trace(path) for path in args.profiles], gpu)
    calibration.write(args.out)
    for line in summary_lines(calibration):
        console.print(line, highlight=False)
    console.print(f"wrote {args.out}; use it with cluster: {{gpu: {gpu.name}, calibration: "
                  f"<its path relative to the scenario>}}", highlight=False)
    return 0


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
