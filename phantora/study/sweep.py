"""The ``sweep:`` block of a scenario: which keys vary, and the points it expands to.

```yaml
sweep:
  mode: grid                  # grid (every combination) | zip (i-th value of every key)
  parameters:                 # dotted scenario keys -> the values they take
    cluster.network.topology: [rail-optimized, leaf-spine]
    cluster.network.oversubscription: [1, 2]
```

The block is checked with pydantic, each key against the scenario schema (an unknown key is an
error naming it), and each point is validated as a whole scenario before anything runs; a
point the schema rejects becomes a failed row, not a failed sweep. A point whose keys all
change only the network or NCCL settings is run as a replay of one live recording of the base
scenario; any other point runs live.
"""

import copy
import itertools
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hwmodel.errors import ScenarioError
from phantora.scenario import Scenario, ScriptWorkload, parse_scenario
from phantora.scenario.loader import load_scenario_data
from phantora.scenario.messages import describe_errors, scenario_error
from phantora.scenario.schema import ScenarioSpec

REPLAYABLE_PREFIXES = ("cluster.network.", "nccl.", "cluster.nvlink_bandwidth", "faults")
"""Keys a replay can change: they act on the network, the NCCL model and the recorded kernel
times (``faults``: a ``slow_gpu`` scales a rank's recorded kernels; a rank mirrored in the
recording cannot be slowed, so such a sweep records with ``simulation.dedup: off``), never on
what the script does."""


class SweepSpec(BaseModel):
    """The ``sweep:`` block."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["grid", "zip"] = "grid"
    """``grid``: every combination of the values; ``zip``: the i-th value of every key."""
    parameters: dict[str, typing.Annotated[list[Any], Field(min_length=1)]] = Field(
        min_length=1)
    """Dotted scenario key (``cluster.network.topology``) -> the values it takes."""


@dataclass(frozen=True)
class SweepPoint:
    index: int
    values: dict[str, Any]
    """Swept key -> this point's value."""
    data: dict[str, Any]
    """The whole scenario of this point, as YAML data."""
    scenario: Scenario | None
    error: str = ""
    """Why the scenario schema rejected the point (then ``scenario`` is None)."""

    @property
    def replayable(self) -> bool:
        return all(key.startswith(REPLAYABLE_PREFIXES) for key in self.values)


@dataclass(frozen=True)
class Sweep:
    source: str
    name: str
    base: dict[str, Any]
    """The scenario without its ``sweep:`` block."""
    spec: SweepSpec
    points: list[SweepPoint]

    @property
    def needs_recording(self) -> bool:
        """Some point is a replay: the base scenario runs live once first, recorded."""
        return any(p.replayable and isinstance(p.scenario.workload, ScriptWorkload)
                   for p in self.points if p.scenario is not None)


def load_sweep(path: Path) -> Sweep | None:
    """The sweep of the scenario file at ``path``; ``None`` if it has no ``sweep:`` block."""
    source = str(path)
    data = load_scenario_data(path)
    if not isinstance(data, dict) or "sweep" not in data:
        return None
    base = {key: value for key, value in data.items() if key != "sweep"}
    try:
        spec = SweepSpec.model_validate(data["sweep"])
    except ValidationError as err:
        raise scenario_error(source, [(f"sweep.{path}".rstrip("."), message) for path, message
                                      in describe_errors(err.errors(), SweepSpec)]) from None
    for key in spec.parameters:
        _check_key(source, key)
    if spec.mode == "zip":
        lengths = {key: len(values) for key, values in spec.parameters.items()}
        if len(set(lengths.values())) > 1:
            raise ScenarioError(f"{source}: sweep.parameters: zip mode needs lists of one "
                                f"length, got {lengths}; use mode: grid for combinations")
        combos = list(zip(*spec.parameters.values()))
    else:
        combos = list(itertools.product(*spec.parameters.values()))
    name = str(base.get("name") or path.stem)
    points = [_point(index, dict(zip(spec.parameters, combo)), base, source, name)
              for index, combo in enumerate(combos)]
    return Sweep(source, name, base, spec, points)


def _point(index: int, values: dict[str, Any], base: dict[str, Any], source: str,
           name: str) -> SweepPoint:
    data = copy.deepcopy(base)
    data["name"] = f"{name}-p{index}"
    for key, value in values.items():
        set_key(data, key, value)
    try:
        return SweepPoint(index, values, data, parse_scenario(data, source))
    except ScenarioError as error:
        return SweepPoint(index, values, data, None, str(error))


def set_key(data: dict[str, Any], dotted: str, value: Any) -> None:
    """``data[a][b][c] = value`` for ``a.b.c``, making the mappings on the way."""
    *parents, last = dotted.split(".")
    for part in parents:
        child = data.get(part)
        if not isinstance(child, dict):
            child = data[part] = {}
        data = child
    data[last] = value


def _check_key(source: str, dotted: str) -> None:
    """A swept key must name a scenario key (any member of a union, e.g. workload.script)."""
    models: list[type[BaseModel]] = [ScenarioSpec]
    for depth, part in enumerate(dotted.split(".")):
        fields = [model.model_fields[part] for model in models if part in model.model_fields]
        if not fields:
            known = sorted({name for model in models for name in model.model_fields})
            where = ".".join(dotted.split(".")[:depth]) or "the scenario"
            raise ScenarioError(f"{source}: sweep.parameters: {dotted!r}: {where} has no key "
                                f"{part!r}; expected one of {', '.join(known)}")
        models = [model for field in fields for model in _models_in(field.annotation)]
        if not models and depth < dotted.count("."):
            raise ScenarioError(f"{source}: sweep.parameters: {dotted!r}: {part!r} is a value, "
                                "not a section; sweep it as a whole")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]
