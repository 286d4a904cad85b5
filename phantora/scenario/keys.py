"""How a scenario key is declared, and the list of declared keys the reference is made from.

A key is declared once, as a field of a schema model (:mod:`phantora.scenario.schema`), the
way ns-3 declares a TypeId attribute:

- **name**: the field's name, as the YAML file spells it;
- **unit**: a :class:`Unit` in the field's type (``Rate``, ``Duration``, ``Bytes``), which
  also gives the key's name once resolved (:meth:`Unit.resolved_name`);
- **default**: the field's default, written as a user would write it (``"500ns"``) and
  checked like a written value; or :class:`Derived`, saying how other keys decide it (the
  resolver computes it, :mod:`phantora.scenario.resolve`); no default: the key is required;
- **doc**: the docstring under the field;
- **check**: the field's type, bounds and validators (:class:`Accepts` says in words what a
  validator accepts where the type does not).

:func:`declared_sections` reads these back for :mod:`phantora.scenario.reference`.
"""

from dataclasses import dataclass
from types import NoneType
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from phantora.scenario.messages import bounds, unwrap


@dataclass(frozen=True, slots=True)
class Unit:
    """The base unit a quantity key is resolved to, and how a user writes one."""

    name: str
    """The base unit: ``Gbit/s``, ``ns``, ``bytes``."""
    suffix: str
    """What the resolved name ends with: ``gbps``."""
    kind: str
    """What a value is: ``rate``, ``duration``, ``size``."""
    example: str | None = None
    """A value as a user writes it: ``400Gbps``; ``None`` where it is a plain number."""

    def resolved_name(self, key: str) -> str:
        """The key's name once resolved, with its unit: ``link_latency`` is ``link_latency_ns``,
        ``nic_bandwidth`` is ``nic_gbps`` (the unit says it is a bandwidth)."""
        return f"{key.removesuffix('_bandwidth')}_{self.suffix}"

    def describe(self, bounds: str) -> str:
        """``rate in Gbit/s, e.g. 400Gbps``, with ``bounds`` (`` from 1 to 7``) after the unit."""
        example = f", e.g. {self.example}" if self.example else ""
        return f"{self.kind} in {self.name}{bounds}{example}"


@dataclass(frozen=True, slots=True)
class Derived:
    """A default that other keys decide: the resolver computes it; ``how`` says how."""

    how: str


@dataclass(frozen=True, slots=True)
class Accepts:
    """What a key's validator accepts, in words, where its type alone does not say (a GPU of
    the catalogue, ``zipf:<s>``)."""

    values: str


REQUIRED = "required"
"""What the reference says for a key without a default."""


@dataclass(frozen=True, slots=True)
class Key:
    """One declared key, as the reference shows it."""

    name: str
    values: str
    """What the check accepts: ``dcqcn | none``, ``integer from 1 to 16``, a unit."""
    default: str
    """As a user would write it, how other keys decide it, or :data:`REQUIRED`."""
    doc: str


@dataclass(frozen=True, slots=True)
class Section:
    """A mapping of the file (one schema model) and its keys."""

    path: str
    """Where it sits: ``cluster.network``, ``faults[]``; ``""`` for the top level."""
    model: type[BaseModel]
    """The schema model that declares its keys."""
    doc: str
    """The model's docstring: what the mapping is."""
    keys: tuple[Key, ...]


def _unit_of(field: FieldInfo) -> Unit | None:
    """The unit in ``field``'s type, if it is a quantity."""
    _, constraints = unwrap(field.annotation)
    return _unit(tuple(field.metadata) + constraints)


def _unit(constraints: tuple[Any, ...]) -> Unit | None:
    return next((item for item in constraints if isinstance(item, Unit)), None)


def resolved_name(model: type[BaseModel], key: str) -> str:
    """The name ``model``'s ``key`` has once resolved: the key with its unit, if it has one."""
    unit = _unit_of(model.model_fields[key])
    return key if unit is None else unit.resolved_name(key)


def derived_of(field: FieldInfo) -> Derived | None:
    """How other keys decide ``field``'s default, if they do."""
    return next((item for item in field.metadata if isinstance(item, Derived)), None)


def declared_sections(model: type[BaseModel], path: str = "") -> list[Section]:
    """``model`` and every mapping under it, in the schema's order."""
    keys = tuple(Key(name, _accepted(field.annotation, tuple(field.metadata)), _default(field),
                     _words(field.description)) for name, field in model.model_fields.items())
    sections = [Section(path, model, _words(model.__doc__), keys)]
    for name, field in model.model_fields.items():
        inner = f"{path}.{name}" if path else name
        for member, in_list in _mappings(field.annotation):
            sections.extend(declared_sections(member, f"{inner}[]" if in_list else inner))
    return sections


def _mappings(annotation: Any, in_list: bool = False) -> list[tuple[type[BaseModel], bool]]:
    """The public models a value of ``annotation`` may be, each with whether it is a list's
    item (a member of a union of models, a list of them)."""
    bare, _ = unwrap(annotation)
    if _is_model(bare):
        return [] if bare.__name__.startswith("_") else [(bare, in_list)]
    if get_origin(bare) is list:
        return _mappings(get_args(bare)[0], in_list=True)
    return [found for member in get_args(bare) for found in _mappings(member, in_list)]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _words(text: str | None) -> str:
    return " ".join((text or "").split())


def _default(field: FieldInfo) -> str:
    derived = derived_of(field)
    if derived is not None:
        return derived.how
    if field.default is PydanticUndefined:
        return REQUIRED
    if isinstance(field.default, BaseModel):
        return "its keys' defaults"
    return _written(field.default)


def _written(value: Any) -> str:
    """A default as YAML holds it: ``true``, ``[]``, ``500ns``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return "[]" if isinstance(value, list) else "{}"
    return str(value)


def _accepted(annotation: Any, outer: tuple[Any, ...] = ()) -> str:
    """What a value of ``annotation`` may be, in words."""
    bare, constraints = unwrap(annotation)
    constraints = (*outer, *constraints)
    accepts = next((item for item in constraints if isinstance(item, Accepts)), None)
    if accepts is not None:
        return accepts.values
    unit = _unit(constraints)
    if unit is not None:
        return unit.describe(bounds(constraints))
    if _is_model(bare):
        return "mapping"
    if get_origin(bare) is Literal:
        return " | ".join(map(str, get_args(bare)))
    if bare is bool:
        return "true | false"
    if bare is int:
        return "integer" + bounds(constraints)
    if bare is float:
        return "number" + bounds(constraints)
    if get_origin(bare) is list:
        return f"list of {_accepted(get_args(bare)[0])}"
    if get_origin(bare) is dict:
        return "mapping of names to text"
    members = [arg for arg in get_args(bare) if arg is not NoneType]
    if members:
        return " or ".join(_accepted(member) for member in members)
    return "text"
