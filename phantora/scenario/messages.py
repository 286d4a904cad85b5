"""One line per problem: ``FILE: KEY.PATH: what was found; what is expected and the fix``.

pydantic reports each failure as a dict (``type``, ``loc``, ``input``, ``ctx``); this module
renders those, and the resolver's cross-field problems, in the project's error style::

    scenarios/x.yaml: cluster.netwrok: unknown key; did you mean "network"? (allowed: ...)
    scenarios/x.yaml: cluster.gpu: got "h300"; expected one of a100-80g, b200, h100, h200
"""

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Annotated, Any, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, Tag
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from hwmodel.errors import ScenarioError

Problem = tuple[str, str]
"""``(key path, message)``; rendered as ``SOURCE: PATH: MESSAGE``."""

_MAX_VALUE_CHARS = 60


def scenario_error(source: str, problems: Iterable[Problem]) -> ScenarioError:
    """One :class:`ScenarioError` whose message has a line per problem."""
    return ScenarioError("\n".join(f"{source}: {path}: {message}" for path, message in problems))


def show(value: Any) -> str:
    """A found value as the user would write it: strings quoted, ``true``, ``null``, JSON lists."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= _MAX_VALUE_CHARS else text[:_MAX_VALUE_CHARS - 3] + "..."


def show_number(value: float) -> str:
    """``400``, ``2.5``, ``1638400``: no trailing ``.0``, no exponent for big round numbers."""
    return f"{value:.10g}"


def show_gbps(rate: float) -> str:
    return f"{show_number(rate)} Gbps"


def join_words(words: Iterable[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(words)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def reject_repeats(path: str, items: Sequence[object], what: str,
                   problems: list[Problem]) -> None:
    """A problem for each item of ``items`` (at ``path``) that an earlier one repeats."""
    first_at: dict[object, int] = {}
    for index, item in enumerate(items):
        if item in first_at:
            problems.append((f"{path}[{index}]", f"{what} {item} is already at "
                                                 f"[{first_at[item]}]; list each {what} once"))
        first_at.setdefault(item, index)


def did_you_mean(word: object, options: Iterable[str]) -> str | None:
    """The option ``word`` most likely misspells, or ``None`` if no option is a clear winner."""
    if not isinstance(word, str):
        return None
    scored = sorted(((SequenceMatcher(None, word.lower(), option).ratio(), option)
                     for option in options), reverse=True)
    if not scored or scored[0][0] < 0.6 or (len(scored) > 1 and scored[1][0] == scored[0][0]):
        return None
    return scored[0][1]


def expected_one_of(value: object, options: Iterable[str]) -> str:
    """``expected one of a, b, c`` plus a did-you-mean when one option is clearly meant."""
    choices = list(options)
    message = "expected one of " + ", ".join(choices)
    guess = did_you_mean(value, choices)
    return message if guess is None else f'{message}; did you mean "{guess}"?'


# -- locating an error inside the schema ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Location:
    path: str
    """Display path: ``cluster.network.k``, ``workload.collectives.sizes[2]``."""
    annotation: Any
    """The type expected at the location (``None`` where the schema has no such key)."""
    constraints: tuple[Any, ...]
    """annotated-types bounds (``Ge``, ``Le``, ...) that apply there."""
    parent: type[BaseModel] | None
    """The model holding the last key of the path."""
    field: FieldInfo | None


def unwrap(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """Strip ``Annotated`` and ``X | None``; return the bare type and its constraints."""
    constraints: list[Any] = []
    while True:
        if get_origin(annotation) is Annotated:
            annotation, *metadata = get_args(annotation)
            for item in metadata:
                constraints.extend(item.metadata if isinstance(item, FieldInfo) else [item])
            continue
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if _is_union(annotation) and len(members) == 1:
            annotation = members[0]
            continue
        return annotation, tuple(constraints)


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, type(int | None))


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _tagged_member(union: Any, tag: object) -> Any:
    for member in get_args(union):
        if get_origin(member) is Annotated and any(
                isinstance(meta, Tag) and meta.tag == tag for meta in get_args(member)[1:]):
            return member
    return None


def _locate(root: type[BaseModel], loc: tuple[int | str, ...]) -> _Location:
    """Follow a pydantic ``loc`` through the schema; tags of tagged unions are not shown."""
    path = ""
    annotation: Any = root
    constraints: tuple[Any, ...] = ()
    parent: type[BaseModel] | None = None
    field: FieldInfo | None = None
    for part in loc:
        bare, _ = unwrap(annotation)
        if _is_union(bare) and (member := _tagged_member(bare, part)) is not None:
            annotation = member
            continue
        if _is_model(bare):
            parent, field = bare, bare.model_fields.get(str(part))
            path = f"{path}.{part}" if path else str(part)
            annotation = field.annotation if field else None
            constraints = tuple(field.metadata) if field else ()
        elif get_origin(bare) in (list, tuple) and isinstance(part, int):
            path = f"{path}[{part}]"
            annotation, field = get_args(bare)[0], None
        else:
            path = f"{path}.{part}" if path else str(part)
            annotation, field = None, None
        annotation, inner = unwrap(annotation)
        constraints = constraints + inner
    return _Location(path or "top level", annotation, constraints, parent, field)


# -- one message per pydantic error type ----------------------------------------------------

_BOUNDS = ((Ge, "ge", ">="), (Gt, "gt", ">"), (Le, "le", "<="), (Lt, "lt", "<"))


def bounds(constraints: tuple[Any, ...]) -> str:
    """`` from 1 to 16``, `` >= 1`` or nothing, from annotated-types bounds."""
    found = {attr: getattr(c, attr) for c in constraints
             for kind, attr, _ in _BOUNDS if isinstance(c, kind)}
    if "ge" in found and "le" in found:
        return f" from {found['ge']} to {found['le']}"
    parts = [f"{sign} {found[attr]}" for _, attr, sign in _BOUNDS if attr in found]
    return " " + " and ".join(parts) if parts else ""


def _keys_of(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _first_sentence(text: str | None) -> str:
    return (text or "").strip().split("\n\n")[0].replace("\n", " ").rstrip(".")


_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})
_EXPECTED = {
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list, e.g. [a, b]",
    "too_short": "a non-empty list",
    "string_type": "a string",
    "string_too_short": "a non-empty string",
}
"""What to say after ``expected`` for the error types that need no context."""


def _detail(error: ErrorDetails, where: _Location) -> str:
    kind, value = error["type"], error.get("input")
    got = f"got {show(value)}; "
    if kind == "extra_forbidden":
        allowed = _keys_of(where.parent) if where.parent else ""
        guess = did_you_mean(error["loc"][-1], where.parent.model_fields if where.parent else ())
        hint = f'; did you mean "{guess}"?' if guess else "; remove it or fix its spelling"
        return f"unknown key{hint} (allowed: {allowed})"
    if kind == "missing":
        about = _first_sentence(where.field.description if where.field else None)
        return "required key missing; add it" + (f" ({about})" if about else "")
    if kind == "literal_error":
        return got + expected_one_of(value, re.findall(r"'([^']*)'", error["ctx"]["expected"]))
    if kind == "value_error":
        return got + str(error["ctx"]["error"])
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        keys = _keys_of(where.annotation) if _is_model(where.annotation) else "keys"
        return got + f"expected a mapping with keys {keys}"
    if kind.startswith("int_") or (kind in _RANGE_ERRORS and where.annotation is int):
        return got + "expected an integer" + bounds(where.constraints)
    if kind.startswith("float_") or kind in _RANGE_ERRORS:
        return got + "expected a number" + bounds(where.constraints)
    if kind in _EXPECTED:
        return got + "expected " + _EXPECTED[kind]
    return got + error["msg"][:1].lower() + error["msg"][1:]


def describe_errors(errors: list[ErrorDetails], root: type[BaseModel]) -> list[Problem]:
    """One ``(path, message)`` per error, in schema order.

    A required key reported missing is left out when an unknown key next to it is a likely
    misspelling of it: the did-you-mean line already says what to fix.
    """
    located = [(error, _locate(root, tuple(error["loc"]))) for error in errors]
    misspelt = set()
    for error, where in located:
        if error["type"] == "extra_forbidden" and where.parent is not None:
            guess = did_you_mean(error["loc"][-1], where.parent.model_fields)
            if guess:
                misspelt.add((*error["loc"][:-1], guess))
    return [(where.path, _detail(error, where)) for error, where in located
            if not (error["type"] == "missing" and tuple(error["loc"]) in misspelt)]
