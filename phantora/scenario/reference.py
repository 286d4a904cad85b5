"""The key reference of ``docs/scenarios.md``, made from the schema's declarations.

:func:`key_reference` renders every declared key (:func:`phantora.scenario.keys.declared_sections`)
as Markdown, a table per mapping; :func:`with_reference` puts it between the two markers of a
doc. ``scripts/docs/regenerate_scenario_keys.py`` writes the doc; a test checks that the doc
holds what the declarations give.
"""

import re
import textwrap

from pydantic import BaseModel

from phantora.scenario.keys import Section, declared_sections

BEGIN = ("<!-- keys: generated from phantora/scenario/schema.py by "
         "scripts/docs/regenerate_scenario_keys.py -->")
END = "<!-- /keys -->"

_PROSE_WIDTH = 100
_RST_CODE = re.compile(r"``([^`]+)``")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
"""A ``<`` that Markdown would take for the start of an HTML tag (``zipf:<s>``)."""


def key_reference(root: type[BaseModel]) -> str:
    """Every key of ``root`` and of the mappings under it, as Markdown tables."""
    return "\n\n".join(_section(section) for section in declared_sections(root)) + "\n"


def with_reference(doc: str, reference: str) -> str:
    """``doc`` with what lies between :data:`BEGIN` and :data:`END` replaced by ``reference``."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the doc has no {BEGIN} ... {END} block")
    return f"{doc[:start + len(BEGIN)]}\n{reference}{doc[end:]}"


def _section(section: Section) -> str:
    rows = [f"| `{key.name}` | {_cell(key.values)} | {_cell(key.default)} | {_cell(key.doc)} |"
            for key in section.keys]
    intro = textwrap.fill(_cell(section.doc), _PROSE_WIDTH, break_on_hyphens=False)
    return "\n".join([f"### {section.path or 'top level'}", "", intro, "",
                      "| key | value | default | what it is |", "|---|---|---|---|", *rows])


def _cell(text: str) -> str:
    """Docstring text as Markdown in a table: code in single backticks, ``|`` and a tag's
    ``<`` escaped."""
    return _TAG_START.sub(r"\\<", _RST_CODE.sub(r"`\1`", text).replace("|", "\\|"))
