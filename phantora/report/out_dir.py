"""An output folder holds one run: what an earlier run left there goes before a new one writes.

Only phantora-ns3's own outputs are removed (``docs/outputs.md``), never other files, so
that a stale ``trace.json``, ``graph/`` or ``chakra/`` never sits beside a new
``summary.json`` (a later replay or export would read the old recording).
"""

import re
import shutil
from pathlib import Path

from hwmodel.errors import ScenarioError

RUN_OUTPUTS = ("summary.json", "trace.json", "graph", "chakra", "ranks")
"""What a run writes into its folder."""
SWEEP_OUTPUTS = ("results.csv", "results.parquet", "plots", "base")
"""What a sweep writes beside its points' folders (``p<N>``)."""
_POINT = re.compile(r"p\d+")


def clear_run(out_dir: Path, reads: Path | None = None) -> None:
    """Empty ``out_dir`` of an earlier run's outputs; ``reads``: a run folder this run reads
    (a replay's recording), which must not be the one it writes."""
    if reads is not None and out_dir.resolve() == reads.resolve():
        raise ScenarioError(f"--out {out_dir} is the run being replayed; write the replay to "
                            "another folder")
    _remove(out_dir, RUN_OUTPUTS)


def clear_sweep(out_dir: Path) -> None:
    """Empty ``out_dir`` of an earlier sweep's results, base recording and points."""
    points = [path.name for path in out_dir.glob("p*") if _POINT.fullmatch(path.name)]
    _remove(out_dir, (*SWEEP_OUTPUTS, *points))


def _remove(out_dir: Path, names: tuple[str, ...]) -> None:
    for name in names:
        path = out_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
