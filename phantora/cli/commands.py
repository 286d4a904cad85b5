"""The subcommands: ``replay``, ``export-chakra`` and ``diff`` work on a recorded run,
``calibrate`` on real profiler traces alone, ``host-profile`` on this machine."""

import argparse
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from hwmodel.errors import PhantoraError


SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "replay": ("RUN_DIR SCENARIO.yaml [--out DIR]",
               "re-simulate a recorded run (RUN_DIR/graph) on the scenario's cluster, network "
               "and NCCL settings, without running the script"),
    "export-chakra": ("RUN_DIR [--out DIR] [--prefix PREFIX]",
                      "write a recorded run as Chakra execution traces (one .et per rank and "
                      "comm_group.json) for ASTRA-sim"),
    "diff": ("REAL_TRACE... RUN_DIR [--out DIR] [--against same|steady]",
             "compare real per-rank PyTorch profiler traces with a live run of the same script, "
             "step by step (kernel families, collectives, GPU idle, exposed communication); "
             "writes diff.json"),
    "calibrate": ("PROFILE... [--gpu NAME --out FILE] [--host-out FILE]",
                  "build a kernel table from real PyTorch profiler traces of any scripts on one "
                  "GPU, with a roofline fitted to it, for a scenario's cluster.calibration; "
                  "and/or a host profile fitted from their CPU side, for cluster.host"),
    "host-profile": ("--out FILE [--name NAME] [--reference HOST] [--rounds N]",
                     "measure this machine's host cost per mechanism (op dispatch, autograd, "
                     "DTensor, collective calls, synchronisation, Python) beside a host-speed "
                     "probe, for a scenario's cluster.host"),
}
"""Each subcommand's arguments and one-line summary, for its own ``--help`` and the top-level
one."""


def _parser(name: str, default_out: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"phantora-ns3 {name}",
                                     description=SUBCOMMANDS[name][1])
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a live run's output folder")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help=f"output folder (default: {default_out})")
    return parser


def _run_own(name: str, add_arguments: Callable[[argparse.ArgumentParser], None],
             run: Callable[[argparse.Namespace, Console], int], argv: list[str],
             console: Console,
             check: Callable[[argparse.ArgumentParser, argparse.Namespace], None] | None = None,
             ) -> int:
    """A subcommand with arguments of its own: parse (``check`` may refuse the arguments as a
    usage error, exit 2), run, report its errors (exit 1)."""
    from phantora.cli import report_error

    parser = argparse.ArgumentParser(prog=f"phantora-ns3 {name}",
                                     usage=f"%(prog)s {SUBCOMMANDS[name][0]}",
                                     description=SUBCOMMANDS[name][1])
    add_arguments(parser)
    args = parser.parse_args(argv)
    if check is not None:
        check(parser, args)
    try:
        return run(args, console)
    except PhantoraError as error:
        return report_error(error, console)


def run_subcommand(name: str, argv: list[str], console: Console) -> int:
    from phantora.cli import report_error, simulate
    from phantora.scenario import load_scenario

    if name == "replay":
        parser = _parser(name, "out/<scenario name>-replay")
        parser.add_argument("scenario", type=Path, metavar="SCENARIO.yaml",
                            help="scenario YAML file (same rank count)")
        args = parser.parse_args(argv)
        try:
            scenario = load_scenario(args.scenario)
        except PhantoraError as error:
            return report_error(error, console)
        out_dir = args.out or Path("out") / f"{scenario.name}-replay"
        return simulate(scenario, out_dir, console, replay_of=args.run_dir)
    if name == "export-chakra":
        from phantora.run.chakra import export_run
        parser = _parser(name, "RUN_DIR/chakra")
        parser.add_argument("--prefix", default="trace", help="file names <prefix>.<rank>.et")
        args = parser.parse_args(argv)
        try:
            written = export_run(args.run_dir, args.out or args.run_dir / "chakra", args.prefix)
        except PhantoraError as error:
            return report_error(error, console)
        console.print(f"wrote {len(written) - 1} Chakra traces and {written[-1]}",
                      highlight=False)
        return 0
    if name == "diff":
        from phantora.cli.diff import add_arguments, run_diff

        def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
            if len(args.paths) < 2:
                parser.error("give one or more REAL_TRACE files, then RUN_DIR")

        return _run_own(name, add_arguments, run_diff, argv, console, check)
    if name == "calibrate":
        from phantora.cli.calibrate import add_arguments as calibrate_arguments
        from phantora.cli.calibrate import check_arguments, run_calibrate
        return _run_own(name, calibrate_arguments, run_calibrate, argv, console,
                        check_arguments)
    if name == "host-profile":
        from phantora.cli.host_profile import add_arguments as profile_arguments
        from phantora.cli.host_profile import run_host_profile
        return _run_own(name, profile_arguments, run_host_profile, argv, console)
    raise ValueError(f"unknown subcommand {name!r}")
