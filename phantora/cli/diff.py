"""``phantora-ns3 diff REAL_TRACE... RUN_DIR [--out DIR] [--against same|steady]``: real
per-rank Kineto traces against a simulated run of the same script (``docs/diff.md``)."""

import argparse
from pathlib import Path

from rich.console import Console

from phantora.diff.compare import compare, write_diff
from phantora.diff.simulated import read_run
from phantora.diff.table import diff_notes, diff_tables
from phantora.profiles.kineto import read_trace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", type=Path, nargs="+", metavar="REAL_TRACE... RUN_DIR",
                        help="one Kineto trace per rank (.json or .json.gz: "
                             "torch.profiler.profile(activities=[CPU, CUDA], record_shapes=True) "
                             "around the training loop, then export_chrome_trace; stepped with "
                             "prof.step() or not), then a live run's output folder")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="folder for diff.json (default: RUN_DIR)")
    parser.add_argument("--against", choices=("same", "steady"), default="same",
                        help="compare each profiled step with the same simulated step (default; "
                             "the steady mean where the run has no such step) or with the mean "
                             "of the simulated steady steps")


def run_diff(args: argparse.Namespace, console: Console) -> int:
    """Compare, print the tables, write ``diff.json``; raises ProfileError on a mismatch."""
    *trace_paths, run_dir = args.paths
    run = read_run(run_dir)
    traces = [read_trace(path) for path in trace_paths]
    diff = compare(traces, run, args.against)
    for table in diff_tables(diff, title=run_dir.name):
        console.print(table)
    for line in diff_notes(diff):
        console.print(line, highlight=False)
    path = write_diff(diff.document(), args.out or run_dir)
    console.print(f"wrote {path}", highlight=False)
    return 0
