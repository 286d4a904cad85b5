"""The package layering rules of the README's "Layout" section hold (import-linter reads them
from ``pyproject.toml``): packages import one way, each only the layers below it (cli, run,
study, diff, record, report, engine, scenario, launch, collectives, network, profiles, compute,
cluster, calibration; then units, errors, cpu_affinity, wire); the calibration values import nothing heavy; the
network backends import no PyTorch; the coordinator never imports the live-rank side
(``intercept``), which imports no ns-3 and of ``phantora`` only the shared models; ``launch``
imports nothing heavy and no more of ``phantora``; the rank<->engine wire no PyTorch, no ns-3
and neither side. And ``intercept`` keeps one subpackage per model, few modules at its top."""
import ast
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = [contract["name"] for contract in tomllib.loads(
    (ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]]

SHARED_MODELS = ("phantora.errors", "phantora.calibration", "phantora.cluster.catalogue",
                 "phantora.compute")
"""What of ``phantora`` both sides may import: pure models that import neither side."""
RANK_SIDE_ALLOWED = {"intercept": SHARED_MODELS,
                     "launch": ("phantora.errors", "phantora.calibration",
                                "phantora.cluster.catalogue")}
INTERCEPT_TOP_MODULES_MAX = 8
"""Modules directly in ``intercept/`` (an ``__init__.py`` only if it has code)."""


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


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_rank_side_imports_of_phantora_only_the_shared_models() -> None:
    """An allow-list (the forbidden contracts in pyproject.toml name what exists today): every
    module of ``phantora`` that ``intercept`` or ``launch`` imports, directly or through each
    other, is one of the shared models, and those import neither side."""
    graph = grimp.build_graph("phantora", "intercept", "launch", "wire", cache_dir=None)
    for package, allowed in RANK_SIDE_ALLOWED.items():
        reached = {imported for module in graph.find_descendants(package) | {package}
                   for imported in graph.find_upstream_modules(module)
                   if imported.split(".")[0] == "phantora"}
        assert reached, package
        assert not {m for m in reached if not _within(m, allowed)}, package
    for module in graph.find_descendants("phantora"):
        if _within(module, SHARED_MODELS):
            assert not {m for m in graph.find_upstream_modules(module)
                        if m.split(".")[0] in ("intercept", "launch")}, module


def _has_code(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return bool(body[1:] if body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) else body)


def test_intercept_is_one_subpackage_per_model() -> None:
    """At most a few modules sit directly in ``intercept/`` (the rank's composition root); each
    subpackage opens with a docstring saying what it models."""
    top = [p.name for p in (ROOT / "intercept").glob("*.py")
           if p.name != "__init__.py" or _has_code(p)]
    assert len(top) <= INTERCEPT_TOP_MODULES_MAX, sorted(top)
    packages = [p for p in (ROOT / "intercept").iterdir() if (p / "__init__.py").is_file()]
    assert len(packages) >= 6, packages
    for package in packages:
        init = package / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} needs a docstring"
        assert not _has_code(init), f"{init}: keep it to a docstring"
