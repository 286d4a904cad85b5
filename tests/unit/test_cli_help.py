"""``phantora-ns3 --help`` and each subcommand's ``--help``: what a user reads first."""

import pytest

from phantora.cli import main
from phantora.cli.commands import SUBCOMMANDS


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``phantora-ns3 <argv>`` prints to stdout; it must exit 0 (help, not an error)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    return capsys.readouterr().out


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``phantora-ns3 <argv>`` prints to stderr; it must be a usage error (exit 2)."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_top_level_help_says_what_the_tool_does_and_lists_the_commands(
        capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(["--help"], capsys)
    description = text.split("\n\n")[1]
    assert description.startswith("Simulate a GPU cluster")
    assert "composition root" not in text  # the developers' wording stays in the docstring
    for name in SUBCOMMANDS:
        assert f"phantora-ns3 {name} " in text  # in the usage lines
        assert f"\n  {name} " in text  # in the commands list
    assert "sweep: block" in text and "--address" in text


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_each_subcommand_prints_its_own_help(name: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of([name, "--help"], capsys)
    assert text.startswith(f"usage: phantora-ns3 {name} ")
    assert SUBCOMMANDS[name][0].split()[0] in text  # its own arguments (RUN_DIR, PROFILE...)
    assert SUBCOMMANDS[name][1].split()[0] in text  # its own summary, not the top-level one
    assert "commands:" not in text


@pytest.mark.parametrize(("argv", "word"), [(["sweep", "--help"], "sweep"),
                                            (["sweep", "study.yaml"], "sweep"),
                                            (["run"], "run"),
                                            (["--out", "out/x", "sweep"], "sweep")])
def test_an_unknown_subcommand_is_an_error_naming_the_subcommands(
        argv: list[str], word: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = error_of(argv, capsys)
    assert f"{word!r} is neither a subcommand" in text
    assert all(name in text for name in SUBCOMMANDS)
    assert "Simulate a GPU cluster" not in text  # not the top-level help


def test_sweep_as_a_word_points_to_the_sweep_block(capsys: pytest.CaptureFixture[str]) -> None:
    assert "sweep: block" in error_of(["sweep"], capsys)


def test_a_yaml_name_is_taken_as_a_scenario_even_if_missing(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A missing scenario file is the scenario loader's one-line error (exit 2), not a usage
    error about subcommands."""
    assert main(["no-such-scenario.yaml"]) == 2
    printed = capsys.readouterr()
    assert "neither a subcommand" not in printed.out + printed.err
    assert "no-such-scenario.yaml" in printed.out
