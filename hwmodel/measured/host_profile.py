"""A host profile: what one GPU host's CPU spends per mechanism, the way a kernel table says what
its GPU spends per kernel (``cluster.host``).

A bundled profile is a reference host of ``host_speed.json`` (``h100-host``, ``h200-host``): the
shipped host-cost tables as they are. A profile file (``phantora-ns3 host-profile --out FILE``)
holds what was measured on one host, each mechanism a microbenchmark, with the host-speed probe
(``intercept.host_time.host_benchmark``) run in the same process beside them; what it could not
measure there (CUDA paths on a machine with no GPU, fitted constants, per-op rows) comes from
its ``reference`` profile, scaled to this host (:attr:`HostProfile.sources` says how, per
mechanism). ``cluster.host_speed`` then says how fast the simulated host runs against its
profile.

Standard library only: the scenario validates a profile file with it, and the ranks build their
host-cost tables from it (``intercept.host_time.host_profile_costs``).
"""

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hwmodel.measured.host_references import BENCHMARK_COMPONENTS, references
from hwmodel.measured.tables import HOST_COSTS

PROFILE_VERSION = 1
FAMILIES = ("view", "alloc", "elementwise", "elementwise_inplace", "factory", "reduction",
            "matmul", "matmul_bias", "norm", "softmax", "attention", "embedding", "cat", "index",
            "foreach")
"""The op families of :func:`family_of`: every one a host-cost table holds, and a profile may
measure."""
MATMUL = frozenset({"mm", "bmm", "matmul", "_scaled_mm", "_int_mm", "dot", "mv"})
MATMUL_BIAS = frozenset({"addmm", "baddbmm", "addbmm", "addmv", "_addmm_activation"})
NORM = frozenset({"native_layer_norm", "native_layer_norm_backward", "layer_norm",
                  "native_group_norm", "native_group_norm_backward", "native_batch_norm",
                  "native_batch_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward",
                  "rms_norm", "cudnn_batch_norm", "_batch_norm_with_update"})
SOFTMAX = frozenset({"_softmax", "_log_softmax", "_softmax_backward_data",
                     "_log_softmax_backward_data", "softmax", "log_softmax"})
REDUCTION = frozenset({"sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean",
                       "std_mean", "prod", "any", "all", "argmax", "argmin", "norm",
                       "linalg_vector_norm", "nll_loss_forward", "nll_loss_backward",
                       "nll_loss2d_forward", "logsumexp", "cumsum", "count_nonzero"})
EMBEDDING = frozenset({"embedding", "embedding_dense_backward", "embedding_backward"})
CAT = frozenset({"cat", "stack", "_cat"})
INDEX = frozenset({"index", "index_select", "index_put_", "_index_put_impl_", "gather",
                   "scatter", "scatter_", "scatter_add", "scatter_add_", "index_add_",
                   "index_add", "index_copy_", "masked_fill_", "masked_fill", "masked_scatter_",
                   "take", "nonzero", "masked_select", "unique", "_unique2", "bincount"})
FACTORY = frozenset({"zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "fill_",
                     "zero_", "arange", "rand", "randn", "randint", "rand_like", "randn_like",
                     "normal_", "uniform_", "bernoulli_", "random_", "eye", "linspace",
                     "scalar_tensor"})
ALLOC = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                   "resize_"})
FUSED_OPTIMIZERS = frozenset({"_fused_adamw_", "_fused_adam_", "_fused_sgd_", "_fused_adagrad_"})


def family_of(name: str) -> str:
    """The host-cost family of an aten op that launches a kernel, by its name without the
    ``aten::`` namespace and overload (``mm``, ``_foreach_add_``): how the rank side charges
    an op (``intercept.host_time.host_cost``) and ``calibrate --host-out`` sorts a trace's."""
    if name.startswith("_foreach_") or name in FUSED_OPTIMIZERS:
        return "foreach"
    if "attention" in name or "scaled_dot_product" in name:
        return "attention"
    for family, names in (("matmul", MATMUL), ("matmul_bias", MATMUL_BIAS), ("norm", NORM),
                          ("softmax", SOFTMAX), ("reduction", REDUCTION),
                          ("embedding", EMBEDDING), ("cat", CAT), ("index", INDEX),
                          ("factory", FACTORY), ("alloc", ALLOC)):
        if name in names:
            return family
    return "elementwise_inplace" if name.endswith("_") else "elementwise"


COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "default")
SYNC_CALLS = ("device", "stream", "event", "query", "record_event")
"""The calls that wait on or mark the GPU's progress: the keys of a table's ``sync_ns``."""
SCALARS_NS = ("script_call_ns", "foreach_per_tensor_ns", "autograd_record_ns", "autograd_node_ns",
              "tensor_subclass_ns", "collective_async_extra_ns")
PYTHON = ("python_line_ns", "python_call_ns")
MEASURED_KEYS = (*SCALARS_NS, *PYTHON, "families_ns", "collectives_ns", "sync_ns")
"""The mechanisms a profile file's ``measured`` block may hold (each optional)."""
_DICT_KEYS = {"families_ns": FAMILIES, "collectives_ns": COLLECTIVES, "sync_ns": SYNC_CALLS}


class HostProfileError(ValueError):
    """A profile file that cannot be used; the message names the file, the key and the fix."""


@dataclass(frozen=True)
class HostProfile:
    """One host's costs per mechanism (see the module doc)."""

    name: str
    reference: str
    """The bundled profile that every cost not measured here comes from."""
    probe_ns: Mapping[str, int]
    """The host-speed benchmark on this host, per component."""
    measured: Mapping[str, Any] = field(default_factory=dict)
    """Costs measured on this host (:data:`MEASURED_KEYS`), in this host's ns."""
    speed: float = 1.0
    """``cluster.host_speed``: the simulated host runs this many times as fast as the profile."""
    path: Path | None = None
    """The profile file, once written or read."""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    bundled: bool = False
    """A bundled profile: its reference host's shipped costs as they are."""

    def probe_scale(self, component: str) -> float:
        """How many times as long this host takes as its reference on one component of the
        host-speed probe (1.0 for a bundled profile)."""
        ref = references().hosts[self.reference].components_ns
        return self.probe_ns[component] / ref[component]

    def at_speed(self, speed: float) -> "HostProfile":
        """The same profile on a host ``speed`` times as fast."""
        if not (speed > 0 and math.isfinite(speed)):
            raise HostProfileError(f"host speed {speed!r}: must be a positive number "
                                   "(1.0 is the profile's own speed)")
        return replace(self, speed=speed)

    def sources(self) -> dict[str, str]:
        """Per mechanism, where its cost comes from: ``measured on <name>`` or the reference's,
        scaled (how)."""
        if self.bundled:
            return {"all": f"bundled reference {self.name}"}
        out = {key: f"measured on {self.name}" for key in self.measured}
        op_scale = "the measured op families' median ratio" if "families_ns" in self.measured \
            else f"the probe's torch_ops ({self.probe_scale('torch_ops'):.3f}x)"
        for key in ("families_ns", "collectives_ns", "sync_ns"):
            if key in self.measured:
                missing = [k for k in _DICT_KEYS[key] if k not in self.measured[key]]
                if missing:
                    out[key] += f"; {', '.join(missing)} from {self.reference} x {op_scale}"
        out["other host costs"] = (f"{self.reference} x {op_scale} (per-op rows, group "
                                   "collective calls, first-seen GEMM shapes, compiled graphs)")
        if not set(PYTHON) <= set(self.measured):
            out["python"] = (f"{self.reference} x the probe's calls "
                             f"({self.probe_scale('calls'):.3f}x)")
        out["python cold-code factor"] = f"{self.reference} (fitted)"
        if "probe" in self.provenance:
            out["host-speed probe"] = str(self.provenance["probe"])
        for key, why in self.provenance.get("left_out", {}).items():
            out[key] = f"{self.reference}'s ({why})"
        return out

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``host`` block."""
        return {"profile": self.name, "path": None if self.path is None else str(self.path),
                "bundled": self.bundled,
                "reference": self.reference, "speed": self.speed,
                "probe_ns": dict(self.probe_ns), "sources": self.sources()}

    def to_json(self) -> dict[str, Any]:
        """The file form (:func:`load_profile` reads it back)."""
        return {"host_profile_version": PROFILE_VERSION, "name": self.name,
                "reference": self.reference, "probe_ns": dict(self.probe_ns),
                "measured": dict(self.measured), "provenance": dict(self.provenance)}


def bundled_names() -> tuple[str, ...]:
    return tuple(sorted(references().hosts))


def reference_families_ns(reference: str) -> dict[str, float]:
    """The shipped host-cost table's op families (``families_ns``) on bundled host
    ``reference``, scaled from the table's own host as the ranks scale it."""
    data = json.loads(HOST_COSTS.path.read_text())
    factor = references().op_factor(str(data["reference"]), reference)
    return {family: ns * factor for family, ns in data["families_ns"].items()}


def bundled(name: str) -> HostProfile:
    """The bundled profile ``name`` (a reference host)."""
    hosts = references().hosts
    if name not in hosts:
        raise HostProfileError(f"unknown host profile {name!r}: give one of "
                               f"{', '.join(bundled_names())} or a profile file's path "
                               "(phantora-ns3 host-profile --out FILE)")
    return HostProfile(name, name, dict(hosts[name].components_ns), bundled=True)


def profile_from_json(data: Mapping[str, Any], source: str,
                      path: Path | None = None) -> HostProfile:
    """A profile file's content, validated; every problem names ``source``, the key and the
    fix."""
    def bad(key: str, problem: str) -> HostProfileError:
        return HostProfileError(f"{source}: {key}: {problem} (write the file with "
                                "phantora-ns3 host-profile --out FILE)")

    if data.get("host_profile_version") != PROFILE_VERSION:
        raise bad("host_profile_version", f"is {data.get('host_profile_version')!r}; this "
                  f"version reads {PROFILE_VERSION}")
    for key in ("name", "reference", "probe_ns", "measured"):
        if key not in data:
            raise bad(key, "missing")
    if data["reference"] not in references().hosts:
        raise bad("reference", f"{data['reference']!r} is no bundled profile; expected one of "
                  f"{', '.join(bundled_names())}")
    probe = data["probe_ns"]
    if not isinstance(probe, Mapping) or set(probe) != set(BENCHMARK_COMPONENTS):
        raise bad("probe_ns", f"needs exactly {', '.join(BENCHMARK_COMPONENTS)}")
    measured = data["measured"]
    if not isinstance(measured, Mapping):
        raise bad("measured", "must be a mapping of mechanism to cost")
    unknown = set(measured) - set(MEASURED_KEYS)
    if unknown:
        raise bad(f"measured.{sorted(unknown)[0]}", f"unknown mechanism; expected some of "
                  f"{', '.join(MEASURED_KEYS)}")
    for key, value in [*probe.items(), *((k, v) for k, v in measured.items()
                                         if k not in _DICT_KEYS)]:
        if not isinstance(value, (int, float)) or not value > 0:
            raise bad(key, f"{value!r} is not a positive number of ns")
    for key, allowed in _DICT_KEYS.items():
        entries = measured.get(key, {})
        if not isinstance(entries, Mapping):
            raise bad(f"measured.{key}", "must be a mapping")
        for name, value in entries.items():
            if name not in allowed:
                raise bad(f"measured.{key}.{name}", f"unknown; expected one of "
                          f"{', '.join(allowed)}")
            if not isinstance(value, (int, float)) or not value > 0:
                raise bad(f"measured.{key}.{name}", f"{value!r} is not a positive number of ns")
    return HostProfile(str(data["name"]), str(data["reference"]),
                       {k: int(v) for k, v in probe.items()}, dict(measured), path=path,
                       provenance=dict(data.get("provenance", {})))


def load_profile(path: Path) -> HostProfile:
    """A profile file, validated (:func:`profile_from_json`)."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise HostProfileError(f"{path}: cannot read the host profile ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise HostProfileError(f"{path}: not JSON ({exc}); write it with phantora-ns3 "
                               "host-profile --out FILE") from exc
    if not isinstance(data, Mapping):
        raise HostProfileError(f"{path}: a host profile is a JSON object")
    return profile_from_json(data, str(path), path.resolve())


def resolve_host(value: str, base_dir: Path) -> HostProfile:
    """``cluster.host``: a bundled profile's name, or a profile file's path (relative to
    ``base_dir``, the scenario's folder)."""
    if value in references().hosts:
        return bundled(value)
    path = Path(value)
    path = path if path.is_absolute() else base_dir / path
    if not path.exists():
        raise HostProfileError(f"{value!r} is neither a bundled host profile "
                               f"({', '.join(bundled_names())}) nor a file ({path} does not "
                               "exist)")
    return load_profile(path)
