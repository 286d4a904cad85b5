"""The run outputs README.md and docs/ show are what the current code gives: each shown
command runs once and every marked block and output file is compared with it
(``scripts/docs/regenerate_doc_outputs.py``, which rewrites them; wall times left out)."""

from pathlib import Path

import pytest

from scripts.docs.regenerate_doc_outputs import OUTPUTS, Output, differences, regenerate


@pytest.mark.slow
def test_every_shown_output_matches_a_fresh_run(tmp_path: Path) -> None:
    assert not differences(regenerate(OUTPUTS, tmp_path)), (
        "a doc shows a stale run output; rewrite it with "
        "python3 scripts/docs/regenerate_doc_outputs.py")


def test_every_marked_block_is_one_of_the_outputs() -> None:
    for output in OUTPUTS:
        assert output.shown().strip(), output.label  # its markers are there
    blocks = {output.block for output in OUTPUTS}
    root = Path(__file__).resolve().parents[2]
    for doc in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for line in doc.read_text().splitlines():
            if line.startswith("<!-- output "):
                assert line.split()[2].rstrip(":") in blocks, f"{doc}: {line}"


def test_only_the_block_is_rewritten_and_wall_times_are_not_compared() -> None:
    readme = OUTPUTS[0]
    text = (Path(__file__).resolve().parents[2] / readme.doc).read_text()
    new = readme.rewritten("fresh\n")
    assert new.replace("fresh\n", readme.shown()) == text
    csv = next(output for output in OUTPUTS if output.doc.endswith(".csv"))
    assert isinstance(csv, Output)
    assert csv.agrees("point,step_ms,wall_s\n0,12.444731,17.66\n",
                      "point,step_ms,wall_s\n0,12.444731,5.77\n")
    assert not csv.agrees("point,step_ms\n0,12.444731\n", "point,step_ms\n0,11.486130\n")


def test_simulated_numbers_must_repeat_exactly() -> None:
    """Runs are bit-identical (``docs/outputs.md``): a nanosecond off is a difference (rank 7's
    compute once read 0.760 and 0.761 ms in two runs of the same recording)."""
    readme, csv = OUTPUTS[0], OUTPUTS[-1]
    assert readme.agrees("compute 0.761 (7%)", "compute 0.761 (7%)")
    assert not readme.agrees("compute 0.761 (7%)", "compute 0.760 (7%)")
    assert not csv.agrees("point,compute_ms\n0,0.76041\n", "point,compute_ms\n0,0.760649\n")
