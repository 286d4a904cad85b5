"""The README is the front door: short, and every path, link and scenario it names exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MAX_LINES = 250

_LINK = re.compile(r"\]\(([^)#]+)(?:#[^)]*)?\)")
_CODE = re.compile(r"`([^`\s]+)`")
_PATHLIKE = re.compile(r"^[\w.-]+(/[\w.<>*-]*)+$|^[\w-]+\.(?:ya?ml|py|md|json|toml)$")


_TRACKED_NAMES = {path.name for path in ROOT.rglob("*") if ".git" not in path.parts}


def _named_paths() -> set[str]:
    """Markdown link targets, and code spans that look like repository paths."""
    named = set(_LINK.findall(README))
    named |= {span.rstrip("/") for span in _CODE.findall(README) if _PATHLIKE.match(span)}
    return {name for name in named if "<" not in name and not name.startswith("http")}


def _exists(name: str) -> bool:
    """A path from the repository root, or a file the README names by its place in a
    folder it mentions (an output under DIR/, a scenario under scenarios/)."""
    if name.startswith(("DIR/", "out/")):
        return True  # what a run writes
    return (ROOT / name).exists() or ("/" not in name and name in _TRACKED_NAMES)


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= MAX_LINES


def test_every_path_and_link_in_the_readme_exists() -> None:
    names = _named_paths()
    assert len(names) > 20  # the check reads the README, not nothing
    missing = sorted(name for name in names if not _exists(name))
    assert not missing, f"README.md names paths that do not exist: {missing}"


def test_every_scenario_a_readme_command_runs_exists() -> None:
    scenarios = [path for path in re.findall(r"phantora-ns3 (\S+\.yaml)", README)
                 if not Path(path).stem.isupper()]  # SCENARIO.yaml, STUDY.yaml: placeholders
    assert scenarios
    assert [path for path in scenarios if not (ROOT / path).is_file()] == []
