"""Measure how much an NCCL collective in flight slows concurrent compute on the same GPU, and back.

NCCL runs a collective as one CUDA block per channel, each holding a streaming multiprocessor
(SM) for the whole call and moving data through HBM; a kernel launched meanwhile on another
stream gets the remaining SMs and the remaining memory bandwidth. This script measures that:
for each compute kernel K and collective C (one process per GPU, NCCL, bf16, every rank doing
the same), it times

* K alone on a compute stream (``n_k`` back-to-back runs, CUDA events around each run),
* C alone on a communication stream (``m_c`` back-to-back calls, events around each call),
* both at once: the runs and the calls issued interleaved in proportion, behind a GPU-side
  hold (``torch.cuda._sleep``) on both streams sized from the host's measured issue time, so
  the host gets ahead, the two streams start together and run back-to-back.

Every event is read against one reference event, so each K run's interval is known on the same
clock as the collectives': a K run counts as overlapped only if it lies wholly inside one busy
stretch of the communication stream (calls less than ``GAP_US`` apart), and a C call only if it
lies inside a busy stretch of the compute stream. (CUDA's launch queue is bounded: once it is
full the host blocks on one stream while the other may run dry, so the streams' spans alone
would count runs that had nothing to overlap; the ``*_span_*`` columns keep that looser count.)
Slowdown = mean overlapped time / mean alone time (medians are recorded too). ``n_k`` and
``m_c`` are sized so each side lasts about ``--target-ms``; every round is repeated
``--repeats`` times, alone and overlapped rounds interleaved so clock drift hits both.
all_reduce and reduce_scatter use ``AVG`` so repeated in-place calls keep their values finite.

Usages (from the repository root):

 1. The full grid on 2 GPUs, NCCL's own channel count:
      python3 scripts/measure/measure_overlap.py run --out /tmp/ov
 2. A subset with NCCL limited to 8 channels (fewer SMs taken), results under a tag:
      NCCL_MAX_NCHANNELS=8 python3 scripts/measure/measure_overlap.py run --out /tmp/ov --tag ch8 \\
          --kernels gemm8192,add256MiB --colls all_reduce --sizes 256MiB
 3. The plan without a GPU:  python3 scripts/measure/measure_overlap.py run --out /tmp/ov --dry-run
 4. The rank-averaged table of a stored run:
      python3 scripts/measure/measure_overlap.py summarize scripts/measure/data/overlap/h200x2/results.csv

Output under ``--out``: ``results[_TAG].csv`` (one row per rank, kernel, collective and size),
``system[_TAG].txt`` and ``logs[_TAG]/nccl_rank<r>.log`` (NCCL_DEBUG=INFO, subsystems INIT and
TUNING: the channel count NCCL gives each call is read back from them into the CSV).
"""

from __future__ import annotations

import bisect
import csv
import math
import multiprocessing
import os
import queue as queue_module
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from multiprocessing.queues import Queue
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from hwmodel.units import format_bytes, parse_bytes  # noqa: E402
from scripts import common  # noqa: E402
from scripts.common import SAFETY_ENV  # noqa: E402
from scripts.measure.measure_collectives import (  # noqa: E402
    NCCL_FUNC,
    free_port,
    init_nccl_rank,
    nccl_logged_bytes,
    parse_tuning_log,
    system_report,
)

if TYPE_CHECKING:
    import torch

BF16_BYTES = 2
COLLS = ("all_reduce", "all_gather", "reduce_scatter")
DEFAULT_SIZES = "16MiB,256MiB"
DEBUG_SUBSYS = "INIT,TUNING"
# torch.cuda._sleep counts SM cycles; 2 GHz is at or above the H100/H200 boost clock, so a hold
# lasts at least as long as asked.
CYCLES_PER_US = 2000
GAP_US = 5.0
"""Back-to-back runs on one stream are this close (event records between them) or closer."""


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """A compute kernel to overlap: ``kind`` is ``compute`` (tensor cores) or ``memory`` (HBM)."""

    name: str
    kind: str
    aten: str
    """The aten op the engine sees for it (what hwmodel.compute.ops classifies)."""
    shape: tuple[int, ...]
    """GEMM: (m, n, k); add: (elements,); layer_norm: (rows, cols)."""

    @property
    def flops(self) -> int:
        if self.aten == "aten::mm":
            m, n, k = self.shape
            return 2 * m * n * k
        return 0

    @property
    def bytes_moved(self) -> int:
        """HBM bytes one run reads and writes at least (bf16)."""
        if self.aten == "aten::mm":
            m, n, k = self.shape
            return BF16_BYTES * (m * k + k * n + m * n)
        return BF16_BYTES * math.prod(self.shape) * (3 if self.aten == "aten::add" else 2)


KERNELS = {spec.name: spec for spec in (
    KernelSpec("gemm8192", "compute", "aten::mm", (8192, 8192, 8192)),
    KernelSpec("gemm4096", "compute", "aten::mm", (4096, 4096, 4096)),
    KernelSpec("gemm2048", "compute", "aten::mm", (2048, 2048, 2048)),
    KernelSpec("add256MiB", "memory", "aten::add", (256 * 2**20 // BF16_BYTES,)),
    KernelSpec("layer_norm8192x4096", "memory", "aten::native_layer_norm", (8192, 4096)),
)}


# --- pure helpers (no torch) ------------------------------------------------------------------


Interval = tuple[float, float]
"""(start_us, end_us) of one kernel run or collective call, against the round's reference."""


def interleave(n_k: int, m_c: int) -> list[str]:
    """Issue order of ``n_k`` kernel runs (``"k"``) and ``m_c`` collective calls (``"c"``),
    spread in proportion so both streams' queues grow together."""
    order: list[str] = []
    k = c = 0
    while k < n_k or c < m_c:
        if c < m_c and (k >= n_k or c * n_k <= k * m_c):
            order.append("c")
            c += 1
        else:
            order.append("k")
            k += 1
    return order


def inside(items: Sequence[Interval], window: Sequence[Interval]) -> list[Interval]:
    """The ``items`` lying wholly within ``window``'s span (first start to last end)."""
    if not window:
        return []
    lo, hi = window[0][0], window[-1][1]
    return [(start, end) for start, end in items if start >= lo and end <= hi]


def covered(items: Sequence[Interval], cover: Sequence[Interval],
            gap_us: float = GAP_US) -> list[Interval]:
    """The ``items`` lying wholly within one busy stretch of ``cover``: its intervals merged
    where less than ``gap_us`` apart. Stricter than :func:`inside`: an item that ran while
    the other stream sat idle (its host queue empty) does not count."""
    stretches: list[list[float]] = []
    for start, end in sorted(cover):
        if stretches and start - stretches[-1][1] <= gap_us:
            stretches[-1][1] = max(stretches[-1][1], end)
        else:
            stretches.append([start, end])
    starts = [lo for lo, _ in stretches]
    kept = []
    for start, end in items:
        at = bisect.bisect_right(starts, start) - 1
        if at >= 0 and end <= stretches[at][1]:
            kept.append((start, end))
    return kept


def durations(items: Sequence[Interval]) -> list[float]:
    return [end - start for start, end in items]


def runs_for(target_us: float, each_us: float, minimum: int = 3) -> int:
    """How many back-to-back runs of ``each_us`` fill ``target_us`` (at least ``minimum``)."""
    return max(minimum, math.ceil(target_us / max(each_us, 1e-3)))


@dataclass(frozen=True, slots=True)
class Row:
    """One rank's measurement of one (kernel, collective, size); times in microseconds."""

    tag: str
    rank: int
    gpu: str
    sms: int
    kernel: str
    kind: str
    aten: str
    flops: int
    kernel_bytes: int
    coll: str
    coll_bytes: int
    nccl_algo: str
    nccl_proto: str
    nccl_channels: int
    n_k: int
    m_c: int
    prefill_us: float
    """GPU-side hold before a round: the host must queue everything within it ..."""
    issue_us: float
    """... and took this long to, at most, in the overlapped rounds."""
    k_alone_mean_us: float
    k_alone_median_us: float
    k_overlap_mean_us: float
    k_overlap_median_us: float
    k_inside: int
    k_slowdown: float
    k_span_inside: int
    k_span_slowdown: float
    """The same with :func:`inside`: K runs within the collectives' span, busy or not."""
    c_alone_mean_us: float
    c_alone_median_us: float
    c_overlap_mean_us: float
    c_overlap_median_us: float
    c_inside: int
    c_slowdown: float
    c_span_inside: int
    c_span_slowdown: float


def write_csv(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(Row)])
        writer.writeheader()
        for row in rows:
            writer.writerow({key: (f"{value:.4f}" if isinstance(value, float) else value)
                             for key, value in asdict(row).items()})


def read_csv(path: Path) -> list[Row]:
    types = {f.name: f.type for f in fields(Row)}
    casts: dict[str, Callable[[str], object]] = {"int": int, "float": float, "str": str}
    with path.open(newline="") as handle:
        return [Row(**{key: casts[types[key]](value) for key, value in record.items()})
                for record in csv.DictReader(handle)]


def summarize(rows: Sequence[Row]) -> str:
    """Markdown table: per (tag, kernel, collective, size), the ranks' mean slowdowns."""
    groups: dict[tuple[str, str, str, int], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.tag, row.kernel, row.coll, row.coll_bytes), []).append(row)
    lines = [("| tag | kernel | kind | collective | size | NCCL algo/proto/channels | "
              "K alone us | K overlapped us | K slowdown | K slowdown (span) | C alone us | "
              "C overlapped us | C slowdown | K/C runs inside |"),
             "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (tag, kernel, coll, nbytes), group in groups.items():
        first = group[0]

        def mean(attr: str, group: list[Row] = group) -> float:
            return statistics.fmean(getattr(row, attr) for row in group)

        lines.append(
            f"| {tag} | {kernel} | {first.kind} | {coll} | {format_bytes(nbytes)} | "
            f"{first.nccl_algo}/{first.nccl_proto}/{first.nccl_channels} | "
            f"{mean('k_alone_mean_us'):.1f} | {mean('k_overlap_mean_us'):.1f} | "
            f"{mean('k_slowdown'):.3f} | {mean('k_span_slowdown'):.3f} | "
            f"{mean('c_alone_mean_us'):.1f} | "
            f"{mean('c_overlap_mean_us'):.1f} | {mean('c_slowdown'):.3f} | "
            f"{sum(r.k_inside for r in group)}/{sum(r.c_inside for r in group)} |")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Plan:
    """What every rank measures (pickled to the spawned children)."""

    kernels: tuple[str, ...]
    colls: tuple[str, ...]
    sizes_bytes: tuple[int, ...]
    target_us: float
    repeats: int
    warmup: int

    def describe(self) -> str:
        return (f"kernels {', '.join(self.kernels)}; collectives {', '.join(self.colls)} at "
                f"{', '.join(format_bytes(n) for n in self.sizes_bytes)}; "
                f"~{self.target_us / 1000:g} ms a side, {self.repeats} repeats")


# --- one rank (torch from here on) ------------------------------------------------------------


def _kernel_launcher(spec: KernelSpec, device: torch.device) -> Callable[[], None]:
    """Allocate ``spec``'s operands once; the returned callable launches one run."""
    import torch
    import torch.nn.functional as F

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, dtype=torch.bfloat16, device=device)

    if spec.aten == "aten::mm":
        m, n, k = spec.shape
        a, b, c = randn(m, k), randn(k, n), randn(m, n)

        def launch() -> None:
            torch.mm(a, b, out=c)
    elif spec.aten == "aten::add":
        x, y, z = randn(*spec.shape), randn(*spec.shape), randn(*spec.shape)

        def launch() -> None:
            torch.add(x, y, out=z)
    else:
        rows, cols = spec.shape
        x, weight, bias = randn(rows, cols), randn(cols), randn(cols)

        def launch() -> None:
            F.layer_norm(x, (cols,), weight, bias)
    return launch


def _coll_launcher(op: str, nbytes: int, ngpus: int,
                   device: torch.device) -> Callable[[], None]:
    """One call of ``op`` at nccl-tests size ``nbytes`` (all_gather: output; reduce_scatter:
    input), synchronous on the current stream."""
    import torch
    import torch.distributed as dist

    numel = nbytes // BF16_BYTES
    big = torch.randn(numel, dtype=torch.bfloat16, device=device)
    small = torch.randn(numel // ngpus, dtype=torch.bfloat16, device=device)

    def launch() -> None:
        if op == "all_reduce":
            dist.all_reduce(big, op=dist.ReduceOp.AVG)
        elif op == "all_gather":
            dist.all_gather_into_tensor(big, small)
        else:
            dist.reduce_scatter_tensor(small, big, op=dist.ReduceOp.AVG)
    return launch


def _noop() -> None:
    """The missing side of an alone round."""


@dataclass(slots=True)
class _Streams:
    compute: torch.cuda.Stream
    comm: torch.cuda.Stream


def _round(streams: _Streams, kernel: Callable[[], None], n_k: int,
           coll: Callable[[], None], m_c: int,
           prefill_us: float) -> tuple[list[Interval], list[Interval], float]:
    """Run ``n_k`` kernels and ``m_c`` collective calls concurrently (either may be 0).

    Returns the kernels' and calls' intervals against a reference event recorded before both,
    and the host seconds the issue loop took.
    """
    import torch
    import torch.distributed as dist

    def pairs(count: int) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
        return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(count)]

    k_events, c_events = pairs(n_k), pairs(m_c)
    reference = torch.cuda.Event(enable_timing=True)
    dist.barrier()
    torch.cuda.synchronize()
    reference.record(streams.compute)
    cycles = int(prefill_us * CYCLES_PER_US)
    for stream in (streams.compute, streams.comm):
        with torch.cuda.stream(stream):
            torch.cuda._sleep(cycles)
    counters = {"k": 0, "c": 0}
    started = time.perf_counter()
    for which in interleave(n_k, m_c):
        stream, launch, events = ((streams.compute, kernel, k_events) if which == "k"
                                  else (streams.comm, coll, c_events))
        begin, end = events[counters[which]]
        counters[which] += 1
        with torch.cuda.stream(stream):
            begin.record(stream)
            launch()
            end.record(stream)
    issue_s = time.perf_counter() - started
    torch.cuda.synchronize()

    def intervals(events: list[tuple[torch.cuda.Event, torch.cuda.Event]]) -> list[Interval]:
        return [(reference.elapsed_time(b) * 1000.0, reference.elapsed_time(e) * 1000.0)
                for b, e in events]

    return intervals(k_events), intervals(c_events), issue_s


@dataclass(slots=True)
class _Solo:
    """Per-run device time and host issue time of one side, agreed over the ranks (max)."""

    device_us: float
    host_us: float


def _measure_solo(streams: _Streams, launch: Callable[[], None], is_coll: bool, warmup: int,
                  device: torch.device) -> _Solo:
    import torch
    import torch.distributed as dist

    count = max(warmup, 3)
    args = (_noop, 0, launch, count) if is_coll else (launch, count, _noop, 0)
    for _ in range(2):  # the first round is the warm-up (cuBLAS heuristics, NCCL buffers)
        k_int, c_int, issue_s = _round(streams, *args, prefill_us=20_000)
    own = torch.tensor([statistics.median(durations(c_int if is_coll else k_int)),
                        issue_s * 1e6 / count], dtype=torch.float64, device=device)
    dist.all_reduce(own, op=dist.ReduceOp.MAX)
    return _Solo(float(own[0]), float(own[1]))


def _measure_pair(streams: _Streams, plan: Plan, kernel: Callable[[], None], k_solo: _Solo,
                  coll: Callable[[], None], c_solo: _Solo) -> dict[str, object]:
    """Alone and overlapped rounds, interleaved, ``plan.repeats`` times; pooled statistics."""
    n_k = runs_for(plan.target_us, k_solo.device_us)
    m_c = runs_for(plan.target_us, c_solo.device_us)
    prefill_us = 2.0 * (n_k * k_solo.host_us + m_c * c_solo.host_us) + 2000.0
    k_alone: list[float] = []
    c_alone: list[float] = []
    k_over: list[float] = []
    c_over: list[float] = []
    k_span: list[float] = []
    c_span: list[float] = []
    issue_us = 0.0
    for _ in range(plan.repeats):
        k_int, _, _ = _round(streams, kernel, n_k, _noop, 0, prefill_us)
        k_alone += durations(k_int)
        _, c_int, _ = _round(streams, _noop, 0, coll, m_c, prefill_us)
        c_alone += durations(c_int)
        k_int, c_int, issue_s = _round(streams, kernel, n_k, coll, m_c, prefill_us)
        issue_us = max(issue_us, issue_s * 1e6)
        k_over += durations(covered(k_int, c_int))
        c_over += durations(covered(c_int, k_int))
        k_span += durations(inside(k_int, c_int))
        c_span += durations(inside(c_int, k_int))
    nan = float("nan")

    def stat(values: list[float], how: Callable[[list[float]], float]) -> float:
        return how(values) if values else nan

    result: dict[str, object] = {"n_k": n_k, "m_c": m_c, "prefill_us": prefill_us,
                                 "issue_us": issue_us, "k_inside": len(k_over),
                                 "c_inside": len(c_over)}
    for side, alone, over, span in (("k", k_alone, k_over, k_span),
                                    ("c", c_alone, c_over, c_span)):
        result[f"{side}_alone_mean_us"] = stat(alone, statistics.fmean)
        result[f"{side}_alone_median_us"] = stat(alone, statistics.median)
        result[f"{side}_overlap_mean_us"] = stat(over, statistics.fmean)
        result[f"{side}_overlap_median_us"] = stat(over, statistics.median)
        result[f"{side}_slowdown"] = stat(over, statistics.fmean) / stat(alone, statistics.fmean)
        result[f"{side}_span_inside"] = len(span)
        result[f"{side}_span_slowdown"] = (stat(span, statistics.fmean)
                                          / stat(alone, statistics.fmean))
    return result


@dataclass(frozen=True, slots=True)
class _WorkerArgs:
    rank: int
    ngpus: int
    port: int
    plan: Plan
    log_path: Path
    timeout_s: int


def _worker(args: _WorkerArgs, results: Queue[tuple[str, int, object]]) -> None:
    """One rank: every (kernel, collective, size) of the plan, in the same order on all ranks."""
    try:
        os.environ.update(SAFETY_ENV)
        os.environ.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": DEBUG_SUBSYS,
                           "NCCL_DEBUG_FILE": str(args.log_path)})
        import torch
        import torch.distributed as dist

        device = init_nccl_rank(args.rank, args.ngpus, args.port, args.timeout_s)
        props = torch.cuda.get_device_properties(device)
        streams = _Streams(torch.cuda.Stream(device), torch.cuda.Stream(device))
        plan = args.plan
        colls = {(op, nbytes): _coll_launcher(op, nbytes, args.ngpus, device)
                 for op in plan.colls for nbytes in plan.sizes_bytes}
        c_solo_by_key = {key: _measure_solo(streams, launch, True, plan.warmup, device)
                         for key, launch in colls.items()}
        measured = []
        for name in plan.kernels:
            kernel = _kernel_launcher(KERNELS[name], device)
            k_solo = _measure_solo(streams, kernel, False, plan.warmup, device)
            for (op, nbytes), coll in colls.items():
                result = _measure_pair(streams, plan, kernel, k_solo, coll,
                                       c_solo_by_key[op, nbytes])
                measured.append((name, op, nbytes, result))
                if args.rank == 0:
                    print(f"   {name:<20} {op:<15} {format_bytes(nbytes):>7}: K x"
                          f"{result['k_slowdown']:.3f} ({result['k_inside']} runs), C x"
                          f"{result['c_slowdown']:.3f} ({result['c_inside']} calls)", flush=True)
        dist.destroy_process_group()
        results.put(("ok", args.rank, (props.name, props.multi_processor_count, measured)))
    except BaseException:
        results.put(("error", args.rank, traceback.format_exc()))
        raise


# --- orchestration ----------------------------------------------------------------------------


def _spawn(plan: Plan, ngpus: int, log_dir: Path, timeout_s: int) -> dict[int, object]:
    """One process per GPU; each rank's payload. Raises RuntimeError on a failed or slow rank."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(
        _WorkerArgs(rank, ngpus, port, plan, log_dir / f"nccl_rank{rank}.log", timeout_s),
        results)) for rank in range(ngpus)]
    for proc in procs:
        proc.start()
    payloads: dict[int, object] = {}
    try:
        for _ in range(ngpus):
            status, rank, payload = results.get(timeout=timeout_s)
            if status != "ok":
                raise RuntimeError(f"rank {rank} failed:\n{payload}")
            payloads[rank] = payload
    except queue_module.Empty:
        raise RuntimeError(f"no result within {timeout_s} s") from None
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return payloads


def _nccl_choice(log_path: Path, op: str, nbytes: int, ngpus: int) -> tuple[str, str, int]:
    """NCCL's most frequent (algo, proto, channels) for the call, from a rank's debug log."""
    choices = parse_tuning_log(log_path.read_text(errors="replace").splitlines())
    counter = choices.get((NCCL_FUNC[op], nccl_logged_bytes(op, nbytes, ngpus)))
    if not counter:
        return "?", "?", 0
    choice = counter.most_common(1)[0][0]
    return choice.algo, choice.proto, choice.nchannels


def run(plan: Plan, ngpus: int, out_dir: Path, tag: str, timeout_s: int) -> list[Row]:
    suffix = "" if tag == "default" else f"_{tag}"
    log_dir = out_dir / f"logs{suffix}"
    log_dir.mkdir(parents=True, exist_ok=True)
    report = system_report()
    report["NCCL_* in the environment"] = " ".join(
        f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("NCCL_"))
    (out_dir / f"system{suffix}.txt").write_text(
        "\n\n".join(f"== {title}\n{body}" for title, body in report.items()) + "\n")
    print(f"{tag}: {plan.describe()}; {report['gpus (torch)']}; "
          f"{report['NCCL_* in the environment']}", flush=True)
    payloads = _spawn(plan, ngpus, log_dir, timeout_s)
    rows = []
    for rank, (gpu, sms, measured) in sorted(payloads.items()):
        for name, op, nbytes, result in measured:
            spec = KERNELS[name]
            algo, proto, channels = _nccl_choice(log_dir / "nccl_rank0.log", op, nbytes, ngpus)
            rows.append(Row(tag=tag, rank=rank, gpu=gpu, sms=sms, kernel=name, kind=spec.kind,
                            aten=spec.aten, flops=spec.flops, kernel_bytes=spec.bytes_moved,
                            coll=op, coll_bytes=nbytes, nccl_algo=algo, nccl_proto=proto,
                            nccl_channels=channels, **result))
    write_csv(rows, out_dir / f"results{suffix}.csv")
    return rows


def _names(text: str, known: Sequence[str], what: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(f"unknown or no {what} {unknown}; expected some of {list(known)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.parser(__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="measure on the visible GPUs")
    run_p.add_argument("--out", type=Path, required=True)
    run_p.add_argument("--tag", default="default",
                       help="names the run in the CSV and the file suffixes (e.g. ch8)")
    run_p.add_argument("--kernels", default=",".join(KERNELS))
    run_p.add_argument("--colls", default=",".join(COLLS))
    run_p.add_argument("--sizes", default=DEFAULT_SIZES, help="collective sizes (nccl-tests)")
    run_p.add_argument("--target-ms", type=float, default=30.0,
                       help="device time of each side of a round")
    run_p.add_argument("--repeats", type=int, default=3)
    run_p.add_argument("--warmup", type=int, default=3)
    run_p.add_argument("--ngpus", type=int, default=2)
    run_p.add_argument("--timeout-s", type=int, default=240)
    run_p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    sum_p = sub.add_parser("summarize", help="print the rank-averaged table of stored CSVs")
    sum_p.add_argument("csv", type=Path, nargs="+")
    args = parser.parse_args(argv)

    if args.command == "summarize":
        print(summarize([row for path in args.csv for row in read_csv(path)]))
        return 0
    try:
        sizes = tuple(parse_bytes(size) for size in args.sizes.split(","))
        plan = Plan(_names(args.kernels, list(KERNELS), "kernels"),
                    _names(args.colls, COLLS, "collectives"), sizes,
                    args.target_ms * 1000.0, args.repeats, args.warmup)
    except ValueError as exc:
        parser.error(str(exc))
    bad = [n for n in plan.sizes_bytes if n % (BF16_BYTES * args.ngpus)]
    if bad:
        parser.error(f"sizes {bad} are not multiples of {BF16_BYTES} B x {args.ngpus} GPUs")
    print(plan.describe(), flush=True)
    if args.dry_run:
        return 0
    os.environ.update(SAFETY_ENV)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = run(plan, args.ngpus, args.out, args.tag, args.timeout_s)
    print(summarize(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
