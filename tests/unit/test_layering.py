"""The package layering rules of the README's "Layout" section hold (import-linter reads them
from ``pyproject.toml``): packages import one way, each only the layers below it (cli, study,
record, report, engine, scenario, intercept, collectives, network, compute, cluster,
calibration; then units, errors, cpu_affinity, wire); the calibration values import nothing
heavy; the network backends import no PyTorch; the live-rank side no ns-3, no engine and no
network; the rank<->engine wire no PyTorch, no ns-3 and neither side."""

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = [contract["name"] for contract in tomllib.loads(
    (ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]]


def _lint_imports(*args: str) -> tuple[int, str]:
    lint = shutil.which("lint-imports")
    if lint is None:
        pytest.fail("lint-imports is missing: pip install -e '.[dev]' installs import-linter")
    # This checkout's packages, not a copy installed elsewhere.
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    result = subprocess.run([lint, "--no-cache", *args], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})
    return result.returncode, result.stdout + result.stderr


def test_import_contracts_are_kept() -> None:
    code, output = _lint_imports()
    assert code == 0, output
    for name in CONTRACTS:
        assert f"{name} KEPT" in output, output
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in output, output


def test_a_broken_contract_fails(tmp_path: Path) -> None:
    """The check sees this checkout's imports: the CLI imports the cluster model, so a layering
    that puts the cluster above the CLI is broken."""
    config = tmp_path / "reversed.toml"
    config.write_text('[tool.importlinter]\nroot_packages = ["phantora", "intercept"]\n\n'
                      '[[tool.importlinter.contracts]]\nname = "reversed"\ntype = "layers"\n'
                      'layers = ["phantora.cluster", "phantora.cli"]\n')
    code, output = _lint_imports("--config", str(config))
    assert code != 0 and "reversed BROKEN" in output, output
