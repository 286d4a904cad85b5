"""Writes the key reference of docs/scenarios.md from the schema's declarations.

The block between ``<!-- keys: ... -->`` and ``<!-- /keys -->`` is rewritten whole from
:func:`phantora.scenario.reference.key_reference`; ``tests/unit/test_scenario_keys.py`` checks
that the doc holds what it would write.

  python3 scripts/docs/regenerate_scenario_keys.py
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from phantora.scenario.reference import key_reference, with_reference  # noqa: E402
from phantora.scenario.schema import ScenarioSpec  # noqa: E402
from scripts.common import parser  # noqa: E402

DOC = REPO / "docs" / "scenarios.md"


def main() -> None:
    parser(__doc__).parse_args()
    text = DOC.read_text(encoding="utf-8")
    DOC.write_text(with_reference(text, key_reference(ScenarioSpec)), encoding="utf-8")
    print(f"wrote the key reference of {DOC.relative_to(REPO)}")


if __name__ == "__main__":
    main()
