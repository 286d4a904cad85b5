"""The package layering rules of the README's architecture section hold (import-linter reads
them from ``pyproject.toml``): the network backends import no PyTorch, the live-rank side no
ns-3 and no engine."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    lint = shutil.which("lint-imports")
    if lint is None:
        pytest.fail("lint-imports is missing: pip install -e '.[dev]' installs import-linter")
    result = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
