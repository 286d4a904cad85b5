"""The package layering rules of the README's "Layout" section hold (import-linter reads them
from ``pyproject.toml``): the coordinator (``phantora``) and the live-rank side (``intercept``)
never import each other and both stand on ``launch``, the shared models (``hwmodel``) and the
rank<->engine ``wire``, which import neither side; inside ``phantora`` and ``hwmodel`` each layer
imports only the layers below it; the measured values import nothing heavy, the shared models
and the network backends no PyTorch, the rank side no ns-3; ``launch`` nothing heavy; the wire no
PyTorch and no ns-3. And ``intercept`` keeps one subpackage per model, few modules at its top.
The product's tests (``tests/``) import product code and test helpers only, never ``scripts``."""
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

SIDES = ("phantora", "intercept")
"""The coordinator and the rank side: neither imports the other."""
SHARED = ("hwmodel", "launch", "wire")
"""What both sides may import: top-level packages that import neither side."""
ALLOWED = {"phantora": SHARED, "intercept": SHARED, "launch": ("hwmodel", "wire"),
           "hwmodel": (), "wire": ()}
"""An allow-list: the other top-level packages of this project each may import."""
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


def test_each_side_imports_only_the_shared_packages() -> None:
    """An allow-list (the contracts in pyproject.toml say the same): every module of this
    project that one top-level package imports, directly or through others, is its own or one
    of the packages it may import; so the two sides never import each other."""
    graph = grimp.build_graph(*ALLOWED, cache_dir=None)
    for package, allowed in ALLOWED.items():
        reached = {imported.split(".")[0] for module in graph.find_descendants(package) | {package}
                   for imported in graph.find_upstream_modules(module)}
        assert reached - {package} <= set(allowed), package
    for side in SIDES:
        reached = {imported.split(".")[0] for module in graph.find_descendants(side) | {side}
                   for imported in graph.find_upstream_modules(module)}
        assert "hwmodel" in reached, side


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


def _imported(path: Path) -> set[str]:
    """The modules ``path`` imports, at any depth of its code."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_tests_import_no_script() -> None:
    """``tests/`` tests the product: it imports no module of ``scripts/`` (one-off measurements,
    validation harnesses, benchmarks). What a test and a script both need sits in a package
    (``measurements``: the readers of ``data/``); a script's own tests sit in ``scripts/tests/``
    and go with it."""
    offenders = {str(path.relative_to(ROOT)): sorted(imported)
                 for path in sorted((ROOT / "tests").rglob("*.py"))
                 if (imported := {name for name in _imported(path)
                                  if name == "scripts" or name.startswith("scripts.")})}
    assert not offenders, offenders
