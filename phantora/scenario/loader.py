"""Reading a scenario: file → YAML → schema → resolved :class:`Scenario`.

Every failure on the way (missing file, YAML syntax, a duplicate key, a bad value, keys that
contradict each other) ends as one :class:`~hwmodel.errors.ScenarioError`, never a traceback.
"""

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hwmodel.errors import ScenarioError
from phantora.scenario.messages import describe_errors, scenario_error
from phantora.scenario.model import Scenario
from phantora.scenario.resolve import resolve_scenario
from phantora.scenario.schema import ScenarioSpec

_YAML_HINTS = (
    ("'\\t'", "indent with spaces, not tabs"),
    ("<block", "check this line's indentation against the lines above it"),
)
"""(clue in PyYAML's problem text, fix to suggest) for its most cryptic messages."""


def load_scenario(path: str | Path) -> Scenario:
    """Read, validate and resolve the scenario file at ``path``."""
    data = load_scenario_data(path)
    if data is None:
        raise ScenarioError(f"{path}: the file is empty; expected a mapping with keys "
                            + ", ".join(ScenarioSpec.model_fields))
    return parse_scenario(data, str(path))


def load_scenario_data(path: str | Path) -> Any:
    """The scenario file at ``path`` as YAML data, not yet validated."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{source}: file not found (looked in {Path.cwd()}); "
                            "check the path") from None
    except UnicodeDecodeError as err:
        raise ScenarioError(f"{source}: not UTF-8 text (byte {err.start}); "
                            "save the file as UTF-8") from None
    except OSError as err:
        raise ScenarioError(f"{source}: cannot read the file: {err.strerror}") from None
    return parse_yaml(text, source)


def parse_scenario(data: dict[str, Any], source: str) -> Scenario:
    """Validate and resolve already-parsed scenario data; ``source`` labels the messages.

    The default ``name`` is the stem of ``source``.
    """
    try:
        spec = ScenarioSpec.model_validate(data)
    except ValidationError as err:
        raise scenario_error(source, describe_errors(err.errors(), ScenarioSpec)) from None
    return resolve_scenario(spec, source)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text to Python data; syntax errors and duplicate keys name ``source:line:column``."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = err.problem or err.context or "unreadable"
        hints = [f"; {hint}" for clue, hint in _YAML_HINTS if clue in problem]
        raise ScenarioError(f"{where}: invalid YAML: {problem}{''.join(hints)}") from None
    except yaml.YAMLError as err:
        raise ScenarioError(f"{source}: invalid YAML: {err}") from None


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys, which PyYAML would silently overwrite."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Hashable, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader reports unhashable keys itself
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f'duplicate key "{key}" (first at line {first_line[key]}); '
                                "keep only one", key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)
