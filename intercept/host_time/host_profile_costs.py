"""A rank's host costs from its host profile (``cluster.host``, ``cluster.host_speed``;
``hwmodel.measured.host_profile``): the host-cost table and the Python weights it charges.

A bundled profile is the shipped table of its reference host. A profile file replaces each
mechanism it measured (op families, a collective call on one rank and what an async one costs
beyond a blocking one, synchronisation, autograd's record and node, DTensor's dispatch, the plain
call) with its own cost, and puts the rest of its
reference's table on its host's footing: times the median ratio of its measured op families to
the reference's (the host's CUDA op path against the reference's), or where it measured no
family (no GPU), times the host-speed probe's ``torch_ops`` ratio. The script's Python is
charged at the weights it measured (a line, a call), else the reference's times the probe's
``calls`` ratio, with the reference's cold-code factor. Then every cost is divided by the host's
speed.

No torch import.
"""

import statistics
from dataclasses import replace
from pathlib import Path

from hwmodel.measured.host_profile import HostProfile, resolve_host
from intercept.host_time.host_cost import HostCostTable, load_table
from intercept.host_time.python_work import StepWeights, WorkWeights, weights_for

LAYER_KEYS = {"autograd_record_ns": "autograd_record", "autograd_node_ns": "autograd_node",
              "tensor_subclass_ns": "tensor_subclass"}
"""Measured mechanisms that replace a ``layers_ns`` cost of the table."""


def load_host_profile(profile: str) -> HostProfile:
    """``cluster.host`` as the scenario resolved it: a bundled name or an absolute path."""
    return resolve_host(profile, Path("/"))


def op_scale(profile: HostProfile, table: HostCostTable) -> float:
    """How many times as long as ``table`` (its reference's) this host's op path takes: the
    median ratio over the op families it measured, else the probe's ``torch_ops`` ratio."""
    families = profile.measured.get("families_ns", {})
    if families:
        return statistics.median(ns / table.families_ns[f] for f, ns in families.items())
    return profile.probe_scale("torch_ops")


def table_for_profile(profile: HostProfile) -> HostCostTable:
    """The host-cost table the profile charges (see the module doc)."""
    table = load_table().scaled_to(profile.reference)
    if not profile.bundled:
        measured = profile.measured
        table = table.scaled(op_scale(profile, table), profile.name)
        collectives = {**table.collectives_ns, **measured.get("collectives_ns", {})}
        if "default" not in measured.get("collectives_ns", {}) and "collectives_ns" in measured:
            collectives["default"] = round(statistics.median(measured["collectives_ns"].values()))
        table = replace(
            table,
            script_call_ns=round(measured.get("script_call_ns", table.script_call_ns)),
            families_ns={**table.families_ns, **_ints(measured.get("families_ns", {}))},
            foreach_per_tensor_ns=round(measured.get("foreach_per_tensor_ns",
                                                     table.foreach_per_tensor_ns)),
            collectives_ns=_ints(collectives),
            collective_async_extra_ns=round(measured.get("collective_async_extra_ns",
                                                         table.collective_async_extra_ns)),
            sync_ns={**table.sync_ns, **_ints(measured.get("sync_ns", {}))},
            layers_ns={**table.layers_ns, **{layer: round(measured[key])
                                              for key, layer in LAYER_KEYS.items()
                                              if key in measured}},
            provenance={**table.provenance, "host_profile": str(profile.path)})
    return table if profile.speed == 1.0 else table.scaled(1 / profile.speed, table.reference)


def weights_for_profile(profile: HostProfile) -> StepWeights:
    """The Python weights the profile charges (see the module doc)."""
    weights = weights_for(profile.reference)
    cold_factor = weights.cold.line_ns / weights.hot.line_ns
    if profile.bundled:
        hot = weights.hot
    elif "python_line_ns" in profile.measured and "python_call_ns" in profile.measured:
        hot = WorkWeights(float(profile.measured["python_line_ns"]),
                          float(profile.measured["python_call_ns"]))
    else:
        hot = weights.hot.scaled(profile.probe_scale("calls"))
    hot = hot.scaled(1 / profile.speed)
    return StepWeights(cold=hot.scaled(cold_factor), hot=hot)


def _ints(values: dict[str, float]) -> dict[str, int]:
    return {k: round(v) for k, v in values.items()}
