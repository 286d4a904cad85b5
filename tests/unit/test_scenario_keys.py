"""Every scenario key is declared once (phantora/scenario/keys.py), and what is made from the
declarations holds: the key reference of docs/scenarios.md, and each quantity's one name from
the file to the resolved scenario (the key with its unit: ``nic_bandwidth`` is ``nic_gbps``)."""

import dataclasses
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from phantora.network.roce_presets import RoceSettings
from phantora.scenario import model
from phantora.scenario import schema
from phantora.scenario.keys import declared_sections, derived_of, resolved_name
from phantora.scenario.messages import unwrap
from phantora.scenario.reference import BEGIN, END, key_reference

ROOT = Path(__file__).resolve().parents[2]

RESOLVED: dict[type[BaseModel], Any] = {
    schema.ScenarioSpec: model.Scenario,
    schema.ClusterSpec: model.ClusterConfig,
    schema.NetworkSpec: model.NetworkConfig,
    schema.RoceSpec: RoceSettings,
    schema.NcclSpec: model.NcclOverrides,
    schema.WorkloadSpec: model.ScriptWorkload,
    schema.CollectivesSpec: model.CollectivesWorkload,
    schema.SimulationSpec: model.SimulationConfig,
    schema.SlowGpuSpec: model.SlowGpuFault,
    schema.NicDegradeSpec: model.NicDegradeFault,
    schema.LinkDownSpec: model.LinkDownFault,
}
"""Each schema model and what it resolves to."""
NOT_RESOLVED_BY_NAME = {
    (schema.WorkloadSpec, "collectives"): "the workload's kind, a model of its own",
}
"""Keys that become something other than a field of the same name."""
SPEC_MODELS = [section.model for section in declared_sections(schema.ScenarioSpec)]


def test_every_schema_model_is_mapped_to_what_it_resolves_to() -> None:
    assert set(SPEC_MODELS) == {*RESOLVED, schema.SizeSweepSpec}  # sweeps expand to sizes


def test_the_doc_holds_the_reference_the_declarations_give() -> None:
    doc = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    block = doc[doc.index(BEGIN) + len(BEGIN) + 1:doc.index(END)]
    assert block == key_reference(schema.ScenarioSpec), (
        "docs/scenarios.md's key reference differs from the schema; run "
        "python3 scripts/docs/regenerate_scenario_keys.py")


def test_every_key_is_declared_with_doc_and_default() -> None:
    """A doc on every key; a key left out either has a default as a user writes it or says
    how other keys decide it (a ``None`` default alone says nothing)."""
    undeclared = []
    for spec in SPEC_MODELS:
        for name, field in spec.model_fields.items():
            derived = derived_of(field) is not None
            if not field.description:
                undeclared.append(f"{spec.__name__}.{name}: no doc")
            if field.default is None and not derived:
                undeclared.append(f"{spec.__name__}.{name}: None default without Derived")
            if derived and field.default is not None:
                undeclared.append(f"{spec.__name__}.{name}: Derived beside a default")
            if field.default is PydanticUndefined and derived:
                undeclared.append(f"{spec.__name__}.{name}: Derived on a required key")
    assert undeclared == []


def test_each_key_keeps_its_name_once_resolved() -> None:
    wrong = [f"{spec.__name__}.{key} -> {resolved.__name__}.{resolved_name(spec, key)}"
             for spec, resolved in RESOLVED.items() for key in spec.model_fields
             if (spec, key) not in NOT_RESOLVED_BY_NAME
             and resolved_name(spec, key) not in _names(resolved)]
    assert wrong == []


def test_quantities_resolve_to_their_unit() -> None:
    assert resolved_name(schema.NetworkSpec, "nic_bandwidth") == "nic_gbps"
    assert resolved_name(schema.NetworkSpec, "link_latency") == "link_latency_ns"
    assert resolved_name(schema.NetworkSpec, "mtu") == "mtu_bytes"
    assert resolved_name(schema.RoceSpec, "dcqcn_rate_ai") == "dcqcn_rate_ai_gbps"
    assert resolved_name(schema.NetworkSpec, "topology") == "topology"


def _names(resolved: Any) -> set[str]:
    """The fields of a resolved model, and of the models its fields hold (a fabric's
    ``spines`` are ``NetworkConfig.topology.spines``)."""
    if dataclasses.is_dataclass(resolved):
        return {field.name for field in dataclasses.fields(resolved)}
    names = set(resolved.model_fields)
    for field in resolved.model_fields.values():
        bare, _ = unwrap(field.annotation)
        for member in (bare, *get_args(bare)):
            if isinstance(member, type) and issubclass(member, BaseModel):
                names |= set(member.model_fields)
    return names
