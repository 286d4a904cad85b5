"""Simulator overhead of live training: wall and CPU seconds per simulated GPT-2 step.

The workload is ``scenarios/examples/gpt_ddp.py`` with GPT-2 124M, batch 8 per rank, seq 1024
(bf16 autocast, fused AdamW), at 1, 2, 8 and 16 ranks on H100 hosts of up to 8 GPUs (16 ranks:
2 hosts on a rail-optimized 400 Gbps fabric), each size in a fresh ``phantora-ns3`` process.
While it runs, the bench follows rank 0's log and notes, when each ``step k/N`` line appears,
the wall clock and the CPU time of the whole process tree (coordinator, fork server, ranks).
The cost of a step is the median over steps 3..N of the difference to the previous line (steps
1 and 2 warm up: DDP's single first bucket, then its bucket rebuild), so start-up is left out
and one run suffices. Per step it reports:

* wall and CPU seconds (CPU: this machine's 2 cores are shared, so CPU is the steadier figure);
* the simulated step time the script itself printed (median over the same steps);
* the shares of the CPU time over the whole run from ``summary.json["cpu_seconds"]``:
  ``ranks_script`` (the scripts' own work), ``ranks_simulator`` (fake execution, kernel
  recording and messaging inside the ranks), ``coordinator`` (engine, planning, NVLink model)
  and ``ns3`` (packet-level fabric), seconds summed over processes;
* peak memory per rank process, PSS and RSS, sampled from ``/proc`` (ranks are the
  grandchildren of the ``phantora-ns3`` process: coordinator -> fork server -> ranks). PSS
  counts pages shared with the fork server once, so it is the fair per-rank cost.

Goals: an 8-rank DDP step in <= 4 s wall, <= 150 MB per rank (issue 3); <= 2 s (issue 19).

Usage:
  1. python scripts/bench/bench_live.py                            # 1, 2, 8 and 16 ranks
  2. python scripts/bench/bench_live.py --ranks 8                  # the goal case only
  3. python scripts/bench/bench_live.py --ranks 2 --model tiny --batch-size 2 --seq-len 128   # smoke
  4. python scripts/bench/bench_live.py --backend flow             # fluid network instead of ns-3
     python scripts/bench/bench_live.py --ranks 8 --dedup off      # every rank live (default: mirrored)
  5. python scripts/bench/bench_live.py --steps 10                 # more steps, steadier medians
  6. python scripts/bench/bench_live.py --export-result live.json  # save the rows and header
  7. python scripts/bench/bench_live.py --import-result live.json  # reprint a saved run
"""

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO as ROOT  # noqa: E402

SCRIPT = ROOT / "scenarios" / "examples" / "gpt_ddp.py"
GPUS_PER_HOST = 8
WARMUP_STEPS = 2
"""Steps left out of the per-step figures (DDP's first bucket, then its bucket rebuild)."""
OVERHEAD_PARTS = ("ranks_script", "ranks_simulator", "coordinator", "ns3")
"""Keys of ``summary.json["cpu_seconds"]``, in table order."""
RANK_DEPTH = 2
"""Rank processes are grandchildren of the phantora-ns3 process (coordinator -> fork server)."""
POLL_S = 0.05
"""How often rank 0's log is read for new step lines (and memory sampled, every 5th time)."""
STEP_LINE = re.compile(r"^step (\d+)/\d+ \|.*?\| ([\d.]+) ms")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class StepMark:
    """When rank 0 reported a step: wall and process-tree CPU seconds since the run began."""

    step: int
    wall_s: float
    cpu_s: float
    sim_ms: float


@dataclass
class Row:
    ranks: int
    hosts: int
    steps_measured: int
    wall_s_per_step: float
    cpu_s_per_step: float
    sim_ms_per_step: float
    shares_pct: dict[str, float] | None
    rank_pss_mb: float | None
    rank_rss_mb: float | None
    run_wall_s: float
    run_cpu_s: float


def scenario(ranks: int, args: argparse.Namespace) -> dict[str, Any]:
    """The scenario for ``ranks`` DDP ranks."""
    hosts = max(1, ranks // GPUS_PER_HOST)
    gpus_per_host = ranks // hosts
    cluster: dict[str, Any] = {"gpu": "h100", "hosts": hosts, "gpus_per_host": gpus_per_host}
    if hosts > 1:
        cluster["network"] = {"topology": "rail-optimized", "nic_bandwidth": "400Gbps",
                              "backend": args.backend}
    script_args = ["--model", args.model, "--batch-size", str(args.batch_size),
                   "--seq-len", str(args.seq_len), "--steps", str(args.steps),
                   "--num-workers", str(args.num_workers)]
    return {"name": f"bench-live-ddp-{ranks}", "cluster": cluster,
            "workload": {"script": str(SCRIPT), "args": script_args,
                         "nproc_per_node": gpus_per_host, "env": {"OMP_NUM_THREADS": "1"}},
            "simulation": {"dedup": args.dedup}}


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (which may hold spaces and ')')."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # exited meanwhile
        return None


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, for every process now."""
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))) is not None:
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def levels(root: int) -> list[list[int]]:
    """``root``'s process tree by depth: ``[[root], children, grandchildren, ...]``."""
    tree = _children()
    found = [[root]]
    while next_level := [child for pid in found[-1] for child in tree.get(pid, [])]:
        found.append(next_level)
    return found


def tree_cpu_s(root: int) -> float:
    """User + system CPU seconds of ``root`` and every live descendant."""
    ticks = 0
    for pid in (pid for level in levels(root) for pid in level):
        if (fields := _stat_fields(pid)) is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (proc(5) fields 14, 15)
    return ticks / CLOCK_TICKS


def memory_mb(pid: int) -> tuple[float, float] | None:
    """(PSS, RSS) of ``pid`` in MiB, or None once it has exited."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    kib = {line.split(":")[0]: int(line.split()[1]) for line in text.splitlines()[1:]}
    return kib["Pss"] / 1024, kib["Rss"] / 1024


class RankMemory:
    """Peak PSS and RSS of each process ``RANK_DEPTH`` levels below a root."""

    def __init__(self) -> None:
        self.peaks: dict[int, tuple[float, float]] = {}

    def sample(self, root: int) -> None:
        tree = levels(root)
        for pid in tree[RANK_DEPTH] if len(tree) > RANK_DEPTH else []:
            if (memory := memory_mb(pid)) is not None:
                pss, rss = self.peaks.get(pid, (0.0, 0.0))
                self.peaks[pid] = (max(pss, memory[0]), max(rss, memory[1]))

    def peak_mb(self) -> tuple[float | None, float | None]:
        """The largest per-rank PSS and RSS seen (None if no rank was ever sampled)."""
        if not self.peaks:
            return None, None
        return (round(max(p for p, _ in self.peaks.values()), 1),
                round(max(r for _, r in self.peaks.values()), 1))


def follow(proc: subprocess.Popen[bytes], log: Path, start_s: float,
           memory: RankMemory) -> list[StepMark]:
    """Until ``proc`` exits: read new lines of rank 0's ``log``, mark each step line. Lines read
    only after the exit are not marked: the process tree whose CPU a mark reads is gone by then
    (a mark there read a CPU total lower than the previous one)."""
    marks: list[StepMark] = []
    pending = ""
    offset = 0
    polls = 0
    while True:
        running = proc.poll() is None
        if log.exists():
            with log.open() as file:
                file.seek(offset)
                pending += file.read()
                offset = file.tell()
            *lines, pending = pending.split("\n")
            for line in lines:
                if running and (match := STEP_LINE.match(line)):
                    marks.append(StepMark(int(match[1]), time.perf_counter() - start_s,
                                          tree_cpu_s(proc.pid), float(match[2])))
        if not running:
            return marks
        if polls % 5 == 0:
            memory.sample(proc.pid)
        polls += 1
        time.sleep(POLL_S)


def run_followed(command: list[str], out: Path, console_log: Path, timeout_s: float,
                 memory: RankMemory) -> tuple[subprocess.Popen[bytes], list[StepMark], float]:
    """Run a ``phantora-ns3`` command (its console to ``console_log``, killed after
    ``timeout_s``), following rank 0's log in ``out``; the process, the step marks and the
    run's wall seconds."""
    start = time.perf_counter()
    with console_log.open("wb") as console:
        proc = subprocess.Popen(command, stdout=console, stderr=subprocess.STDOUT)
        watchdog = threading.Timer(timeout_s, proc.kill)
        watchdog.start()
        try:
            marks = follow(proc, out / "ranks" / "rank0.log", start, memory)
        finally:
            watchdog.cancel()
    return proc, marks, time.perf_counter() - start


def measure(ranks: int, args: argparse.Namespace, work: Path) -> Row:
    """Run the scenario for ``ranks`` in a fresh ``phantora-ns3`` process; measure its steps."""
    path = work / f"ddp-{ranks}.yaml"
    path.write_text(yaml.safe_dump(scenario(ranks, args), sort_keys=False))
    out = work / path.stem
    console_log = work / f"{path.stem}.console"
    memory = RankMemory()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc, marks, run_wall = run_followed([sys.executable, "-m", "phantora.cli", str(path),
                                          "--out", str(out)], out, console_log, args.timeout,
                                         memory)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{path.name} failed (exit {proc.returncode}):\n"
                         f"{console_log.read_text()[-4000:]}")
    steady = [(later.wall_s - earlier.wall_s, later.cpu_s - earlier.cpu_s, later.sim_ms)
              for earlier, later in zip(marks, marks[1:], strict=False)
              if later.step > WARMUP_STEPS]
    if not steady:
        raise SystemExit(f"{path.name}: {len(marks)} step lines of rank 0 were read while the "
                         "run was going; too few to measure a step after the warm-up")
    summary = json.loads((out / "summary.json").read_text())
    pss, rss = memory.peak_mb()
    return Row(ranks=ranks, hosts=max(1, ranks // GPUS_PER_HOST), steps_measured=len(steady),
               wall_s_per_step=round(statistics.median(s[0] for s in steady), 2),
               cpu_s_per_step=round(statistics.median(s[1] for s in steady), 2),
               sim_ms_per_step=round(statistics.median(s[2] for s in steady), 2),
               shares_pct=shares(summary.get("cpu_seconds", {})),
               rank_pss_mb=pss, rank_rss_mb=rss, run_wall_s=round(run_wall, 1),
               run_cpu_s=round(after.ru_utime + after.ru_stime
                               - before.ru_utime - before.ru_stime, 1))


def shares(overhead_cpu_s: dict[str, float]) -> dict[str, float] | None:
    """Each part's percentage of the simulator's CPU time; None until all are reported."""
    if not all(part in overhead_cpu_s for part in OVERHEAD_PARTS):
        return None
    total = sum(overhead_cpu_s[part] for part in OVERHEAD_PARTS)
    return {part: round(100 * overhead_cpu_s[part] / total, 1) if total > 0 else 0.0
            for part in OVERHEAD_PARTS}


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def print_table(rows: list[dict[str, Any]], header: str, title: str) -> None:
    table = Table(title=title)
    columns = ["ranks", "hosts", "wall s/step", "CPU s/step", "sim ms/step", "script %",
               "rank sim %", "coordinator %", "ns-3 %", "rank PSS MB", "rank RSS MB",
               "run wall s", "run CPU s"]
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        part_shares = row["shares_pct"] or {}
        table.add_row(*map(_cell, [row["ranks"], row["hosts"], row["wall_s_per_step"],
                                   row["cpu_s_per_step"], row["sim_ms_per_step"],
                                   *(part_shares.get(part) for part in OVERHEAD_PARTS),
                                   row["rank_pss_mb"], row["rank_rss_mb"], row["run_wall_s"],
                                   row["run_cpu_s"]]))
    console = Console(width=200)  # full rows even when piped to a file
    console.print(header)
    console.print(table)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2, 8, 16],
                        help=f"DDP ranks; more than {GPUS_PER_HOST} must be a multiple of it")
    parser.add_argument("--model", default="gpt2-124m")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--num-workers", type=int, default=0,
                        help="DataLoader workers per rank (0: measure the simulator alone)")
    parser.add_argument("--steps", type=int, default=6,
                        help=f"training steps per run; the first {WARMUP_STEPS} are not measured")
    parser.add_argument("--backend", choices=["ns3", "flow"], default="ns3",
                        help="network backend between hosts")
    parser.add_argument("--dedup", choices=["auto", "off"], default="auto",
                        help="simulation.dedup: mirror data-parallel replicas, or run all live")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    common.add_result_flags(parser)
    args = parser.parse_args()
    if saved := common.imported_result(args):
        print_table(saved["rows"], saved["header"], saved["title"])
        return
    for ranks in args.ranks:
        if ranks < 1:
            parser.error(f"--ranks {ranks}: need at least one rank")
        if ranks > GPUS_PER_HOST and ranks % GPUS_PER_HOST:
            parser.error(f"--ranks {ranks}: more than {GPUS_PER_HOST} ranks must fill whole "
                         f"{GPUS_PER_HOST}-GPU hosts")
    if args.steps <= WARMUP_STEPS + 1:
        parser.error(f"--steps {args.steps}: the first {WARMUP_STEPS} are warm-up and the last "
                     f"may print after the run ends; run at least {WARMUP_STEPS + 2}")
    header = common.machine_header()
    title = (f"phantora-ns3 live overhead: {args.model} DDP, batch {args.batch_size} x "
             f"seq {args.seq_len} per rank, {args.backend} between hosts, dedup {args.dedup}")
    print(header, flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for ranks in args.ranks:
            rows.append(asdict(measure(ranks, args, Path(work))))
            print(json.dumps(rows[-1]), flush=True)
    print_table(rows, header, title)
    common.export_result(args, header, rows, title=title)


if __name__ == "__main__":
    main()
