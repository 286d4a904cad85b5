"""Scenario files: load ``scenario.yaml``, validate every key, resolve every default.

``load_scenario("x.yaml")`` returns a :class:`Scenario` whose values are resolved (ints in
bytes and ns, floats in Gbit/s, defaults filled). Anything wrong raises one
:class:`~hwmodel.errors.ScenarioError` with a line per problem::

    x.yaml: cluster.network.link_bandwidth: got "400G"; expected a rate with a unit, e.g. ...

Modules: :mod:`.schema` (what users write: every key declared once), :mod:`.keys` (how a key
is declared, read back for :mod:`.reference`, the key reference of ``docs/scenarios.md``),
:mod:`.quantities` (rates, durations, sizes and their units), :mod:`.model` (the resolved
result), :mod:`.resolve` (defaults and cross-key checks), :mod:`.faults` (the faults' checks),
:mod:`.cluster_graph` (the topology a resolved cluster describes), :mod:`.messages` (error
wording), :mod:`.loader` (file and YAML handling).
"""

from phantora.scenario.loader import load_scenario, parse_scenario
from phantora.scenario.model import (
    DTYPE_BYTES,
    ClusterConfig,
    CollectivesWorkload,
    FatTreeFabric,
    LeafSpineFabric,
    NcclOverrides,
    NetworkConfig,
    RailOptimizedFabric,
    Scenario,
    ScriptWorkload,
    SimulationConfig,
)

__all__ = [
    "DTYPE_BYTES",
    "ClusterConfig",
    "CollectivesWorkload",
    "FatTreeFabric",
    "LeafSpineFabric",
    "NcclOverrides",
    "NetworkConfig",
    "RailOptimizedFabric",
    "Scenario",
    "ScriptWorkload",
    "SimulationConfig",
    "load_scenario",
    "parse_scenario",
]
