"""Measure NCCL collectives on the GPUs of one host as nccl-tests does, and record what NCCL chose.

Ground truth for phantora's NCCL model: per (op, size) the time per call, algbw and busbw
(nccl-tests definitions, doc/PERFORMANCE.md), and the algorithm, protocol and channel count
NCCL's tuner picked, read back from its ``NCCL_DEBUG=INFO`` log. Forced ``NCCL_ALGO`` x
``NCCL_PROTO`` all_reduce sweeps fit the protocol model. One process per GPU, bf16.

Usages (run from the repository root):

 1. Full sweep on every visible GPU, default sizes 64KiB..1GiB x2 (..4GiB on >= 4 GPUs), plus
    the forced variants:
      python3 scripts/measure/measure_collectives.py --out /tmp/coll
 1b. The same into a folder named after the machine (h200x8 on eight H200s), ending within
    240 s, NCCL's logs packed into logs.tar.gz (what a device run sends back, <= 8 files):
      python3 scripts/measure/measure_collectives.py --out "$OUT/collectives/{machine}" \
          --budget-s 240 --tar-logs
 2. Two ops, coarser sizes, no forced variants:
      python3 scripts/measure/measure_collectives.py --out /tmp/coll --ops all_reduce,all_gather \\
          --step-factor 4 --variants default
 3. Show the plan without touching a GPU:
      python3 scripts/measure/measure_collectives.py --out /tmp/coll/{machine} --machine h200x8 --dry-run
 4. Print a stored table, re-reading NCCL's choices from the raw logs (a directory, or a
    .tar.gz of the ``logs/`` directory as the device run sent it back):
      python3 scripts/measure/measure_collectives.py \\
          --import-result scripts/data/collectives/h200x2/results.csv \\
          --log-dir scripts/data/collectives/h200x2/logs.tar.gz

Output of a run under ``--out DIR`` (``{machine}`` in DIR becomes ``<gpu>x<count>``, e.g.
``h200x8``, from the GPU name and the process count): ``results.csv`` (one row per variant, op
and size; rewritten after each variant, so a cut-off run keeps what it finished),
``system.txt`` (GPU, driver, NVLink topology, versions), ``stdout.log`` (what the run printed)
and ``logs/nccl_<variant>_rank<r>.log`` (``logs.tar.gz`` with ``--tar-logs``). One process per
GPU: ``--ngpus``, by default every visible GPU. With ``--budget-s`` no variant starts after that
many seconds and one still running then is stopped (the default variant runs first).

Timing: after ``--warmup`` calls, ``--iters`` back-to-back calls are bracketed by CUDA events
on the caller's stream, ``--repeats`` times; a rank's time is the median of the repeats'
per-call averages. ``time_us`` is the mean of the ranks' times (nccl-tests ``-a 1``),
``time_max_us`` their maximum. Before each timed loop a ``torch.cuda._sleep`` of
``--prefill-us`` holds the stream so that all calls are queued before the first starts: the
events then see device time, not PyTorch's per-call host overhead (nccl-tests launches from C
with far less overhead, so this is the closer comparison).

NB: ``torch.distributed`` has only in-place all_reduce and broadcast; nccl-tests' default
numbers are out-of-place. NCCL moves the same bytes either way.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import multiprocessing
import os
import platform
import queue as queue_module
import re
import socket
import statistics
import subprocess
import sys
import tarfile
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from multiprocessing.queues import Queue
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from hwmodel.units import format_bytes, parse_bytes  # noqa: E402
from scripts import common  # noqa: E402
from scripts.common import SAFETY_ENV  # noqa: E402
from scripts.measure.measure_steps import machine_gpus, machine_name  # noqa: E402

if TYPE_CHECKING:
    import torch

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
# The name NCCL prints for each op in its tuning lines (enqueue.cc, "Bytes -> Algo").
NCCL_FUNC = {
    "all_reduce": "AllReduce",
    "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "all_to_all": "AlltoAll",
}
# Ops whose NCCL count is per rank (sendcount, recvcount, per-peer count), not the whole buffer.
PER_RANK_COUNT_OPS = frozenset({"all_gather", "reduce_scatter", "all_to_all"})
FORCED_ALGOS = ("Ring", "Tree")
FORCED_PROTOS = ("Simple", "LL", "LL128")
DEFAULT_FORCED_SIZES = "64KiB,1MiB,16MiB,256MiB,1GiB"
DEFAULT_MAX_BYTES = "1GiB"
DEFAULT_MAX_BYTES_MANY_GPUS = "4GiB"
"""Largest size from this many GPUs on (issue 5: 64 KiB..4 GiB at 4 and 8 GPUs)."""
MANY_GPUS = 4
DEFAULT_DEBUG_SUBSYS = "INIT,ENV,TUNING,GRAPH"
BF16_BYTES = 2

_TUNING_LINE = re.compile(
    r"NCCL INFO (?P<func>\w+): (?P<nbytes>\d+) Bytes -> Algo (?P<algo>\S+) proto (?P<proto>\S+) "
    r"channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\}"
)


# --- pure helpers (no torch) ------------------------------------------------------------------


def default_max_bytes(ngpus: int | None) -> str:
    """``--max-bytes`` when not given: 4 GiB from ``MANY_GPUS`` GPUs on, else 1 GiB."""
    return DEFAULT_MAX_BYTES_MANY_GPUS if (ngpus or 0) >= MANY_GPUS else DEFAULT_MAX_BYTES


def size_ladder(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """Sizes ``min_bytes * factor**k`` up to ``max_bytes``, as nccl-tests ``-b -e -f``."""
    if min_bytes <= 0 or max_bytes < min_bytes or factor < 2:
        raise ValueError(
            f"need 0 < min ({min_bytes}) <= max ({max_bytes}) and factor ({factor}) >= 2"
        )
    sizes = []
    nbytes = min_bytes
    while nbytes <= max_bytes:
        sizes.append(nbytes)
        nbytes *= factor
    return sizes


def busbw_factor(op: str, ngpus: int) -> float:
    """nccl-tests' bus-bandwidth factor: what each rank's link carries per byte of algbw."""
    if op == "all_reduce":
        return 2 * (ngpus - 1) / ngpus
    if op == "broadcast":
        return 1.0
    return (ngpus - 1) / ngpus


def nccl_logged_bytes(op: str, nbytes: int, ngpus: int) -> int:
    """Bytes NCCL prints for a call whose nccl-tests size is ``nbytes`` (count x dtype size)."""
    return nbytes // ngpus if op in PER_RANK_COUNT_OPS else nbytes


def check_pattern(op: str, rank: int, ngpus: int) -> tuple[list[int], list[int]]:
    """Per-chunk input values and expected output values of an exact check (small ints in bf16).

    Buffers are viewed as ``ngpus`` equal chunks; all_to_all sends chunk j to rank j.
    """
    if op == "all_to_all":
        sent = [rank * ngpus + j + 1 for j in range(ngpus)]
        return sent, [i * ngpus + rank + 1 for i in range(ngpus)]
    sent = [rank + 1] * ngpus
    total = ngpus * (ngpus + 1) // 2
    expected = {
        "all_reduce": [total] * ngpus,
        "reduce_scatter": [total] * ngpus,
        "broadcast": [1] * ngpus,  # root 0 sends its rank + 1
        "all_gather": [i + 1 for i in range(ngpus)],
    }[op]
    return sent, expected


@dataclass(frozen=True, slots=True)
class Variant:
    """One NCCL configuration to measure: its own processes, communicator and log."""

    name: str
    """``"default"`` (NCCL's own choice) or ``"<algo>/<proto>"`` as given to NCCL."""
    ops: tuple[str, ...]
    sizes_bytes: tuple[int, ...]

    @property
    def env(self) -> dict[str, str]:
        """NCCL variables that force this variant; empty for the default."""
        if self.name == "default":
            return {}
        algo, proto = self.name.split("/")
        return {"NCCL_ALGO": algo, "NCCL_PROTO": proto}


def rank_log_name(variant: str, rank: int) -> str:
    """``"Ring/LL"``, 1 -> ``"nccl_Ring-LL_rank1.log"``."""
    return f"nccl_{variant.replace('/', '-')}_rank{rank}.log"


def parse_variant_names(text: str) -> list[str]:
    """``"default,Ring/LL"`` -> names; ``"all"`` is default plus every forced pair."""
    forced = [f"{a}/{p}" for a in FORCED_ALGOS for p in FORCED_PROTOS]
    if text == "all":
        return ["default", *forced]
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name != "default" and name not in forced]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; expected 'default', 'all' or {forced}")
    return names


@dataclass(frozen=True, slots=True)
class TuningChoice:
    """What NCCL's tuner picked for one call, as printed on rank 0."""

    algo: str
    proto: str
    nchannels: int


def parse_tuning_log(lines: Iterable[str]) -> dict[tuple[str, int], Counter[TuningChoice]]:
    """Count NCCL's choices per (NCCL function name, logged bytes) in a rank-0 debug log."""
    choices: dict[tuple[str, int], Counter[TuningChoice]] = {}
    for line in lines:
        match = _TUNING_LINE.search(line)
        if match is None:
            continue
        key = (match["func"], int(match["nbytes"]))
        nchannels = int(match["hi"]) - int(match["lo"]) + 1
        choice = TuningChoice(match["algo"], match["proto"], nchannels)
        choices.setdefault(key, Counter())[choice] += 1
    return choices


@dataclass(slots=True)
class ResultRow:
    """One line of results.csv; field order is the column order."""

    gpu: str
    ngpus: int
    op: str
    bytes: int
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    algo: str
    proto: str
    nchannels: str
    variant: str
    time_max_us: float


CSV_COLUMNS = tuple(f.name for f in fields(ResultRow))


def make_row(gpu: str, ngpus: int, variant: str, op: str, nbytes: int,
             rank_times_us: Sequence[float]) -> ResultRow:
    """Combine the ranks' times into one row; bandwidths in GB/s (1e9 B/s) as nccl-tests."""
    time_us = statistics.fmean(rank_times_us)
    algbw_gbs = nbytes / (time_us * 1e-6) / 1e9
    return ResultRow(
        gpu=gpu, ngpus=ngpus, op=op, bytes=nbytes, time_us=round(time_us, 3),
        algbw_gbs=round(algbw_gbs, 3),
        busbw_gbs=round(algbw_gbs * busbw_factor(op, ngpus), 3),
        algo="", proto="", nchannels="", variant=variant,
        time_max_us=round(max(rank_times_us), 3),
    )


def read_rank0_logs(log_source: Path) -> dict[str, list[str]]:
    """Rank-0 log lines by file name, from a log directory or a .tar.gz of ``logs/``."""
    if log_source.is_dir():
        paths = sorted(log_source.glob(rank_log_name("*", 0)))
        return {path.name: path.read_text(errors="replace").splitlines() for path in paths}
    logs = {}
    with tarfile.open(log_source) as archive:
        for member in archive.getmembers():
            name = Path(member.name)
            if name.parent.name == "logs" and name.match(rank_log_name("*", 0)):
                data = archive.extractfile(member)
                if data is not None:
                    logs[name.name] = data.read().decode(errors="replace").splitlines()
    return logs


def annotate_rows(rows: list[ResultRow], log_source: Path) -> list[str]:
    """Fill algo/proto/nchannels from each variant's rank-0 log; return warnings to print."""
    warnings: list[str] = []
    logs = read_rank0_logs(log_source)
    parsed: dict[str, dict[tuple[str, int], Counter[TuningChoice]]] = {}
    for row in rows:
        name = rank_log_name(row.variant, 0)
        if name not in parsed:
            if name not in logs:
                warnings.append(f"no {name} in {log_source}: NCCL's choices for {row.variant} "
                                "unknown")
            parsed[name] = parse_tuning_log(logs.get(name, ()))
        key = (NCCL_FUNC[row.op], nccl_logged_bytes(row.op, row.bytes, row.ngpus))
        counts = parsed[name].get(key)
        if counts is None:
            row.algo = row.proto = row.nchannels = ""
            continue
        (choice, _), *others = counts.most_common()
        row.algo, row.proto, row.nchannels = choice.algo, choice.proto, str(choice.nchannels)
        if others:
            warnings.append(
                f"{row.variant} {row.op} {format_bytes(row.bytes)}: NCCL made several choices "
                f"{dict(counts)}; recorded the most common"
            )
    return warnings


def write_csv(rows: Sequence[ResultRow], path: Path) -> None:
    """results.csv with the columns of ``ResultRow``."""
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)


def read_csv(path: Path) -> list[ResultRow]:
    """Rows written by ``write_csv``."""
    with path.open(newline="") as src:
        return [
            ResultRow(
                gpu=rec["gpu"], ngpus=int(rec["ngpus"]), op=rec["op"], bytes=int(rec["bytes"]),
                time_us=float(rec["time_us"]), algbw_gbs=float(rec["algbw_gbs"]),
                busbw_gbs=float(rec["busbw_gbs"]), algo=rec["algo"], proto=rec["proto"],
                nchannels=rec["nchannels"], variant=rec["variant"],
                time_max_us=float(rec["time_max_us"]),
            )
            for rec in csv.DictReader(src)
        ]


def format_table(rows: Sequence[ResultRow]) -> str:
    """A fixed-width table in nccl-tests' spirit, one line per row."""
    header = (f"{'variant':<12} {'op':<15} {'size':>8} {'time_us':>10} {'max_us':>10} "
              f"{'algbw':>8} {'busbw':>8}  {'algo':<6} {'proto':<6} {'nch':>3}")
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.variant:<12} {row.op:<15} {format_bytes(row.bytes):>8} {row.time_us:>10.2f} "
            f"{row.time_max_us:>10.2f} {row.algbw_gbs:>8.2f} {row.busbw_gbs:>8.2f}  "
            f"{row.algo:<6} {row.proto:<6} {row.nchannels:>3}"
        )
    return "\n".join(lines)


# --- GPU side (one process per rank) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimingSpec:
    """How each (op, size) is timed; nccl-tests ``-w 5 -n 20`` by default."""

    warmup: int
    iters: int
    repeats: int
    prefill_us: int
    # torch.cuda._sleep counts SM cycles; 2 GHz is at or above the H100/H200 boost clock, so the
    # hold lasts at least prefill_us.
    cycles_per_us: int = 2000


@dataclass(frozen=True, slots=True)
class NcclLogSpec:
    """What NCCL writes to each rank's log file."""

    level: str
    """NCCL_DEBUG: INFO records the tuner's choices; WARN keeps logging off the host's path."""
    subsys: str
    """NCCL_DEBUG_SUBSYS."""


@dataclass(frozen=True, slots=True)
class WorkerArgs:
    """Everything one rank process needs (pickled to the spawned child)."""

    rank: int
    ngpus: int
    port: int
    variant: Variant
    timing: TimingSpec
    log_path: Path
    log_spec: NcclLogSpec
    timeout_s: float


def _buffers(op: str, nbytes: int, ngpus: int,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, output) bf16 buffers of an nccl-tests size; the same tensor for in-place ops."""
    import torch

    numel = nbytes // BF16_BYTES
    big = torch.empty(numel, dtype=torch.bfloat16, device=device)
    if op in ("all_reduce", "broadcast"):
        return big, big
    small = torch.empty(numel // ngpus, dtype=torch.bfloat16, device=device)
    if op == "all_gather":
        return small, big
    if op == "reduce_scatter":
        return big, small
    return big, torch.empty_like(big)  # all_to_all: per-rank buffer in and out


def _launch(op: str, inp: torch.Tensor, out: torch.Tensor) -> None:
    """One synchronous-on-stream collective call through torch.distributed."""
    import torch.distributed as dist

    if op == "all_reduce":
        dist.all_reduce(inp)
    elif op == "broadcast":
        dist.broadcast(inp, src=0)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, inp)
    elif op == "reduce_scatter":
        dist.reduce_scatter_tensor(out, inp)
    else:
        dist.all_to_all_single(out, inp)


def _check(op: str, inp: torch.Tensor, out: torch.Tensor, rank: int, ngpus: int) -> None:
    """Run the op once on exact small-integer data and compare every element."""
    import torch

    sent, expected = check_pattern(op, rank, ngpus)
    out.fill_(float("nan"))  # poison first: an unwritten element fails the comparison
    inp.view(ngpus, -1).copy_(torch.tensor(sent, dtype=inp.dtype, device=inp.device)[:, None])
    _launch(op, inp, out)
    want = torch.tensor(expected, dtype=out.dtype, device=out.device)[:, None]
    if not torch.equal(out.view(ngpus, -1), want.expand(ngpus, out.numel() // ngpus)):
        raise RuntimeError(f"rank {rank}: {op} from {inp.numel()} to {out.numel()} elements "
                           "gave a wrong result")


def _time_op(op: str, nbytes: int, rank: int, ngpus: int, timing: TimingSpec,
             device: torch.device) -> float:
    """Median over repeats of the per-call device time in microseconds."""
    import torch
    import torch.distributed as dist

    inp, out = _buffers(op, nbytes, ngpus, device)
    _check(op, inp, out, rank, ngpus)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call_us: list[float] = []
    for repeat in range(timing.repeats):
        # Random data, refreshed so in-place all_reduce (x ngpus per call) never overflows;
        # zeros could run faster than real data.
        inp.normal_()
        for _ in range(timing.warmup if repeat == 0 else 0):
            _launch(op, inp, out)
        dist.barrier()
        torch.cuda.synchronize(device)
        torch.cuda._sleep(timing.prefill_us * timing.cycles_per_us)
        start.record()
        for _ in range(timing.iters):
            _launch(op, inp, out)
        end.record()
        end.synchronize()
        per_call_us.append(start.elapsed_time(end) * 1000.0 / timing.iters)
    return statistics.median(per_call_us)


def init_nccl_rank(rank: int, ngpus: int, port: int, timeout_s: float) -> torch.device:
    """Join this process to the NCCL group of ``ngpus`` ranks on this host (rendezvous on
    127.0.0.1:``port``) as ``rank``, on GPU ``rank``; returns that device. Set the NCCL
    environment first: NCCL reads it when the communicator is made."""
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ngpus,
        device_id=device, timeout=datetime.timedelta(seconds=timeout_s))
    return device


def _worker(args: WorkerArgs, results: Queue[tuple[str, int, object]]) -> None:
    """One rank: NCCL communicator for the variant, then every (op, size) in order."""
    try:
        for key in ("NCCL_ALGO", "NCCL_PROTO"):
            os.environ.pop(key, None)
        os.environ.update(SAFETY_ENV)
        os.environ.update(args.variant.env)
        os.environ.update({"NCCL_DEBUG": args.log_spec.level,
                           "NCCL_DEBUG_SUBSYS": args.log_spec.subsys,
                           "NCCL_DEBUG_FILE": str(args.log_path)})
        import torch.distributed as dist

        device = init_nccl_rank(args.rank, args.ngpus, args.port, args.timeout_s)
        times = {
            (op, nbytes): _time_op(op, nbytes, args.rank, args.ngpus, args.timing, device)
            for op in args.variant.ops
            for nbytes in args.variant.sizes_bytes
        }
        dist.destroy_process_group()
        results.put(("ok", args.rank, times))
    except BaseException:
        results.put(("error", args.rank, traceback.format_exc()))
        raise


# --- orchestration ----------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on this host now, for the ranks' rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_variant(variant: Variant, ngpus: int, timing: TimingSpec, log_dir: Path,
                log_spec: NcclLogSpec, timeout_s: float,
                wait_s: float | None = None) -> dict[tuple[str, int], list[float]]:
    """Spawn one process per GPU for ``variant``; per (op, bytes), each rank's time in us.

    Raises RuntimeError with the failing rank's traceback, or when the ranks outlive
    ``wait_s`` (default ``timeout_s``, which is also the process group's timeout); their
    processes are killed first.
    """
    wait_s = timeout_s if wait_s is None else wait_s
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_worker, args=(
            WorkerArgs(rank, ngpus, port, variant, timing,
                       log_dir / rank_log_name(variant.name, rank), log_spec, timeout_s),
            results,
        ))
        for rank in range(ngpus)
    ]
    for proc in procs:
        proc.start()
    per_rank: dict[int, dict[tuple[str, int], float]] = {}
    deadline = time.monotonic() + wait_s
    failed = True
    try:
        for _ in range(ngpus):
            try:
                status, rank, payload = results.get(
                    timeout=max(deadline - time.monotonic(), 0.1))
            except queue_module.Empty:
                raise RuntimeError(f"variant {variant.name}: no result within {wait_s:.0f} s"
                                   ) from None
            if status != "ok":
                raise RuntimeError(f"variant {variant.name}: rank {rank} failed:\n{payload}")
            per_rank[rank] = payload
        failed = False
    finally:
        # A failed rank leaves the others waiting in NCCL: end them all at once.
        join_s = 30.0 if not failed else 0.0
        for proc in procs:
            proc.join(timeout=join_s)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return {key: [per_rank[r][key] for r in range(ngpus)] for key in per_rank[0]}


def _command_output(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        return (done.stdout + done.stderr).rstrip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"<{exc}>"


def system_report() -> dict[str, str]:
    """GPU, driver, NVLink topology, software versions and git commit, by section title."""
    import torch

    nccl = ".".join(str(part) for part in torch.cuda.nccl.version())
    return {
        "date (UTC)": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": f"{platform.node()} {platform.platform()}",
        "git": common.commit(),
        "python": sys.version.split()[0],
        "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
        "nccl (torch.cuda.nccl.version)": nccl,
        "gpus (torch)": ", ".join(torch.cuda.get_device_name(i)
                                  for i in range(torch.cuda.device_count())),
        "safety env": " ".join(f"{k}={v}" for k, v in SAFETY_ENV.items()),
        "nvidia-smi --query-gpu": _command_output([
            "nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,clocks.max.sm,"
            "clocks.max.mem,power.limit,pci.bus_id", "--format=csv"]),
        "nvidia-smi topo -m": _command_output(["nvidia-smi", "topo", "-m"]),
        "nvidia-smi nvlink -s": _command_output(["nvidia-smi", "nvlink", "-s"]),
    }


_HEADLINE_KEYS = ("date (UTC)", "git", "gpus (torch)", "torch", "nccl (torch.cuda.nccl.version)")


def describe_plan(variants: Sequence[Variant], ngpus: int | None, timing: TimingSpec,
                  out_dir: Path | None = None) -> str:
    """Human-readable plan, printed before a run and by ``--dry-run``."""
    lines = [f"GPUs: {ngpus if ngpus else 'all visible'}; timing: {timing}"]
    if out_dir is not None:
        lines.append(f"output: {out_dir}")
    for variant in variants:
        sizes = ", ".join(format_bytes(n) for n in variant.sizes_bytes)
        env = variant.env or "NCCL defaults"
        lines.append(f"  {variant.name:<12} {env}: {', '.join(variant.ops)} at {sizes}")
    return "\n".join(lines)


def build_plan(args: argparse.Namespace, ngpus: int | None = None) -> list[Variant]:
    """Default variant: every requested op over the size ladder; forced: all_reduce only.
    ``args.max_bytes`` None: ``default_max_bytes(ngpus)``."""
    ops = tuple(op.strip() for op in args.ops.split(","))
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        raise ValueError(f"unknown op(s) {unknown}; expected some of {OPS}")
    max_bytes = args.max_bytes or default_max_bytes(ngpus)
    ladder = tuple(size_ladder(parse_bytes(args.min_bytes), parse_bytes(max_bytes),
                               args.step_factor))
    forced_sizes = tuple(parse_bytes(s) for s in args.forced_sizes.split(","))
    return [
        Variant(name, ops, ladder) if name == "default"
        else Variant(name, ("all_reduce",), forced_sizes)
        for name in parse_variant_names(args.variants)
    ]


def _check_divisible(plan: Sequence[Variant], ngpus: int) -> None:
    for variant in plan:
        for nbytes in variant.sizes_bytes:
            if nbytes % (BF16_BYTES * ngpus * ngpus):
                raise ValueError(f"size {nbytes} B is not a multiple of 2 B x {ngpus}^2 GPUs")


def run(plan: Sequence[Variant], ngpus: int, timing: TimingSpec, out_dir: Path,
        log_spec: NcclLogSpec, timeout_s: float, gpu: str,
        budget_s: float | None = None) -> list[ResultRow]:
    """Measure every variant; a failed variant is reported and skipped, not fatal. After each
    variant results.csv is rewritten (choices read from the logs so far). With ``budget_s``,
    no variant starts later than that and a running one is stopped at it."""
    started_s = time.monotonic()
    log_dir = out_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    report = system_report()
    (out_dir / "system.txt").write_text(
        "\n\n".join(f"== {title}\n{body}" for title, body in report.items()) + "\n")
    print(" | ".join(f"{key}: {report[key]}" for key in _HEADLINE_KEYS), flush=True)
    rows: list[ResultRow] = []
    for variant in plan:
        left_s = timeout_s
        if budget_s is not None:
            left_s = min(timeout_s, budget_s - (time.monotonic() - started_s))
            if left_s < 1.0:
                print(f"!! variant {variant.name} skipped: budget of {budget_s:.0f} s spent",
                      flush=True)
                continue
        print(f"-- variant {variant.name}", flush=True)
        variant_start_s = time.monotonic()
        try:
            times = run_variant(variant, ngpus, timing, log_dir, log_spec, timeout_s, left_s)
        except RuntimeError as exc:
            print(f"!! {exc}", flush=True)
            continue
        finally:
            print(f"   {time.monotonic() - variant_start_s:.1f} s", flush=True)
        rows.extend(make_row(gpu, ngpus, variant.name, op, nbytes, rank_times)
                    for (op, nbytes), rank_times in times.items())
        annotate_rows(rows, log_dir)
        write_csv(rows, out_dir / "results.csv")
    return rows


def pack_logs(out_dir: Path) -> Path:
    """``out_dir/logs/`` -> ``out_dir/logs.tar.gz`` (members ``logs/...``, as
    ``read_rank0_logs`` reads them); the folder is removed."""
    log_dir = out_dir / "logs"
    archive = out_dir / "logs.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(log_dir, arcname="logs")
    for path in sorted(log_dir.iterdir()):
        path.unlink()
    log_dir.rmdir()
    return archive


class _Tee:
    """Write to the console and to a file at once (the run's ``stdout.log``)."""

    def __init__(self, console: TextIO, path: Path) -> None:
        self.console = console
        self.file = path.open("a")

    def write(self, text: str) -> int:
        self.file.write(text)
        return self.console.write(text)

    def flush(self) -> None:
        self.file.flush()
        self.console.flush()


def resolve_out(out: Path, machine: str) -> Path:
    """``--out`` with ``{machine}`` replaced."""
    return Path(str(out).replace("{machine}", machine))


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.parser(__doc__)
    parser.add_argument("--out", type=Path, help="directory for results.csv, system.txt, logs/")
    parser.add_argument("--import-result", type=Path, metavar="CSV",
                        help="print a stored results.csv instead of measuring")
    parser.add_argument("--log-dir", type=Path,
                        help="with --import-result: re-read NCCL's choices from these logs "
                             "(a directory or a .tar.gz of logs/)")
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated, from %(default)s")
    parser.add_argument("--min-bytes", default="64KiB")
    parser.add_argument("--max-bytes",
                        help=f"default: {DEFAULT_MAX_BYTES}, {DEFAULT_MAX_BYTES_MANY_GPUS} on "
                             f">= {MANY_GPUS} GPUs")
    parser.add_argument("--step-factor", type=int, default=2)
    parser.add_argument("--variants", default="all",
                        help="'all', or comma-separated 'default' and ALGO/PROTO from "
                             f"{FORCED_ALGOS} x {FORCED_PROTOS}")
    parser.add_argument("--forced-sizes", default=DEFAULT_FORCED_SIZES,
                        help="all_reduce sizes for the forced variants")
    parser.add_argument("--ngpus", type=int,
                        help="processes, one per GPU; default: every visible GPU (with "
                             "--dry-run and no GPU: the count in --machine)")
    parser.add_argument("--machine",
                        help="name for '{machine}' in --out; default: <gpu>x<ngpus> from the "
                             "GPU's name, e.g. h200x8")
    parser.add_argument("--budget-s", type=float,
                        help="start no variant after this many seconds, stop one running then")
    parser.add_argument("--tar-logs", action="store_true",
                        help="pack logs/ into logs.tar.gz at the end (fewer files to send back)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prefill-us", type=int, default=3000,
                        help="stream hold before each timed loop; 0 disables")
    parser.add_argument("--debug-subsys", default=DEFAULT_DEBUG_SUBSYS,
                        help="NCCL_DEBUG_SUBSYS for the logs")
    parser.add_argument("--nccl-debug", default="INFO", choices=("INFO", "WARN"),
                        help="NCCL_DEBUG; WARN records no choices but no per-call log write")
    parser.add_argument("--timeout-s", type=float, default=300,
                        help="per variant; ranks still running after it are killed")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    args = parser.parse_args(argv)

    if args.import_result is not None:
        rows = read_csv(args.import_result)
        if args.log_dir is not None:
            for warning in annotate_rows(rows, args.log_dir):
                print(f"warning: {warning}")
        print(format_table(rows))
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            write_csv(rows, args.out / "results.csv")
        return 0
    if args.out is None:
        parser.error("--out is required unless --import-result is given")

    os.environ.update(SAFETY_ENV)  # before torch initialises CUDA in this process
    visible, gpu = visible_gpus()
    ngpus = args.ngpus or visible or (machine_gpus(args.machine) if args.machine else None)
    machine = args.machine or (machine_name(gpu, ngpus) if gpu and ngpus else None)
    if args.machine and ngpus and machine_gpus(args.machine) not in (None, ngpus):
        parser.error(f"--machine {args.machine} says {machine_gpus(args.machine)} GPUs, "
                     f"the run would use {ngpus}")
    out_dir = resolve_out(args.out, machine) if machine else args.out
    if "{machine}" in str(out_dir) and not args.dry_run:
        parser.error("no GPU to name the machine after: give --machine")
    try:
        plan = build_plan(args, ngpus)
    except ValueError as exc:
        parser.error(str(exc))
    timing = TimingSpec(args.warmup, args.iters, args.repeats, args.prefill_us)
    plan_text = describe_plan(plan, ngpus, timing, out_dir)
    print(plan_text, flush=True)
    if args.dry_run:
        if ngpus:
            try:
                _check_divisible(plan, ngpus)
            except ValueError as exc:
                parser.error(str(exc))
        return 0

    if ngpus is None or ngpus < 2 or ngpus > visible:
        parser.error(f"need 2 to {visible} GPUs (the visible ones), asked for {ngpus}")
    try:
        _check_divisible(plan, ngpus)
    except ValueError as exc:
        parser.error(str(exc))
    out_dir.mkdir(parents=True, exist_ok=True)
    console = sys.stdout
    tee = _Tee(console, out_dir / "stdout.log")
    sys.stdout = tee  # type: ignore[assignment]
    try:
        tee.file.write(plan_text + "\n")
        log_spec = NcclLogSpec(args.nccl_debug, args.debug_subsys)
        rows = run(plan, ngpus, timing, out_dir, log_spec, args.timeout_s, gpu or "unknown",
                   args.budget_s)
        for warning in annotate_rows(rows, out_dir / "logs"):
            print(f"warning: {warning}")
        write_csv(rows, out_dir / "results.csv")
        print(format_table(rows))
        if args.tar_logs:
            print(f"logs packed into {pack_logs(out_dir)}")
    finally:
        tee.file.close()
        sys.stdout = console
    return 0


def visible_gpus() -> tuple[int, str | None]:
    """(count, name of GPU 0) of the GPUs torch sees; (0, None) without CUDA or torch."""
    try:
        import torch
    except ImportError:
        return 0, None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return count, (torch.cuda.get_device_name(0) if count else None)


if __name__ == "__main__":
    sys.exit(main())
