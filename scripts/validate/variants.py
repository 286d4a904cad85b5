"""A bundled scenario simulated with some ``cluster`` keys changed: the validation scripts'
way to run one scenario on another host profile or host speed."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml


def simulate_variant(scenario: Path, cluster: dict[str, Any], out: Path, tag: str) -> Path:
    """Simulate ``scenario`` with ``cluster`` merged into its ``cluster`` block (its script made
    absolute), in ``out/<stem>-<tag>``; the run's folder. Raises where the run fails."""
    data = yaml.safe_load(scenario.read_text())
    data["workload"]["script"] = str((scenario.parent / data["workload"]["script"]).resolve())
    data["cluster"].update(cluster)
    path = out / f"{scenario.stem}-{tag}.yaml"
    path.write_text(yaml.safe_dump(data))
    run_dir = out / path.stem
    subprocess.run([sys.executable, "-m", "phantora.cli", str(path), "--out", str(run_dir)],
                   check=True, capture_output=True)
    return run_dir
