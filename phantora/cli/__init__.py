"""Simulate a GPU cluster running a PyTorch training script or NCCL collectives, from a scenario.

``phantora-ns3 SCENARIO.yaml [--out DIR]`` and its subcommands; the first line above opens
``--help`` (:func:`main`). The command line parses arguments, calls the run API
(:mod:`phantora.run`) and prints: a table of the run, or one clear message for an error
phantora raises on purpose (exit 2 for a bad scenario, 1 otherwise), never a traceback.

A scenario with a ``sweep:`` block runs every point (:mod:`phantora.study`, each point in
its own process: :mod:`.point`); subcommands ``replay`` and ``export-chakra`` work on a
recorded run, others on profiler traces or this machine (:mod:`.commands`).
"""

import argparse
import sys
import textwrap
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from hwmodel.errors import PhantoraError, ScenarioError
from phantora.cli.commands import SUBCOMMANDS, run_subcommand
from phantora.report.console import (attribution_table, collectives_table, coverage_line,
                                     fabric_line, host_line, hot_ports_table, ranks_table)
from phantora.report.faults import fault_lines
from phantora.report.out_dir import clear_run
from phantora.run import run_scenario
from phantora.scenario import Scenario, load_scenario


def main(argv: list[str] | None = None) -> int:
    """``phantora-ns3 SCENARIO.yaml ...`` or ``phantora-ns3 SUBCOMMAND ...``: the exit code.

    A first word that is neither a subcommand, an option nor a scenario file is an argparse
    error (exit 2) naming the subcommands, so ``phantora-ns3 sweep --help`` does not print the
    top-level help as if ``sweep`` were a scenario."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SUBCOMMANDS:
        return run_subcommand(argv[0], argv[1:], _console())
    parser = _parser()
    if argv and not argv[0].startswith("-"):
        _check_scenario_word(parser, argv[0])
    args = parser.parse_args(argv)
    _check_scenario_word(parser, str(args.scenario))
    console = _console()
    try:
        from phantora.study.sweep import load_sweep
        sweep = load_sweep(args.scenario)
        if sweep is not None:
            from phantora.study.run import run_sweep
            return run_sweep(sweep, args.out, console, "phantora.cli.point",
                             address=args.address)
        scenario = load_scenario(args.scenario)
    except PhantoraError as error:
        return report_error(error, console)
    return simulate(scenario, args.out or Path("out") / scenario.name, console)


def _parser() -> argparse.ArgumentParser:
    usage = "\n".join(
        ["phantora-ns3 SCENARIO.yaml [--out DIR] [--address ADDRESS]"]
        + [f"       phantora-ns3 {name} {arguments}"
           for name, (arguments, _) in SUBCOMMANDS.items()])
    rows = {"SCENARIO.yaml": "simulate the scenario (its collectives, or its live training "
                             "script); a scenario with a sweep: block runs every point of the "
                             "sweep (on Ray when installed: locally, or on the cluster at "
                             "--address)",
            **{name: summary for name, (_, summary) in SUBCOMMANDS.items()}}
    commands = "\n".join(
        ["commands:"]
        + [textwrap.fill(summary, width=88, initial_indent=f"  {name:<15}",
                         subsequent_indent=" " * 17) for name, summary in rows.items()]
        + ["", "phantora-ns3 SUBCOMMAND --help prints that subcommand's own help."])
    parser = argparse.ArgumentParser(
        prog="phantora-ns3", usage=usage, description=__doc__.splitlines()[0], epilog=commands,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", type=Path, metavar="SCENARIO.yaml", help="scenario YAML file")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output folder (default: out/<scenario name>, for a sweep "
                             "out/<scenario name>-sweep)")
    parser.add_argument("--address", default=None,
                        help="sweeps: an existing Ray cluster's address (default: a local Ray)")
    return parser


def _check_scenario_word(parser: argparse.ArgumentParser, word: str) -> None:
    """Exit with an argparse error where ``word`` is neither a YAML file name nor a file."""
    if Path(word).suffix.lower() in (".yaml", ".yml") or Path(word).is_file():
        return
    hint = ("; to run a sweep, give a scenario with a sweep: block (phantora-ns3 SCENARIO.yaml)"
            if word == "sweep" else "")
    parser.error(f"{word!r} is neither a subcommand ({', '.join(SUBCOMMANDS)}) nor a scenario "
                 f"YAML file{hint}")


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=120)  # whole rows in logs


def report_error(error: PhantoraError, console: Console) -> int:
    """One line for a deliberate error; exit 2 for bad inputs, 1 otherwise."""
    console.print(f"[red]error:[/red] {escape(str(error))}", highlight=False)
    return 2 if isinstance(error, ScenarioError) else 1


def simulate(scenario: Scenario, out_dir: Path, console: Console,
             replay_of: Path | None = None) -> int:
    """Run (or replay) ``scenario`` into ``out_dir`` (an earlier run's outputs there are
    removed first), print its tables; the process exit code."""
    try:
        clear_run(out_dir, reads=replay_of)
        summary = run_scenario(scenario, out_dir, console, replay_of)
    except PhantoraError as error:
        return report_error(error, console)
    except KeyboardInterrupt:
        console.print("interrupted: every rank stopped")
        return 130
    if summary.ranks:
        console.print(ranks_table(summary.ranks, title=f"{scenario.name}: ranks"))
        if summary.compute_coverage:  # none for an imported trace
            console.print(coverage_line(summary.compute_coverage), highlight=False)
        if summary.host:
            console.print(host_line(summary.host), highlight=False)
    if summary.collectives:
        console.print(collectives_table(summary.collectives, title=scenario.name))
    steps = attribution_table(summary.attribution, title=scenario.name)
    if steps is not None:
        console.print(steps)
    for fabric in (fabric_line(summary.network), hot_ports_table(summary.network)):
        if fabric is not None:
            console.print(fabric, highlight=False)
    for line in fault_lines(summary.faults):
        console.print(line, highlight=False)
    if summary.replay and summary.replay["difference_pct"] is not None:
        console.print(f"replay: {summary.simulated_ns / 1e6:.3f} ms simulated, live "
                      f"{summary.replay['live_simulated_ns'] / 1e6:.3f} ms "
                      f"({summary.replay['difference_pct']:+.2f}%)", highlight=False)
    console.print(f"simulated in {summary.wall_seconds['total']:.2f} s wall; "
                  f"wrote {out_dir / 'summary.json'}")
    return 0
