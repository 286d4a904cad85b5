"""The fake-CUDA shim's build cache and its refusals (no compiler, torch imported first)."""

import sys
from pathlib import Path

import pytest

from hwmodel.errors import MissingDependencyError, SimulationError
from intercept.process import shim


@pytest.fixture
def fake_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Builds into a temporary cache with a compiler stand-in that only writes the target."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built: list[Path] = []

    def compile_stub(flags: object, folder: Path, target: Path) -> None:
        target.write_bytes(b"not a real library")
        built.append(target)

    monkeypatch.setattr(shim, "_compile", compile_stub)
    return built


def test_build_is_cached_per_source_and_torch_version(fake_compiler: list[Path],
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    first = shim.build()
    assert shim.build() == first
    assert fake_compiler == [first]
    assert first.is_relative_to(tmp_path / "phantora-ns3" / "fakecuda")

    edited = tmp_path / "fakecuda.cpp"
    edited.write_text(shim.SOURCE.read_text() + "\n// edited\n")
    monkeypatch.setattr(shim, "SOURCE", edited)
    after_edit = shim.build()
    monkeypatch.setattr(shim, "_torch_version", lambda: "9.9.9")
    after_upgrade = shim.build()

    assert len({first, after_edit, after_upgrade}) == 3
    assert fake_compiler == [first, after_edit, after_upgrade]
    assert "9.9.9" in after_upgrade.parent.name


def test_missing_compiler_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(MissingDependencyError, match="C\\+\\+ compiler"):
        shim._compile(([], []), tmp_path, tmp_path / shim.LIBRARY_NAME)
    assert not list(tmp_path.glob("*.so"))


def test_refuses_to_load_after_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch") or object())
    monkeypatch.setattr(shim, "_library", None)
    with pytest.raises(SimulationError, match="before `import torch`"):
        shim.load()


def test_callback_ops_match_the_native_source() -> None:
    source = shim.SOURCE.read_text()
    for op in shim.CallbackOp:
        words = op.name.title().replace("_", "")
        assert f"k{words} = {op.value}," in source
