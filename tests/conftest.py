"""Fixtures shared by the test packages."""

import gc
from collections.abc import Callable

import pytest

from phantora.cli import main


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, the simulator, the test modules) lives for the session:
    frozen, out of the way of every garbage collection, which would traverse its ~450,000
    objects each time (~10% of the test process's CPU)."""
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Unfrozen, for the interpreter to free at exit (triton's bindings report what it does
    not)."""
    gc.unfreeze()


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[[list[str]], None]:
    """Runs ``phantora-ns3 <argv>`` and fails with the tail of what it printed to stderr, so the
    cause shows in CI's one-line summary of a failed test."""
    def run(argv: list[str]) -> None:
        code = main(argv)
        assert code == 0, f"phantora-ns3 exited with {code}:\n{capsys.readouterr().err[-3000:]}"
    return run
