"""One rank's PyTorch profiler trace (Kineto's Chrome-trace JSON) as GPU kernels, each with the
aten op that launched it, collectives with their op and size, and the profiled steps.

The format (``torch.profiler.profile(...).export_chrome_trace``): ``traceEvents`` of complete
events (``ph: X``, ``ts``/``dur`` in microseconds) by category: ``kernel``, ``gpu_memcpy`` and
``gpu_memset`` on the GPU (``args.stream``, ``args.correlation``); ``cuda_runtime`` and
``cuda_driver`` calls on host threads (``cudaLaunchKernel`` & co., ``args.correlation``: the
GPU activity they started); ``cpu_op`` (aten ops with ``Input Dims``, ``Input type``,
``Concrete Inputs`` when recorded with ``record_shapes=True``) and ``user_annotation``
(``record_function`` ranges: ``ProfilerStep#N``, ``Optimizer.step#AdamW.step``,
``nccl:all_reduce``, ``record_param_comms``). ``distributedInfo`` names the rank and world
size, ``deviceProperties`` the GPUs. Steps are the ``ProfilerStep#N`` ranges of a stepped
profiler; a trace of a whole run (no ``prof.step()``) is cut at its optimizer steps.

A kernel's op is the innermost aten op (a namespaced ``cpu_op`` such as ``aten::mm``, not a
wrapper like ``autograd::engine::...``) that encloses, on the launching thread, the runtime call
with the kernel's correlation id. Host ranges are properly nested per thread, so one sort and
one sweep with a stack per thread finds it for every launch: O(n log n) on a 50 MB trace.
"""

from __future__ import annotations

import gzip
import json
import re
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwmodel.errors import ProfileError

RECORD_HINT = ("record one with: with torch.profiler.profile(activities=[ProfilerActivity.CPU, "
               "ProfilerActivity.CUDA], record_shapes=True) as prof: <the training loop>, then "
               "prof.export_chrome_trace(f\"rank{rank}.json\"), one file a rank")
"""How to get a trace this reader can use; every refusal says it."""

DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
HOST_RANGE_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
WRAPPER_NAMESPACES = frozenset({"autograd", "profiler", "torch", "cuda", "c10"})
"""Namespaced host ranges that are not ops launching kernels (``autograd::engine::...``)."""

PROFILER_NS_PER_EVENT = 4_000
"""Host time the profiler adds per host event it records (a CPU op, nested ones included, or a
CUDA runtime or driver call), rounded: the median (4.4 us) over the 16 one-H100 traces of
``scripts/data/traces/h100x1/`` of (the profiled step - the same script's unprofiled median
step, ``scripts/data/steps/h100x1/``) / the step's host events. The cases range from 2.5 to
12 us, 28 us on the 0.5M-parameter CI model: good to a factor of 2 to 3
(``scripts/measure/fit_profiler_cost.py`` prints them)."""

_STEP = re.compile(r"ProfilerStep#(\d+)$")
PROFILER_STEPS = "ProfilerStep#N"
"""The cut of a trace whose profiler was stepped (``prof.step()``, a schedule)."""
_OPTIMIZER_STEP = re.compile(r"Optimizer\.step#\w+\.step$")
"""The range ``torch.optim`` records around every ``Optimizer.step``
(``Optimizer.step#AdamW.step``); its step hooks, where the simulator ends its steps, run in it."""

DTYPE_BYTES: dict[str, int] = {
    "double": 8, "float": 4, "float32": 4, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "long": 8, "int64": 8, "int": 4, "int32": 4, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "complexfloat": 8, "complexdouble": 16,
}
"""Element size by the dtype names the profiler writes (``BFloat16``, ``Float``, ``c10::Half``)."""

_COLLECTIVE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
    ("alltoall", "all_to_all"), ("broadcast", "broadcast"), ("reduce", "reduce"),
    ("send", "send"), ("recv", "recv"), ("barrier", "all_reduce"), ("gather", "all_to_allv"),
    ("scatter", "all_to_allv"),
)
"""Squashed collective names (PyTorch's ``Collective name`` or NCCL's kernel name, lower case
without ``_``) -> the simulator's ops (``wire.ops.IssuedOp``). As the simulator issues them: a
barrier is a one-element all-reduce, gather and scatter are all_to_allv with one column or
row. Longer names first where one is the prefix of another."""

NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_")


@dataclass(frozen=True)
class OpCall:
    """One call of an aten op that encloses a kernel's launch, with its inputs as recorded."""

    name: str
    """``aten::mm``."""
    input_dims: tuple = ()
    """``args["Input Dims"]``, lists turned into tuples: ``((8192, 768), (768, 2304))``."""
    input_types: tuple = ()
    """``args["Input type"]``: ``("c10::BFloat16", "c10::BFloat16")``."""
    concrete_inputs: tuple = ()
    """``args["Concrete Inputs"]``: scalars as strings, ``""`` for tensors."""
    input_strides: tuple = ()
    """``args["Input Strides"]``, like :attr:`input_dims`: ``((768, 1), (1, 768))``."""
    external_id: int | None = field(default=None, compare=False)
    """``args["External id"]``: which call of the op this is (kernels with the same id were
    launched by one call); not part of what two calls are compared by."""


@dataclass(frozen=True)
class CollectiveInfo:
    """What an NCCL kernel did, from its own args or the ``record_param_comms`` range that
    launched it."""

    op: str
    """``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``, ``reduce``,
    ``all_to_all``, ``all_to_allv``, ``send``, ``recv``; ``send_recv`` for a p2p kernel whose
    launch recorded no more."""
    bytes: int | None
    """Message size in the nccl-tests convention (the larger of the input and output element
    counts times the element size), None where the trace does not say."""
    group_size: int | None


@dataclass(frozen=True)
class KernelEvent:
    """One GPU activity: a kernel, or a copy or fill (``Memcpy DtoD``, ``Memset``)."""

    name: str
    stream: int
    start_ns: int
    duration_ns: int
    correlation: int
    collective: CollectiveInfo | None
    """For NCCL kernels."""
    launch_ns: int | None = None
    """When the host called the launch (the runtime event's start); None if not in the trace."""
    calls: tuple[OpCall, ...] = ()
    """Every aten op call enclosing the launch, innermost first (``aten::_flash_attention_
    forward``, ``aten::_scaled_dot_product_flash_attention``, ...): another tool may name the
    kernel by an outer op. Empty where no aten op encloses the launch (a compiled graph's
    Triton kernel, a CUDA graph replay, NCCL)."""
    device: int | None = None

    @property
    def op(self) -> OpCall | None:
        """The launching (innermost) aten op, or None."""
        return self.calls[0] if self.calls else None

    @property
    def enclosing_ops(self) -> tuple[str, ...]:
        """The names of :attr:`calls`."""
        return tuple(call.name for call in self.calls)

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


@dataclass(frozen=True)
class HostOp:
    """A top-level host op (no other ``cpu_op`` encloses it on its thread)."""

    name: str
    thread: int
    start_ns: int
    duration_ns: int


@dataclass(frozen=True)
class HostCall:
    """A host range that encloses no ``cpu_op`` on its thread: a leaf op (``aten::mm``) or a CUDA
    runtime or driver call (``cudaLaunchKernel``)."""

    name: str
    thread: int
    start_ns: int
    duration_ns: int
    runtime_calls: tuple[str, ...] = ()
    """For a leaf op: the CUDA runtime and driver calls made inside it (its launches), in
    order."""


@dataclass
class RankTrace:
    """One rank's trace."""

    path: Path
    rank: int | None
    world_size: int | None
    device_name: str | None
    kernels: list[KernelEvent]
    """Every GPU activity, NCCL kernels, copies and fills included, by start."""
    steps: list[tuple[int, int]]
    """``(start_ns, end_ns)`` of each profiled step, in order, cut as :attr:`step_cut` says."""
    ops: list[HostOp] = field(default_factory=list)
    """Top-level host ops, by start."""
    step_numbers: list[int] = field(default_factory=list)
    """The ``N`` of each of :attr:`steps`, which covers training step N + 1: ``ProfilerStep#N``'s,
    or the count of the trace's optimizer steps before the step."""
    step_cut: str = ""
    """What :attr:`steps` are cut at: :data:`PROFILER_STEPS`; else, in a trace without them,
    the ends of the optimizer's ranges (``Optimizer.step#AdamW.step``), step N + 1 running from
    the end of the trace's N-th to the end of its N + 1-th; "" where a trace has neither (and
    so no steps)."""
    op_starts_ns: list[int] = field(default_factory=list)
    """When each recorded ``cpu_op`` began (nested ones too), sorted."""
    runtime_starts_ns: list[int] = field(default_factory=list)
    """When each recorded CUDA runtime or driver call began, sorted."""
    leaf_ops: list[HostCall] = field(default_factory=list)
    """Ops (namespaced ``cpu_op`` ranges, not wrappers) that enclose no other ``cpu_op``, with
    the runtime calls inside them, by start: what one dispatched op costs the host."""
    runtime_calls: list[HostCall] = field(default_factory=list)
    """Every CUDA runtime or driver call, by start."""

    def host_events(self, start_ns: int, end_ns: int) -> tuple[int, int]:
        """How many CPU ops and CUDA runtime or driver calls the profiler recorded starting in
        ``[start_ns, end_ns)``."""
        return (bisect_left(self.op_starts_ns, end_ns) - bisect_left(self.op_starts_ns, start_ns),
                bisect_left(self.runtime_starts_ns, end_ns)
                - bisect_left(self.runtime_starts_ns, start_ns))


def read_trace(path: Path) -> RankTrace:
    """Read a Kineto trace (``.json`` or ``.json.gz``); :class:`ProfileError` (a ValueError)
    naming the file when it is not one or holds no GPU kernels."""
    document = _load(path)
    events = [e for e in document["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    device_events = [e for e in events if e.get("cat") in DEVICE_CATEGORIES]
    if not device_events:
        raise ProfileError(f"{path}: the trace holds no GPU kernels (recorded without "
                           f"ProfilerActivity.CUDA, or on a machine without a GPU); {RECORD_HINT}")
    launches = _launch_contexts(events)
    kernels = sorted((_kernel(e, launches) for e in device_events),
                     key=lambda k: (k.start_ns, k.stream))
    step_cut, step_ranges = _steps(events)
    info = document.get("distributedInfo") or {}
    devices = document.get("deviceProperties") or []
    return RankTrace(
        path=path, rank=_int(info.get("rank")), world_size=_int(info.get("world_size")),
        device_name=str(devices[0].get("name")) if devices and devices[0].get("name") else None,
        kernels=kernels, steps=[(start, end) for _, start, end in step_ranges],
        ops=_top_level_ops(events), step_numbers=[number for number, _, _ in step_ranges],
        step_cut=step_cut,
        op_starts_ns=sorted(_ns(e["ts"]) for e in events if e.get("cat") == "cpu_op"),
        runtime_starts_ns=sorted(_ns(e["ts"]) for e in events
                                 if e.get("cat") in LAUNCH_CATEGORIES),
        **_host_calls(events))


def _steps(events: list[dict[str, Any]]) -> tuple[str, list[tuple[int, int, int]]]:
    """``(step_cut, [(N, start_ns, end_ns)])`` (:attr:`RankTrace.step_cut`): the
    ``ProfilerStep#N`` ranges; else windows between the ends of consecutive optimizer steps,
    since the simulator ends a step at every optimizer step's hooks; else none."""
    profiler: list[tuple[int, int, int]] = []
    optimizer: dict[tuple[int, int], str] = {}  # (end, start) -> name: a range recorded twice
    for e in events:
        if e.get("cat") not in HOST_RANGE_CATEGORIES:
            continue
        name = str(e.get("name", ""))
        start, end = _ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0))
        if m := _STEP.match(name):
            profiler.append((int(m.group(1)), start, end))
        elif _OPTIMIZER_STEP.match(name):
            optimizer[(end, start)] = name
    if profiler:
        return PROFILER_STEPS, sorted(profiler)
    ranges = sorted(optimizer)
    if len(ranges) < 2:
        return "", []
    names = ", ".join(dict.fromkeys(optimizer[key] for key in ranges))
    return names, [(n, ranges[n - 1][0], ranges[n][0]) for n in range(1, len(ranges))]


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ProfileError(f"{path}: not a readable Kineto trace ({error}); {RECORD_HINT}") from None
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise ProfileError(f"{path}: not a Kineto trace (no traceEvents list); {RECORD_HINT}")
    return document


def _ns(microseconds: float | int | str) -> int:
    return round(float(microseconds) * 1000)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _tuples(value: Any) -> Any:
    """Lists (nested) -> tuples, so recorded shapes are hashable."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _is_op(name: str) -> bool:
    """Whether a host range is an op that launches kernels (``aten::mm``, ``fsdp::chunk_cat``)
    rather than a profiler or autograd wrapper."""
    namespace, sep, _ = name.partition("::")
    return bool(sep) and namespace not in WRAPPER_NAMESPACES and " " not in namespace


@dataclass(frozen=True)
class _Launch:
    """What was open on the host thread when a launch was called."""

    ts_ns: int
    calls: tuple[OpCall, ...]
    comms: dict[str, Any] | None
    """Args of the innermost enclosing range that names a collective (``record_param_comms``)."""


def _launch_contexts(events: list[dict[str, Any]]) -> dict[int, _Launch]:
    """Correlation id -> the host context of its launch call: per thread, one sweep over host
    ranges (sorted by start, outer before inner) and launches (by time) with a stack of the
    ranges open."""
    per_thread: dict[tuple[Any, Any], list[tuple[int, int, int, dict[str, Any]]]] = defaultdict(list)
    for e in events:
        category = e.get("cat")
        if category in HOST_RANGE_CATEGORIES:
            start = _ns(e["ts"])
            per_thread[(e.get("pid"), e.get("tid"))].append(
                (start, 0, -(start + _ns(e.get("dur", 0))), e))
        elif category in LAUNCH_CATEGORIES and "correlation" in (e.get("args") or {}):
            # at equal times, ranges open before the launch is looked at (kind 0 before 1)
            per_thread[(e.get("pid"), e.get("tid"))].append((_ns(e["ts"]), 1, 0, e))
    launches: dict[int, _Launch] = {}
    for items in per_thread.values():
        items.sort(key=lambda item: item[:3])
        stack: list[tuple[int, dict[str, Any]]] = []  # (end_ns, event)
        p2p: list[dict[str, Any]] = []  # sends and recvs issued, not launched yet
        grouped: dict[int, list[dict[str, Any]]] = {}  # id of a nccl:coalesced range -> its p2p
        for start, kind, negative_end, event in items:
            while stack and stack[-1][0] <= start and not (kind == 1 and stack[-1][0] == start):
                stack.pop()
            if kind == 1:
                launch = launches[int(event["args"]["correlation"])] = _context(start, stack,
                                                                                 grouped)
                p2p = [args for args in p2p if args is not launch.comms]  # launched alone
                continue
            stack.append((-negative_end, event))
            name = (event.get("args") or {}).get("Collective name")
            if name is not None and collective_op(str(name)) in ("send", "recv"):
                p2p.append(event["args"])
            elif event.get("name") == "nccl:coalesced":
                grouped[id(event)], p2p = p2p, []
    return launches


def _context(ts_ns: int, stack: list[tuple[int, dict[str, Any]]],
             grouped: dict[int, list[dict[str, Any]]]) -> _Launch:
    """The launch's context. A send or recv in a coalescing group (``batch_isend_irecv``,
    Megatron's pipeline) launches in the group's ``nccl:coalesced`` range, after its own
    ``record_param_comms``: where the group holds one, that one names the kernel."""
    ops = [e for _, e in reversed(stack) if e.get("cat") == "cpu_op" and _is_op(e.get("name", ""))]
    comms = next((e.get("args") for _, e in reversed(stack)
                  if "Collective name" in (e.get("args") or {})), None)
    if comms is None:
        group = next((grouped[id(e)] for _, e in reversed(stack) if id(e) in grouped), [])
        comms = group[0] if len(group) == 1 else None
    return _Launch(ts_ns, tuple(_op_call(e) for e in ops), comms)


def _op_call(event: dict[str, Any]) -> OpCall:
    args = event.get("args") or {}
    return OpCall(name=event["name"], input_dims=_tuples(args.get("Input Dims", [])),
                  input_types=_tuples(args.get("Input type", [])),
                  concrete_inputs=_tuples(args.get("Concrete Inputs", [])),
                  input_strides=_tuples(args.get("Input Strides", [])),
                  external_id=_int(args.get("External id")))


def _kernel(event: dict[str, Any], launches: dict[int, _Launch]) -> KernelEvent:
    args = event.get("args") or {}
    correlation = _int(args.get("correlation"))
    launch = launches.get(correlation) if correlation is not None else None
    name = str(event.get("name", ""))
    if event.get("cat") != "kernel":
        name = name.split(" (", 1)[0]  # "Memcpy DtoD (Device -> Device)" -> "Memcpy DtoD"
    collective = None
    if NCCL_KERNEL.match(name):
        collective = _collective(name, args if "Collective name" in args
                                 else (launch.comms if launch and launch.comms else {}))
    return KernelEvent(
        name=name, stream=_int(args.get("stream")) or 0, start_ns=_ns(event["ts"]),
        duration_ns=_ns(event.get("dur", 0)), correlation=correlation or 0,
        collective=collective, launch_ns=launch.ts_ns if launch else None,
        calls=launch.calls if launch else (), device=_int(args.get("device")))


def collective_op(name: str) -> str | None:
    """A collective's name as PyTorch (``_allgather_base``, ``allreduce_coalesced``) or NCCL
    (``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``) writes it -> the simulator's op, or None."""
    squashed = NCCL_KERNEL.sub("", name).lower().replace("_", "").lstrip()
    if squashed.startswith("sendrecv"):
        return None  # NCCL's one p2p kernel: a send, a recv or an all-to-all
    return next((op for prefix, op in _COLLECTIVE_PREFIXES if squashed.startswith(prefix)), None)


def _collective(kernel_name: str, args: dict[str, Any]) -> CollectiveInfo:
    op = collective_op(str(args.get("Collective name", ""))) or collective_op(kernel_name)
    if op is None:
        op = "send_recv"  # ncclDevKernel_SendRecv without the range that says which
    if op == "all_to_all" and _uneven(args.get("In split size")):
        op = "all_to_allv"
    nelems = [n for n in (_int(args.get("In msg nelems")), _int(args.get("Out msg nelems")))
              if n is not None]
    element = DTYPE_BYTES.get(str(args.get("dtype", "")).rsplit("::", 1)[-1].lower())
    return CollectiveInfo(op=op, bytes=max(nelems) * element if nelems and element else None,
                          group_size=_int(args.get("Group size")))


def _uneven(splits: Any) -> bool:
    """Whether split sizes (a list, or its string ``"[1, 2]"``) differ."""
    if isinstance(splits, str):
        splits = [s for s in re.split(r"[\s,\[\]]+", splits) if s]
    return isinstance(splits, list) and len(set(map(str, splits))) > 1


def _top_level_ops(events: Iterable[dict[str, Any]]) -> list[HostOp]:
    """``cpu_op`` ranges that no other ``cpu_op`` on their thread encloses, by start."""
    per_thread: dict[tuple[Any, Any], list[HostOp]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            per_thread[(e.get("pid"), e.get("tid"))].append(HostOp(
                str(e.get("name", "")), _int(e.get("tid")) or 0, _ns(e["ts"]),
                _ns(e.get("dur", 0))))
    top: list[HostOp] = []
    for ops in per_thread.values():
        ops.sort(key=lambda op: (op.start_ns, -op.duration_ns))
        open_until = -1
        for op in ops:
            if op.start_ns >= open_until:
                top.append(op)
                open_until = op.start_ns + op.duration_ns
    return sorted(top, key=lambda op: op.start_ns)


@dataclass
class _OpenOp:
    """A ``cpu_op`` range open in :func:`_host_calls`' sweep."""

    end_ns: int
    event: dict[str, Any]
    runtime_calls: list[str] = field(default_factory=list)
    encloses_op: bool = False

    def leaf(self) -> "HostCall | None":
        """The range as a leaf op, None where it encloses an op or is no op."""
        if self.encloses_op or not _is_op(str(self.event.get("name", ""))):
            return None
        return _host_call(self.event, tuple(self.runtime_calls))


def _host_calls(events: Iterable[dict[str, Any]]) -> dict[str, list[HostCall]]:
    """:attr:`RankTrace.leaf_ops` and :attr:`RankTrace.runtime_calls`: per thread, one sweep
    over ``cpu_op`` ranges and runtime calls by start (a range before what starts with it
    inside it) with a stack of the ranges open."""
    per_thread: dict[tuple[Any, Any], list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" or e.get("cat") in LAUNCH_CATEGORIES:
            per_thread[(e.get("pid"), e.get("tid"))].append(
                (_ns(e["ts"]), -_ns(e.get("dur", 0)), e))
    leaves: list[HostCall | None] = []
    runtime: list[HostCall] = []
    for items in per_thread.values():
        items.sort(key=lambda item: item[:2])
        stack: list[_OpenOp] = []
        for start, negative_duration, event in items:
            while stack and stack[-1].end_ns <= start:
                leaves.append(stack.pop().leaf())
            if event.get("cat") != "cpu_op":
                runtime.append(_host_call(event))
                if stack:
                    stack[-1].runtime_calls.append(str(event.get("name", "")))
            else:
                if stack:
                    stack[-1].encloses_op = True
                stack.append(_OpenOp(start - negative_duration, event))
        leaves.extend(open_op.leaf() for open_op in stack)
    return {"leaf_ops": sorted((c for c in leaves if c is not None), key=lambda c: c.start_ns),
            "runtime_calls": sorted(runtime, key=lambda call: call.start_ns)}


def _host_call(event: dict[str, Any], runtime_calls: tuple[str, ...] = ()) -> HostCall:
    return HostCall(str(event.get("name", "")), _int(event.get("tid")) or 0, _ns(event["ts"]),
                    _ns(event.get("dur", 0)), runtime_calls)
