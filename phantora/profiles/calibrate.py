"""Kernel times from real PyTorch profiler traces of one GPU, as a calibration
(:class:`~hwmodel.compute.calibrated.Calibration`): what ``phantora-ns3 calibrate`` builds.

Every GPU kernel launched inside an aten op call counts for the call the simulator's rank side
dispatches (:func:`~phantora.profiles.launch_keys.dispatched_call`: the ``aten::_to_copy``
around a cast's ``aten::copy_``). A call's time is its kernels' durations plus the front end's
gap between them (``KERNEL_GAP_NS``: the engine adds that gap before every simulated kernel,
so a call of three real kernels owes two more). Each call is keyed as the compute model keys a
launch (:func:`~phantora.profiles.launch_keys.launch_spec`) and written as a row of the measured
tables' sections (``matmul``, ``attention``, ``conv``, ``grouped``, ``memory``); repeats of a
key, over layers, steps and traces, give one row with their median time. Host copies and NCCL
kernels are left out (the simulator has its own models of both), and so are calls the trace
cannot key (tensor-list arguments: the optimizers' ``_foreach_``/``_fused_`` ops, ``cat``) and
kernels no aten op launched (a compiled graph's Triton kernels, CUDA graph replays): the
roofline fitted to the rows (:meth:`EfficiencyCurves.fit`) costs those. Its memory curve is
the typical op's share of the HBM rate per size: the median over ops (one row each per power of
two of bytes), not over rows, so that a model with many distinct batch-norm shapes does not
make every op as slow as a batch norm; rows faster than the HBM rate (an ``nll_loss_backward``,
which skips an input its bytes count, or data served from L2) say nothing of it and are left
out of the fit. The element-wise kernels Inductor generates, which no trace gives bytes of,
take the curve of the ops that only stream their bytes (:data:`STREAMING_OPS`).
"""

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hwmodel.measured.gpu import KERNEL_GAP_NS
from hwmodel.catalogue import CATALOGUE, GpuSpec
from hwmodel.compute.calibrated import Calibration
from hwmodel.compute.fitted import MEMORY_SECTIONS, EfficiencyCurves
from hwmodel.compute.ops import SAME_KERNEL_AS, base_name
from hwmodel.compute.spec import STRIDED, Family, KernelSpec
from hwmodel.compute.table import KernelTable, MeasuredRow, conv_pass
from hwmodel.errors import ProfileError
from phantora.profiles.families import HOST_TRANSFERS
from phantora.profiles.kineto import RECORD_HINT, KernelEvent, RankTrace
from phantora.profiles.launch_keys import POINTWISE, dispatched_call, launch_spec

SECTIONS: dict[Family, str] = {
    Family.MATMUL: "matmul", Family.ATTENTION_FWD: "attention",
    Family.ATTENTION_BWD: "attention", Family.CONV: "conv",
    Family.GROUPED_MATMUL: "grouped", Family.OTHER: "memory"}
"""The table section a launch of each family is a row of."""

STREAMING_OPS = POINTWISE | frozenset({"_to_copy", "copy", "clone", "fill", "zero"})
"""Memory-bound ops that only stream their bytes: what the roofline takes the element-wise
kernels Inductor generates for (:attr:`EfficiencyCurves.streaming`)."""

TOP_LEFT_OUT = 8
"""Ops listed per trace whose GPU time no row holds (most time first)."""


@dataclass
class _TraceTally:
    """What one trace gave: for the calibration's ``traces`` list."""

    path: str
    kernel_ns: int = 0
    """GPU time of every kernel launched inside an aten op (host copies, NCCL excepted)."""
    used_ns: int = 0
    calls: int = 0
    left_out_ns: Counter[str] = field(default_factory=Counter)

    def document(self) -> dict[str, Any]:
        return {"path": self.path, "calls": self.calls, "kernel_ns": self.kernel_ns,
                "used_ns": self.used_ns,
                "used_share": round(self.used_ns / self.kernel_ns, 4) if self.kernel_ns else 0.0,
                "left_to_roofline_ns": dict(self.left_out_ns.most_common(TOP_LEFT_OUT))}


def calibrate(traces: Sequence[RankTrace], gpu: GpuSpec) -> Calibration:
    """The calibration of ``gpu`` from ``traces``; :class:`ProfileError` for a trace of another
    GPU, and where the traces leave nothing to build a table or fit the roofline from."""
    for trace in traces:
        _check_device(trace, gpu)
    times: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    in_traces: dict[tuple[Any, ...], set[int]] = defaultdict(set)
    specs: dict[tuple[Any, ...], KernelSpec] = {}
    tallies = []
    for index, trace in enumerate(traces):
        tally = _TraceTally(str(trace.path))
        for spec, duration_ns, name in _calls(trace):
            tally.kernel_ns += duration_ns
            if spec is None:
                tally.left_out_ns[name] += duration_ns
                continue
            key = _key(spec)
            specs.setdefault(key, spec)
            times[key].append(duration_ns)
            in_traces[key].add(index)
            tally.used_ns += duration_ns
            tally.calls += 1
        tallies.append(tally)
    if not times:
        raise ProfileError(
            f"{', '.join(str(t.path) for t in traces)}: no kernel launched by an aten op whose "
            "inputs the trace records (record_shapes=True), so nothing to calibrate from; "
            f"{RECORD_HINT}")
    rows = tuple(_row(specs[key], durations, len(in_traces[key]), gpu)
                 for key, durations in sorted(times.items(), key=lambda item: repr(item[0])))
    return Calibration(gpu.name, gpu.marketing_name, rows, _fit(rows, gpu, traces),
                       tuple(tally.document() for tally in tallies))


def _check_device(trace: RankTrace, gpu: GpuSpec) -> None:
    if trace.device_name == gpu.marketing_name:
        return
    if trace.device_name is None:
        raise ProfileError(f"{trace.path}: the trace names no GPU (no deviceProperties), so it "
                           f"cannot be told to be of {gpu.name} ({gpu.marketing_name}); "
                           f"{RECORD_HINT}")
    match = [key for key, spec in CATALOGUE.items() if spec.marketing_name == trace.device_name]
    hint = (f"calibrate it with --gpu {match[0]}" if match else
            "the catalogue has no GPU of that name (hwmodel/catalogue.py)")
    raise ProfileError(f"{trace.path}: recorded on {trace.device_name}, not the "
                       f"{gpu.name} ({gpu.marketing_name}) named by --gpu; {hint}")


def _calls(trace: RankTrace) -> list[tuple[KernelSpec | None, int, str]]:
    """Per dispatched op call with GPU kernels: its launch as keyed (None where the trace
    cannot key it), its GPU time and its op's name. Calls with a host copy or an NCCL kernel
    are left out."""
    grouped: dict[Any, list[KernelEvent]] = defaultdict(list)
    for kernel in trace.kernels:
        call = dispatched_call(kernel.calls)
        if call is not None:  # a trace without External ids: each kernel a call of its own
            grouped[call.external_id if call.external_id is not None
                    else ("kernel", kernel.correlation)].append(kernel)
    found = []
    for kernels in grouped.values():
        if any(k.collective is not None or k.name.startswith(HOST_TRANSFERS) for k in kernels):
            continue
        call = dispatched_call(kernels[0].calls)
        assert call is not None
        duration_ns = (sum(k.duration_ns for k in kernels)
                       + (len(kernels) - 1) * KERNEL_GAP_NS.value)
        spec = launch_spec(call)
        found.append((spec if spec is not None and spec.family in SECTIONS else None,
                      duration_ns, call.name))
    return found


def _key(spec: KernelSpec) -> tuple[Any, ...]:
    """What makes two launches one row: the model's key of the launch."""
    return (_section(spec), _aten_ops(spec), spec.dtype, spec.dims, spec.variant, spec.bytes,
            spec.flops)


def _section(spec: KernelSpec) -> str:
    return SECTIONS[spec.family]


def _aten_ops(spec: KernelSpec) -> str:
    """The ``aten_ops`` column, as the table reads it: batched products are ``bmm`` rows,
    element-wise ops under the measured op whose kernel they launch (``zeros`` -> ``zero``)."""
    op = base_name(spec.name)
    if spec.family is Family.MATMUL:
        return "bmm" if op in ("bmm", "baddbmm") else op
    return SAME_KERNEL_AS.get(op, op) if spec.family is Family.OTHER else op


def _row(spec: KernelSpec, durations: list[int], traces: int, gpu: GpuSpec) -> dict[str, Any]:
    median_ns = statistics.median(durations)
    row = {"gpu": gpu.marketing_name, "section": _section(spec), "op": _op_column(spec),
           "dtype": spec.dtype, "cache": "cold", "shape": _shape(spec), "flops": spec.flops,
           "bytes": spec.bytes, "time_us": round(median_ns / 1e3, 3),
           "time_min_us": round(min(durations) / 1e3, 3),
           "time_max_us": round(max(durations) / 1e3, 3),
           "tflops": round(spec.flops / median_ns / 1e3, 3),
           "gbs": round(spec.bytes / median_ns, 3), "repeats": len(durations), "calls": 1,
           "sets": traces, "aten_ops": _aten_ops(spec)}
    return row


def _op_column(spec: KernelSpec) -> str:
    """The ``op`` column: what the row times, in the measured tables' words."""
    family = spec.family
    if family in (Family.ATTENTION_FWD, Family.ATTENTION_BWD):
        return "sdpa_bwd" if family is Family.ATTENTION_BWD else "sdpa_fwd"
    if family is Family.CONV:
        return f"conv_{conv_pass(spec.name, spec.dims, spec.flops)}"
    return base_name(spec.name)


def _shape(spec: KernelSpec) -> dict[str, Any]:
    """The ``shape`` column, in the keys :meth:`MeasuredRow.parse` reads per section."""
    family, dims = spec.family, spec.dims
    if family is Family.MATMUL:
        batch, m, n, k = dims
        shape: dict[str, Any] = {"m": m, "n": n, "k": k, "layout": spec.variant}
        return {"batch": batch, **shape} if _aten_ops(spec) == "bmm" else shape
    if family in (Family.ATTENTION_FWD, Family.ATTENTION_BWD):
        batch, heads, kv_heads, seq_q, seq_kv, head_dim = dims
        # "default": the backend this GPU's PyTorch picked for the traced script
        return {"batch": batch, "heads": heads, "kv_heads": kv_heads, "seq": seq_q,
                "seq_kv": seq_kv, "head_dim": head_dim, "causal": spec.variant == "causal",
                "backend": "default"}
    if family is Family.CONV:
        n, c, k, size, kernel, stride = dims
        return {"n": n, "c": c, "k": k, "size": size, "kernel": kernel, "stride": stride,
                "layout": spec.variant}
    if family is Family.GROUPED_MATMUL:
        experts, rows, n, k = dims
        return {"experts": experts, "rows": rows, "n": n, "k": k, "direction": spec.variant}
    return {"layout": STRIDED} if spec.variant == STRIDED else {}


def _fit(rows: Sequence[dict[str, Any]], gpu: GpuSpec,
         traces: Sequence[RankTrace]) -> EfficiencyCurves:
    """The roofline's efficiency curves fitted to the FLOP-bound rows and the typical
    memory-bound op; :class:`ProfileError` where there are none of either."""
    table = KernelTable([MeasuredRow.parse(row) for row in _typical_memory_rows(rows, gpu)])
    sections = {row.section for row in table.rows}
    missing = [what for what, kinds in (("matrix products or attention", {"matmul", "attention"}),
                                        ("memory-bound ops", MEMORY_SECTIONS))
               if not sections & kinds]
    if missing:
        raise ProfileError(f"{', '.join(str(t.path) for t in traces)}: the traces hold no "
                           f"{' and no '.join(missing)} with recorded shapes, so the roofline "
                           "for what they lack cannot be fitted; add a trace of a script that "
                           "runs them")
    return EfficiencyCurves.fit(table, gpu, STREAMING_OPS)



def _typical_memory_rows(rows: Sequence[dict[str, Any]],
                         gpu: GpuSpec) -> list[dict[str, Any]]:
    """The rows with the memory-bound ones thinned to one per op and power of two of bytes
    (the op's median achieved bandwidth there), so the fit's median per size is over ops;
    those faster than ``gpu``'s HBM rate left out."""
    kept: list[dict[str, Any]] = []
    memory: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["section"] not in MEMORY_SECTIONS:
            kept.append(row)
        elif row["gbs"] <= gpu.hbm_gbs:
            memory[(row["aten_ops"], round(math.log2(max(row["bytes"], 1))))].append(row)
    for group in memory.values():
        group.sort(key=lambda row: row["gbs"])
        kept.append(group[len(group) // 2])
    return kept
