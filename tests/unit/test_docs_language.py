"""The docs describe the product, not the lab notebook it came from (the README's "Docs" rules).

- **No lab words.** "lent" and "session(s)" appear nowhere in the docs, the README, the bundled
  scenarios or the product code: a machine is named by its hardware (GPU, host CPU, vCPUs,
  instance), a measurement run or data set by its id (``measurement run `k```,
  ``data set `h200x4.g```). The pattern is the whole word, any case; it does not match inside
  identifiers and file names (``session_ms``, ``*.session5.txt``, ``.session{1,2}``: preceded by
  ``.``, ``/``, ``-`` or a word character, or followed by a word character), nor other words
  (``sessionless``, ``excellent``, ``silent``), nor a mention in double quotes (as in this
  paragraph). The operating-system sense is written "POSIX session" (a process started with
  ``setsid``), which the rule allows.
- **No dated measurement lines** in ``docs/`` and the README: a result states the model as it is
  and how well it does; when it was measured and what it replaced belong in git. A date that is
  data, not a measurement's, is allowed by name below.
- **Short lines** in ``docs/`` and the README: prose at most 120 characters (a URL may run past),
  a table row at most 800 (a longer row becomes a list under the table); fenced code blocks
  (commands, program output) are exempt.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SCENARIOS = sorted((ROOT / "scenarios").rglob("*.yaml"))
PRODUCT = sorted(path for package in ("phantora", "intercept", "launch", "wire", "ns3_models")
                 for suffix in ("*.py", "*.h", "*.cc", "*.md")
                 for path in (ROOT / package).rglob(suffix))

LAB_WORD = re.compile(r"(?<![\w./\-\"])(?<!POSIX )(lent|sessions?)(?![\w\"])", re.IGNORECASE)
""""lent" or "session(s)" as a word of prose; "POSIX session" is the operating system's, a word
in double quotes a mention."""
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
DATES_ALLOWED = {
    ("docs/studies/astra-sim.md", "(spdlog, 2024-03-24)"):
        "the commit date of a third-party pin that the study builds, not a measurement's",
}
PROSE_MAX = 120
TABLE_ROW_MAX = 800
URL = re.compile(r"https?://\S+")


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _lines(path: Path):
    """``(number, line, in_fence)`` for each line of a Markdown file."""
    fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            yield number, line, True
            continue
        yield number, line, fence


@pytest.mark.parametrize("group", ["docs", "scenarios", "product"])
def test_no_lab_words(group: str) -> None:
    files = {"docs": DOCS, "scenarios": SCENARIOS, "product": PRODUCT}[group]
    hits = [f"{_rel(path)}:{number}: {match.group(0)!r} in {line.strip()[:100]!r}"
            for path in files
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            for match in LAB_WORD.finditer(line)]
    assert not hits, ("name machines by their hardware and measurement runs by their ids:\n"
                      + "\n".join(hits))


def test_no_dated_measurement_lines_in_docs() -> None:
    hits = []
    for path in DOCS:
        for number, line, _ in _lines(path):
            for match in DATE.finditer(line):
                if not any(rel == _rel(path) and allowed in line
                           for rel, allowed in DATES_ALLOWED):
                    hits.append(f"{_rel(path)}:{number}: {match.group(0)} in "
                                f"{line.strip()[:100]!r}")
    assert not hits, ("state the model as it is; history belongs in git:\n" + "\n".join(hits))


def test_doc_lines_are_short() -> None:
    hits = []
    for path in DOCS:
        for number, line, fence in _lines(path):
            if fence:
                continue
            if line.lstrip().startswith("|"):
                if len(line) > TABLE_ROW_MAX:
                    hits.append(f"{_rel(path)}:{number}: table row of {len(line)} characters "
                                f"(max {TABLE_ROW_MAX}: make it a list under the table)")
            elif len(URL.sub("", line)) > PROSE_MAX:
                hits.append(f"{_rel(path)}:{number}: line of {len(line)} characters "
                            f"(max {PROSE_MAX})")
    assert not hits, "\n".join(hits)


def test_the_rule_tells_identifiers_from_words() -> None:
    for prose in ("on the lent H100", "two sessions on 2xH200", "Session b", "LENT"):
        assert LAB_WORD.search(prose), prose
    for name in ("session_ms", "h100x1-moe.session{1,2}.txt", "sessionless", "excellent",
                 "silent", "runs in its own POSIX session", "lentil", "data/sessions/x",
                 'the words "lent" and "session(s)"'):
        assert not LAB_WORD.search(name), name
