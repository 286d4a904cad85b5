"""What the scripts share: a command line built from the script's docstring, the flags that save
a run's table and print it again, the machine and commit a run ran on, the environment that
keeps NVLink multicast off on the lent GPU hosts, and running a training script in this process.

The scripts run as files (``python3 scripts/<group>/<name>.py``, from anywhere); each one that
imports from this repository first puts the repository root on ``sys.path``::

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

and then imports ``scripts.common``, ``scripts.<group>.<name>`` and the packages. Tests import
the same modules (``tests`` is a package, so pytest puts the root on the path).

Standard library only: the measuring scripts run it with a GPU machine's own Python.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
"""The repository root."""
SHARED_DATA = REPO / "scripts" / "data"
"""Data more than one group (or the simulator's scenarios) reads: measured steps, collectives and
traffic. A group's own data and results live in its folder (``scripts/measure/data``,
``scripts/validate/results``, ``scripts/bench/results``)."""

SAFETY_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""NVLink multicast (NVLS) can take a shared host's GPUs out of service (device KINDS.md): every
process a measuring script starts sets these, whatever the caller's environment says."""


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser for a script whose docstring is ``doc``: its first paragraph is the description,
    the rest (the usages) the epilog that ``--help`` prints as written."""
    summary, _, rest = (doc or "").strip().partition("\n\n")
    return argparse.ArgumentParser(description=summary, epilog=rest or None,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


# --- a run's table, saved and printed again -----------------------------------------------------


def add_result_flags(parser: argparse.ArgumentParser) -> None:
    """``--export-result FILE`` (also write the run's table) and ``--import-result FILE`` (print
    a table written before, run nothing)."""
    parser.add_argument("--export-result", type=Path, metavar="JSON",
                        help="also write the run's table (header and rows) to this JSON file")
    parser.add_argument("--import-result", type=Path, metavar="JSON",
                        help="print the table an --export-result wrote; run nothing")


def imported_result(args: argparse.Namespace) -> dict[str, Any] | None:
    """The table ``--import-result`` names (``header``, ``rows`` and whatever else was saved
    with them), or None without the flag."""
    if args.import_result is None:
        return None
    return json.loads(args.import_result.read_text())


def export_result(args: argparse.Namespace, header: str, rows: list[dict[str, Any]],
                  **more: Any) -> None:
    """Write the run's table where ``--export-result`` says (nothing without the flag)."""
    if args.export_result is None:
        return
    args.export_result.parent.mkdir(parents=True, exist_ok=True)
    args.export_result.write_text(json.dumps({"header": header, "rows": rows, **more}, indent=2)
                                  + "\n")


# --- where a run ran ------------------------------------------------------------------------------


def commit() -> str:
    """The checkout's commit (``-dirty`` with uncommitted changes); a device machine's copy of
    the tree may carry no history."""
    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO,
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (git not runnable)"
    return done.stdout.strip() if done.returncode == 0 else "unknown (no git history here)"


def machine_header(load: bool = False) -> str:
    """The machine, Python and commit a run ran on, for its table's header; ``load`` adds the
    load average (other tenants of a shared machine slow a bench)."""
    average = f", load average {os.getloadavg()[0]:.2f} at start" if load else ""
    return (f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores{average}, "
            f"Python {platform.python_version()}; commit {commit()}")


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it (``platform`` has no portable one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_as_main(script: str | Path, script_args: list[str]) -> None:
    """Run a training script in this process as ``python script args...`` would (its folder
    first on ``sys.path``, for its own modules), so that a profiler or recorder around the
    call sees all it does."""
    sys.argv = [str(script), *script_args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(str(script), run_name="__main__")


def load_example(name: str) -> Any:
    """An example training script of ``scenarios/examples`` imported as a module (its
    ``__main__`` block not run), for the tables it defines (``zoo_train.ZOO``)."""
    import importlib.util

    path = REPO / "scenarios" / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
