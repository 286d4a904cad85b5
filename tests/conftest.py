"""Fixtures shared by the test packages."""

from collections.abc import Callable

import pytest

from phantora.cli import main


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[[list[str]], None]:
    """Runs ``phantora-ns3 <argv>`` and fails with the tail of what it printed to stderr, so the
    cause shows in CI's one-line summary of a failed test."""
    def run(argv: list[str]) -> None:
        code = main(argv)
        assert code == 0, f"phantora-ns3 exited with {code}:\n{capsys.readouterr().err[-3000:]}"
    return run
