"""Time each collective call's host side in an unmodified training script, unprofiled.

What a collective call costs the calling thread inside a real training step, which the host
model's ``intercept.host_time.collective_host`` is fitted on (``fit``, below). The runner wraps
the public collective functions of ``torch.distributed`` (the list the simulator charges as one
call, ``COLLECTIVE_FUNCTIONS`` of ``intercept.host_time.c10d_host``, which loads no simulator
state) with ``perf_counter`` and records each call's duration, group size and start, and the
training step it fell in (a global optimizer post-hook counts steps, as ``profile_run.py``
does). The gap before a call includes the runner's own bookkeeping after the previous one
(a few us). No synchronisation is added: an asynchronous
collective's time is its enqueue; a synchronous one's is what the caller waits. Collectives a
framework issues from C++ (DDP's reducer) do not pass through these functions and are not timed;
functional collectives (DTensor's, ``torch.distributed._functional_collectives``) are, as
``funcol.<name>``: their call enqueues, the wait comes later. The host's waits on the GPU are
timed too, as ``sync.<name>`` (``Tensor.item``, ``.tolist`` and ``.cpu`` of a CUDA tensor,
``torch.cuda.synchronize``): how long a rank's host waited tells a host-bound stretch of a step
from one the GPU (or another rank, through a collective) bounds.

Each rank writes ``<out>/rank<r>.json``: per operation and group size (``all_reduce/2``), the
call durations (us) of training steps ``--from`` onwards, and the number of calls per step;
``timeline_us``: each call's start (us after the first timed call), duration and key, in order
(how long since the previous collective a call came, for how cold its code path ran);
``origin_s``: that first call's ``perf_counter`` (one clock for all ranks of a host: it aligns
their timelines); ``step_ends_us``: when each timed training step ended, on the same scale.
With ``--modules``, ``modules``: per ``nn.Module`` class, its forward calls per step and their
host time per step (us, inclusive of the modules it calls, its waits on the GPU left out), from
global forward hooks (a few us each, charged to the enclosing modules). Run the same command
under the simulator (a scenario whose script is this one) and the two records compare a step's
host time module by module, without a profiler's overhead. With ``--functions torch.ones,
torch.Tensor.float,...``, ``functions``: the same per named callable (a module attribute or a
class's method, replaced where it is defined: code that bound it by name before keeps the
original), each call's time inclusive. ``gc``: per generation, Python's garbage collections a
step and their time (``gc.callbacks``), wherever they ran.

  torchrun --nproc_per_node 4 scripts/measure/time_host_calls.py --out DIR -- \\
      scenarios/examples/megatron_gpt.py --tp 4 ...
  python3 scripts/measure/time_host_calls.py summarize ROOT   # a table of ROOT/<run>/rank*.json
  # the model of intercept.host_time.collective_host, from sessions (each: calls/, *_env.log)
  python3 scripts/measure/time_host_calls.py fit SESSION... [--write hwmodel/measured/data/collective_host.json]
  # the model of intercept.host_time.host_spread, from sessions with waits timed, 3+ ranks
  python3 scripts/measure/time_host_calls.py spread SESSION... [--write hwmodel/measured/data/host_spread.json]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import importlib
import inspect
import json
import math
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed import distributed_c10d as c10d
from torch.optim.optimizer import register_optimizer_step_post_hook

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from hwmodel.measured.host_references import references  # noqa: E402
from intercept.host_time.c10d_host import COLLECTIVE_FUNCTIONS  # noqa: E402
from intercept.host_time.collective_host import ROWS  # noqa: E402
from intercept.host_time.host_cost import load_table  # noqa: E402
from measurements import read_text, stored_glob  # noqa: E402
from scripts.common import run_as_main  # noqa: E402
from scripts.measure.measure_steps import MACHINE_RE  # noqa: E402

FIRST_STEP = 3
"""Steps 1-2 are warm-up (NCCL communicators, allocator)."""


FUNCTIONAL_ROWS = {
    "all_reduce": "all_reduce", "all_gather_tensor": "all_gather",
    "all_gather_single": "all_gather", "all_gather_tensor_autograd": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_single": "reduce_scatter",
    "reduce_scatter_tensor_autograd": "reduce_scatter", "all_to_all_single": "all_to_all",
    "all_to_all_single_autograd": "all_to_all", "broadcast": "broadcast",
}
"""The functional collectives (``torch.distributed._functional_collectives``: what DTensor and
tensor parallel issue) timed as ``funcol.<name>`` (those of them this torch has), and the
``collective_host`` row each is fitted into."""
SYNC_PREFIX = "sync."
"""Key prefix of the host's waits on the GPU (not collectives: the fit leaves them out)."""
TENSOR_SYNCS = ("item", "tolist", "cpu")
"""``torch.Tensor`` methods that wait for the GPU when the tensor is on it."""


def group_size(signature: inspect.Signature, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> int:
    """The size of the group a collective call runs on (its ``group`` argument, else the
    default group): a one-rank group's collective is a local copy, far cheaper on the host.
    A functional collective's group (ranks, a mesh and its dimension, a name) is resolved to
    its process group; 0 where that fails."""
    try:
        group = signature.bind_partial(*args, **kwargs).arguments.get("group")
    except TypeError:
        group = None
    if group is None or isinstance(group, dist.ProcessGroup):
        return dist.get_world_size(group)
    try:
        return c10d._resolve_process_group(funcol._resolve_group_name(group)).size()
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return 0


def tensor_on_gpu(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> bool:
    """Whether a ``torch.Tensor`` method called on ``tensor`` waits for the GPU."""
    return tensor.is_cuda


class PerStepTally:
    """Time and count per key over the timed steps, reported per step."""

    def __init__(self, count_key: str) -> None:
        self.count_key = count_key
        self.us: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    def add(self, key: str, seconds: float) -> None:
        self.us[key] += seconds * 1e6
        self.counts[key] += 1

    def per_step(self, steps: int) -> dict[str, dict[str, float]]:
        return {key: {self.count_key: self.counts[key] / steps,
                      "us_per_step": round(total / steps, 1)}
                for key, total in sorted(self.us.items())}


class CallTimer:
    """Per operation, the duration of each call made from training step ``first`` on."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.step = 1
        self._owner: int | None = None
        self.timeline: list[tuple[float, float, str]] = []
        """Every timed call in order: its ``perf_counter`` start and end and its key,
        ``<operation>/<group size>`` (``sync.<name>/0`` for a wait on the GPU)."""
        self.step_ends: list[float] = []
        self.waited_s = 0.0
        """The main thread's time in timed waits on the GPU so far."""
        self._open: dict[int, list[tuple[float, float]]] = defaultdict(list)
        self.modules = PerStepTally("calls_per_step")
        self.functions = PerStepTally("calls_per_step")
        self.collections = PerStepTally("runs_per_step")
        """Python's garbage collections, by generation."""
        self._gc_start = 0.0

    def on_optimizer_step(self, optimizer: torch.optim.Optimizer, args: object,
                          kwargs: object) -> None:
        """A training step ends at the first optimizer's step (a framework stepping several
        inner optimizers counts once)."""
        if self._owner is None:
            self._owner = id(optimizer)
        if id(optimizer) == self._owner:
            if self.step >= self.first:
                self.step_ends.append(time.perf_counter())
            self.step += 1

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                end = time.perf_counter()
                if self.step >= self.first:
                    self.timeline.append(
                        (start, end, f"{name}/{group_size(signature, args, kwargs)}"))

        return timed

    def wrap_sync(self, name: str, function: Callable[..., Any],
                  waits: Callable[..., bool] = lambda *args, **kwargs: True
                  ) -> Callable[..., Any]:
        """``function`` timed as a wait on the GPU where ``waits`` (given its arguments) says
        it is one: a ``torch.Tensor`` method where its tensor is on the GPU."""

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.step < self.first or not waits(*args, **kwargs):
                return function(*args, **kwargs)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                end = time.perf_counter()
                self.timeline.append((start, end, f"{SYNC_PREFIX}{name}/0"))
                self.waited_s += end - start

        return timed

    def before_forward(self, module: torch.nn.Module, args: object) -> None:
        if self.step >= self.first:
            self._open[id(module)].append((time.perf_counter(), self.waited_s))

    def after_forward(self, module: torch.nn.Module, args: object, output: object) -> None:
        opened = self._open.get(id(module))
        if opened:
            start, waited = opened.pop()
            self.modules.add(type(module).__name__,
                             time.perf_counter() - start - (self.waited_s - waited))

    def wrap_timed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` whose calls from step ``first`` on add to ``name``'s per-step time."""

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.step < self.first:
                return function(*args, **kwargs)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.functions.add(name, time.perf_counter() - start)

        return timed

    def install_functions(self, names: list[str]) -> None:
        """Replace each dotted ``module.attribute`` or ``module.Class.method`` by its timed
        version; a name that does not resolve is an error naming it."""
        for name in names:
            owner, attribute = resolve_owner(name)
            setattr(owner, attribute, self.wrap_timed(name, getattr(owner, attribute)))

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        """``gc.callbacks`` entry: time each collection of the timed steps by generation."""
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif self.step >= self.first:
            self.collections.add(str(info["generation"]), time.perf_counter() - self._gc_start)

    def install_module_hooks(self) -> None:
        """Time every module's forward (global hooks)."""
        torch.nn.modules.module.register_module_forward_pre_hook(self.before_forward)
        torch.nn.modules.module.register_module_forward_hook(self.after_forward)

    def install(self) -> None:
        """Replace the collective functions on ``torch.distributed`` and ``distributed_c10d``,
        and the functional ones (modules that bound them by name before this ran keep the
        originals)."""
        for name in COLLECTIVE_FUNCTIONS:
            original = getattr(c10d, name, None)
            if original is None:
                continue
            timed = self.wrap(name, original)
            for owner in (c10d, dist):
                if getattr(owner, name, None) is original:
                    setattr(owner, name, timed)
        for name in FUNCTIONAL_ROWS:
            original = getattr(funcol, name, None)
            if original is not None:
                setattr(funcol, name, self.wrap(f"funcol.{name}", original))
        for name in TENSOR_SYNCS:
            setattr(torch.Tensor, name,
                    self.wrap_sync(name, getattr(torch.Tensor, name), tensor_on_gpu))
        torch.cuda.synchronize = self.wrap_sync("cuda_synchronize", torch.cuda.synchronize)

    def record(self) -> dict[str, Any]:
        steps = max(self.step - self.first, 1)
        origin = self.timeline[0][0] if self.timeline else 0.0
        durations_us: dict[str, list[float]] = defaultdict(list)
        for start, end, key in self.timeline:
            durations_us[key].append(round((end - start) * 1e6, 2))
        return {"first_step": self.first, "last_step": self.step - 1,
                "modules": self.modules.per_step(steps),
                "functions": self.functions.per_step(steps),
                "gc": self.collections.per_step(steps),
                "ops": {key: {"calls_per_step": len(values) / steps, "durations_us": values}
                        for key, values in sorted(durations_us.items())},
                "origin_s": origin,
                "step_ends_us": [round((end - origin) * 1e6, 1) for end in self.step_ends],
                "timeline_us": [[round((start - origin) * 1e6, 1), round((end - start) * 1e6, 2),
                                 key] for start, end, key in self.timeline]}


def resolve_owner(name: str) -> tuple[Any, str]:
    """``(object holding it, attribute)`` of a dotted name: the longest importable module
    prefix, then attributes (``torch.Tensor.float`` -> ``(torch.Tensor, "float")``)."""
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:split])
        try:
            owner: Any = importlib.import_module(module)
        except ImportError as exc:
            if exc.name is not None and not (module + ".").startswith(exc.name + "."):
                # the module exists but one of its own imports does not: say which
                raise SystemExit(f"--functions: {name!r}: importing it needs {exc.name!r}, "
                                 f"which failed to import ({exc}); install it") from exc
            continue
        try:
            for attribute in parts[split:-1]:
                owner = getattr(owner, attribute)
            getattr(owner, parts[-1])
        except AttributeError:
            break
        return owner, parts[-1]
    raise SystemExit(f"--functions: {name!r} is no module attribute or class method "
                     "(e.g. torch.ones, torch.Tensor.float)")


def summarize(root: Path) -> str:
    """One line per run folder under ``root`` (``<machine>_<run>/rank<r>.json``) and operation:
    calls per step (rank mean) and the call time's median, mean and 90th percentile over all
    ranks' calls (us)."""
    lines = [f"{'run':<44} {'op':<24} {'calls/step':>10} {'median us':>10} {'mean us':>9} "
             f"{'p90 us':>8} {'ms/step':>8}"]
    for run in sorted(p for p in root.iterdir() if p.is_dir()):
        ranks = [json.loads(read_text(path)) for path in stored_glob(run, "rank*.json")]
        for op in sorted({op for record in ranks for op in record["ops"]}):
            rows = [record["ops"][op] for record in ranks if op in record["ops"]]
            values = sorted(v for row in rows for v in row["durations_us"])
            per_step = statistics.mean(row["calls_per_step"] for row in rows)
            mean = statistics.mean(values)
            lines.append(f"{run.name:<44} {op:<24} {per_step:>10.1f} "
                         f"{statistics.median(values):>10.1f} {mean:>9.1f} "
                         f"{values[int(0.9 * (len(values) - 1))]:>8.1f} "
                         f"{per_step * mean / 1e3:>8.2f}")
    return "\n".join(lines)


ROW_OF_FUNCTION = {
    "all_reduce": "all_reduce", "broadcast": "broadcast", "all_gather": "all_gather",
    "all_gather_into_tensor": "all_gather", "_all_gather_base": "all_gather",
    "all_gather_single": "all_gather", "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter", "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    **{f"funcol.{name}": row for name, row in FUNCTIONAL_ROWS.items()},
}
"""The ``collective_host`` row each timed function is fitted into; calls of the others
(barriers, which wait for the other ranks; point-to-point) are left out of the fit."""
TAU_GRID_US = (10.0, 20.0, 50.0, 100.0, 200.0)
"""Where the decay starts; a shorter one fits about as well (median relative error 0.110 at
2 us against 0.119 at 10 us on session ``h200x2.j``) but leaves the back-to-back cost at zero."""
MAX_GAP_QUANTILE = 0.99
"""The model's gap is capped at this quantile of the measured gaps: beyond, no data bends the
logarithm (the longest gaps span a step's end and its data loading)."""


@dataclass(frozen=True)
class Call:
    """One timed call on a group of two or more ranks, on the reference host."""

    row: str
    gap_ns: float
    """Since the end of the rank's previous timed collective call (any group)."""
    cost_ns: float
    run: str


def session_calls(session: Path, reference: str) -> list[Call]:
    """The calls of ``session/calls/<machine>_<run>/rank*.json`` (with timelines) on groups of
    two or more, on the ``reference`` host: the lent host they ran on counts as its GPU's
    reference host (as the host-cost table's was), scaled as the table is, by the two reference
    hosts' ``torch_ops`` benchmark component. Not by the session's own benchmark: on two 2xH200
    hosts whose benchmarks differed 1.8x, a run's median call of an op differed 0.61-1.15x
    (median 0.86; sessions ``h200x2.i`` and ``h200x2.j``)."""
    hosts = references()
    calls = []
    for rank_file in stored_glob(session, "calls/*/rank*.json"):
        machine = MACHINE_RE.match(rank_file.parent.name.partition("_")[0])
        if machine is None:
            raise SystemExit(f"{rank_file.parent}: not <machine>_<run>, e.g. h200x2_ddp")
        factor = (hosts.hosts[reference].components_ns["torch_ops"]
                  / hosts.for_gpu(machine["gpu"]).components_ns["torch_ops"])
        previous_end_us = None
        for start_us, duration_us, key in json.loads(read_text(rank_file))["timeline_us"]:
            function, _, size = key.partition("/")
            if function.startswith(SYNC_PREFIX):
                continue
            if previous_end_us is not None and int(size) > 1 and function in ROW_OF_FUNCTION:
                calls.append(Call(ROW_OF_FUNCTION[function],
                                  max(start_us - previous_end_us, 0.0) * 1e3 * factor,
                                  duration_us * 1e3 * factor, rank_file.parent.name))
            previous_end_us = start_us + duration_us
    return calls


def fit_calls(calls: list[Call], tau_ns: float) -> tuple[dict[str, float], float, float]:
    """Per-row hot cost and the common slope of ``hot + slope * ln(1 + gap / tau)``, by least
    squares reweighted towards absolute error (calls that waited on something else are long
    outliers); and the median relative error."""
    rows = sorted({call.row for call in calls})
    design = np.array([[1.0 if call.row == row else 0.0 for row in rows]
                       + [math.log1p(call.gap_ns / tau_ns)] for call in calls])
    cost = np.array([call.cost_ns for call in calls])
    weights = np.ones(len(calls))
    for _ in range(30):
        coef, *_ = np.linalg.lstsq(design * weights[:, None], cost * weights, rcond=None)
        weights = 1 / np.sqrt(np.maximum(np.abs(cost - design @ coef), 1e3))
    relative = np.abs(cost - design @ coef) / cost
    return dict(zip(rows, coef[:-1])), float(coef[-1]), float(np.median(relative))


def fit(sessions: list[Path]) -> dict[str, Any]:
    """The ``collective_host.json`` document fitted on the sessions' calls (the step of the
    grid ``TAU_GRID_US`` with the lowest median relative error)."""
    reference = load_table().reference
    calls = [call for session in sessions for call in session_calls(session, reference)]
    if not calls:
        raise SystemExit("no timed calls on groups of two or more ranks (timelines) found")
    best = min(((tau_us, *fit_calls(calls, tau_us * 1e3)) for tau_us in TAU_GRID_US),
               key=lambda result: result[3])
    tau_us, hot, slope, error = best
    missing = set(ROWS) - {"default"} - set(hot)
    if missing:
        raise SystemExit(f"no calls of {', '.join(sorted(missing))}: cannot fit their rows")
    hot_ns = {row: max(0, round(hot[row])) for row in ROWS if row != "default"}
    hot_ns["default"] = round(statistics.median(hot_ns.values()))
    return {"reference": reference, "hot_ns": hot_ns, "slope_ns": round(slope),
            "tau_ns": round(tau_us * 1e3), "max_gap_ns": round(float(np.quantile([c.gap_ns for c in calls], MAX_GAP_QUANTILE))),
            "provenance": {"sessions": [str(s) for s in sessions], "calls": len(calls),
                           "runs": sorted({c.run for c in calls}),
                           "median_relative_error": round(error, 3),
                           "tau_grid_us": list(TAU_GRID_US),
                           "fitted_by": "scripts/measure/time_host_calls.py fit",
                           "date": datetime.date.today().isoformat()}}


UNEVEN_WORK = ("-learned", "-pp")
"""Runs whose ranks do different work by design (learned routing's token counts, pipeline
stages): their spread is not the hosts'. Left out of ``spread``."""
UNTIMED_WAITS = ("deepspeed-",)
"""Runs whose host waits on the GPU where the runner does not see it (DeepSpeed's ZeRO
synchronizes streams from C++ and steps its optimizer more than once a step): their windows
hold waits. Left out of ``spread``."""
SPREAD_TAU_GRID_US = (250.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0)
MIN_WINDOW_US = 200.0
MIN_BIN_WINDOWS = 20


def host_work_segments(record: dict[str, Any]) -> list[list[float]]:
    """Per timed step (between two of ``step_ends_us``), the rank's host work between each two
    consecutive collective calls (us): the time from one call's end to the next one's start,
    less the waits on the GPU (``sync.*``) in between."""
    ends = record["step_ends_us"]
    steps = []
    for low, high in zip(ends, ends[1:]):
        events = [e for e in record["timeline_us"] if low <= e[0] < high]
        calls = [e for e in events if not e[2].startswith(SYNC_PREFIX)]
        waits = [e for e in events if e[2].startswith(SYNC_PREFIX)]
        steps.append([later[0] - (call[0] + call[1])
                      - sum(d for t, d, _ in waits if call[0] + call[1] <= t < later[0])
                      for call, later in zip(calls, calls[1:])])
    return steps


def spread_windows(ranks: list[list[list[float]]],
                   sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)) -> list[tuple[float, float]]:
    """``(mean window us, coefficient of variation across ranks)`` of every window of ``size``
    consecutive segments of a step, for each size: the sample standard deviation over the ranks
    of their host work in the window, over its mean. Steps whose ranks made different numbers of
    calls are left out."""
    windows = []
    for size in sizes:
        for step in zip(*ranks):
            if len({len(segments) for segments in step}) != 1:
                continue
            for first in range(0, len(step[0]) - size + 1, size):
                totals = [sum(segments[first:first + size]) for segments in step]
                mean = statistics.mean(totals)
                if mean >= MIN_WINDOW_US:
                    windows.append((mean, statistics.stdev(totals) / mean))
    return windows


def fit_spread(sessions: list[Path]) -> dict[str, Any]:
    """The ``host_spread.json`` document: the windows of every run with waits timed and three or
    more ranks but rank 0 (which also logs) binned by length (half-octaves), the bins' median
    coefficients of variation fitted by ``sigma^2 = p^2 + s^2 * tau / (tau + window)`` (least
    squares weighted by the bins' window counts, the best ``tau`` of a grid)."""
    windows, runs = [], []
    for session in sessions:
        for run in sorted(p for p in session.glob("calls/*") if p.is_dir()):
            records = [json.loads(read_text(f)) for f in stored_glob(run, "rank*.json")]
            if (len(records) < 3 or any(tag in run.name for tag in UNEVEN_WORK + UNTIMED_WAITS)
                    or any("step_ends_us" not in r for r in records)):
                continue
            found = spread_windows([host_work_segments(r) for r in records[1:]])
            if found:
                windows += found
                runs.append(f"{session.name}/{run.name}")
    bins: dict[float, list[float]] = defaultdict(list)
    for mean, cv in windows:
        bins[round(math.log2(mean) * 2) / 2].append(cv)
    rows = [(2 ** key, statistics.median(cvs), len(cvs)) for key, cvs in sorted(bins.items())
            if len(cvs) >= MIN_BIN_WINDOWS]
    if len(rows) < 3:
        raise SystemExit("too few windows: runs with waits timed (sync.*) and 3+ ranks needed")
    best = None
    for tau_us in SPREAD_TAU_GRID_US:
        design = np.array([[1.0, tau_us / (tau_us + w)] for w, _, _ in rows])
        target = np.array([cv ** 2 for _, cv, _ in rows])
        weight = np.sqrt([n for _, _, n in rows])
        coef, *_ = np.linalg.lstsq(design * weight[:, None], target * weight, rcond=None)
        coef = np.maximum(coef, 0.0)
        error = float(np.sum((weight * (design @ coef - target)) ** 2))
        if best is None or error < best[0]:
            best = (error, tau_us, coef)
    _, tau_us, (persistent, short) = best
    return {"sigma_persistent": round(math.sqrt(persistent), 4),
            "sigma_short": round(math.sqrt(short), 4), "tau_ns": round(tau_us * 1e3),
            "provenance": {"sessions": [str(s) for s in sessions], "runs": runs,
                           "windows": len(windows),
                           "bins": [{"window_us": round(w, 1), "median_cv": round(cv, 4),
                                     "windows": n} for w, cv, n in rows],
                           "fitted_by": "scripts/measure/time_host_calls.py spread",
                           "date": datetime.date.today().isoformat()}}


def main() -> None:
    if sys.argv[1:2] == ["summarize"]:
        print(summarize(Path(sys.argv[2])))
        return
    if sys.argv[1:2] in (["fit"], ["spread"]):
        write = "--write" in sys.argv
        paths = [Path(a) for a in sys.argv[2:] if a != "--write"]
        fitter = fit if sys.argv[1] == "fit" else fit_spread
        document = fitter(paths[:-1] if write else paths)
        text = json.dumps(document, indent=1) + "\n"
        print(text, end="")
        if write:
            paths[-1].write_text(text)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for rank<r>.json")
    parser.add_argument("--from", dest="first", type=int, default=FIRST_STEP,
                        help=f"first training step timed, 1-based (default {FIRST_STEP})")
    parser.add_argument("--modules", action="store_true",
                        help="also time each nn.Module's forward (host time per class and step)")
    parser.add_argument("--functions", default="",
                        help="comma list of callables to time per step, e.g. "
                             "torch.ones,torch.Tensor.float")
    parser.add_argument("script", type=Path)
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    timer = CallTimer(args.first)
    timer.install()
    gc.callbacks.append(timer.on_gc)
    if args.modules:
        timer.install_module_hooks()
    # names of the script's own modules (``model.GPT.forward``) resolve as the script imports them
    sys.path.insert(0, str(args.script.resolve().parent))
    timer.install_functions([name for name in args.functions.split(",") if name])
    hook = register_optimizer_step_post_hook(timer.on_optimizer_step)
    try:
        run_as_main(args.script, [a for a in args.args if a != "--"])
    finally:
        hook.remove()
        rank = int(os.environ.get("RANK", "0"))
        (args.out / f"rank{rank}.json").write_text(json.dumps(timer.record()))


if __name__ == "__main__":
    main()
