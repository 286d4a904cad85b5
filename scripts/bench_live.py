"""Simulator overhead of live training: wall (and CPU) seconds per simulated GPT-2 step.

The workload is ``scenarios/examples/gpt_ddp.py`` with GPT-2 124M, batch 8 per rank, seq 1024
(bf16 autocast, fused AdamW), at 1, 2, 8 and 16 ranks on H100 hosts of up to 8 GPUs (16 ranks:
2 hosts on a rail-optimized 400 Gbps fabric). Each size runs twice, each time in a fresh
``phantora-ns3`` process, with ``--steps`` short and long; the cost of one step is the
difference divided by the extra steps, which cancels the start-up (fork server, model build,
DDP's first step) out. Per step it reports:

* wall and CPU seconds (CPU: this machine's 2 cores are shared, so CPU is the steadier figure);
* the simulated step time the script itself printed (its ``mean of steps`` line, rank 0);
* the shares of fake execution, interception, coordinator and network in the simulator's CPU
  time, from ``summary.json["overhead_cpu_seconds"]`` (``fake_execution``, ``interception``,
  ``coordinator``, ``network``: seconds summed over processes) once the live path reports it,
  "-" until then;
* peak memory per rank process, PSS and RSS, sampled from ``/proc`` during the long run
  (ranks are the grandchildren of the ``phantora-ns3`` process: coordinator -> fork server ->
  ranks). PSS counts pages shared with the fork server once, so it is the fair per-rank cost.

Goals (issue 3): an 8-rank DDP step in <= 4 s wall, <= 150 MB per rank.

Usage:
  1. python scripts/bench_live.py                            # 1, 2, 8 and 16 ranks
  2. python scripts/bench_live.py --ranks 8                  # the goal case only
  3. python scripts/bench_live.py --ranks 2 --model tiny --batch-size 2 --seq-len 128   # smoke
  4. python scripts/bench_live.py --backend flow             # fluid network instead of ns-3
  5. python scripts/bench_live.py --steps 2 8                # longer runs, steadier per step
  6. python scripts/bench_live.py --export-result live.json  # save the rows and header
  7. python scripts/bench_live.py --import-result live.json  # reprint a saved run
"""

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scenarios" / "examples" / "gpt_ddp.py"
GPUS_PER_HOST = 8
OVERHEAD_PARTS = ("fake_execution", "interception", "coordinator", "network")
"""Keys of ``summary.json["overhead_cpu_seconds"]``, in table order."""
RANK_DEPTH = 2
"""Rank processes are grandchildren of the phantora-ns3 process (coordinator -> fork server)."""
SAMPLE_INTERVAL_S = 0.25
MEAN_STEP = re.compile(r"^mean of steps \S+: ([\d.]+) ms/step", re.MULTILINE)


@dataclass
class Run:
    """One ``phantora-ns3`` process: what it cost and what it reported."""

    steps: int
    wall_s: float
    cpu_s: float
    overhead_cpu_s: dict[str, float]
    sim_step_ms: float | None
    rank_pss_mb: list[float] = field(default_factory=list)
    rank_rss_mb: list[float] = field(default_factory=list)


@dataclass
class Row:
    ranks: int
    hosts: int
    wall_s_per_step: float
    cpu_s_per_step: float
    sim_step_ms: float | None
    shares_pct: dict[str, float] | None
    rank_pss_mb: float | None
    rank_rss_mb: float | None
    short: Run
    long: Run


def scenario(ranks: int, args: argparse.Namespace, steps: int) -> dict[str, Any]:
    """The scenario for ``ranks`` DDP ranks running ``steps`` steps."""
    hosts = max(1, ranks // GPUS_PER_HOST)
    gpus_per_host = ranks // hosts
    cluster: dict[str, Any] = {"gpu": "h100", "hosts": hosts, "gpus_per_host": gpus_per_host}
    if hosts > 1:
        cluster["network"] = {"topology": "rail-optimized", "nic_bandwidth": "400Gbps",
                              "backend": args.backend}
    script_args = ["--model", args.model, "--batch-size", str(args.batch_size),
                   "--seq-len", str(args.seq_len), "--steps", str(steps),
                   "--num-workers", str(args.num_workers)]
    return {"name": f"bench-live-ddp-{ranks}", "cluster": cluster,
            "workload": {"script": str(SCRIPT), "args": script_args,
                         "nproc_per_node": gpus_per_host, "env": {"OMP_NUM_THREADS": "1"}}}


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, for every process now."""
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name may hold spaces and ')'
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _memory_mb(pid: int) -> tuple[float, float] | None:
    """(PSS, RSS) of ``pid`` in MiB, or None once it has exited."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    kib = {line.split(":")[0]: int(line.split()[1]) for line in text.splitlines()[1:]}
    return kib["Pss"] / 1024, kib["Rss"] / 1024


class RankMemorySampler:
    """Peak PSS and RSS of each process ``RANK_DEPTH`` levels below ``root``, while it runs."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peaks: dict[int, tuple[float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            tree = _children()
            level = [self.root]
            for _ in range(RANK_DEPTH):
                level = [child for pid in level for child in tree.get(pid, [])]
            for pid in level:
                memory = _memory_mb(pid)
                if memory is not None:
                    pss, rss = self.peaks.get(pid, (0.0, 0.0))
                    self.peaks[pid] = (max(pss, memory[0]), max(rss, memory[1]))

    def stop(self) -> tuple[list[float], list[float]]:
        """Stop sampling; the peak PSS and RSS of each rank process seen, in MiB."""
        self._stop.set()
        self._thread.join()
        return ([round(p, 1) for p, _ in self.peaks.values()],
                [round(r, 1) for _, r in self.peaks.values()])


def run_once(ranks: int, steps: int, args: argparse.Namespace, work: Path) -> Run:
    """Run the scenario in a fresh ``phantora-ns3`` process; measure it."""
    path = work / f"ddp-{ranks}-{steps}.yaml"
    path.write_text(yaml.safe_dump(scenario(ranks, args, steps), sort_keys=False))
    out = work / path.stem
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "phantora.cli", str(path), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = RankMemorySampler(proc.pid)
    console_out, _ = proc.communicate(timeout=args.timeout)
    wall = time.perf_counter() - start
    pss, rss = sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{path.name} failed (exit {proc.returncode}):\n{console_out[-4000:]}")
    summary = json.loads((out / "summary.json").read_text())
    rank0 = (out / "ranks" / "rank0.log").read_text()
    mean_step = MEAN_STEP.search(rank0)
    return Run(steps=steps, wall_s=round(wall, 2),
               cpu_s=round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
               overhead_cpu_s=summary.get("overhead_cpu_seconds", {}),
               sim_step_ms=float(mean_step[1]) if mean_step else None,
               rank_pss_mb=pss, rank_rss_mb=rss)


def measure(ranks: int, args: argparse.Namespace, work: Path) -> Row:
    """Two runs of different length; the per-step cost is their difference."""
    short_steps, long_steps = args.steps
    short = run_once(ranks, short_steps, args, work)
    long = run_once(ranks, long_steps, args, work)
    extra = long_steps - short_steps
    shares = None
    if all(part in long.overhead_cpu_s and part in short.overhead_cpu_s
           for part in OVERHEAD_PARTS):
        per_part = {part: long.overhead_cpu_s[part] - short.overhead_cpu_s[part]
                    for part in OVERHEAD_PARTS}
        total = sum(per_part.values())
        shares = {part: round(100 * s / total, 1) if total > 0 else 0.0
                  for part, s in per_part.items()}
    return Row(ranks=ranks, hosts=max(1, ranks // GPUS_PER_HOST),
               wall_s_per_step=round((long.wall_s - short.wall_s) / extra, 2),
               cpu_s_per_step=round((long.cpu_s - short.cpu_s) / extra, 2),
               sim_step_ms=long.sim_step_ms, shares_pct=shares,
               rank_pss_mb=max(long.rank_pss_mb, default=None),
               rank_rss_mb=max(long.rank_rss_mb, default=None), short=short, long=long)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def print_table(rows: list[dict[str, Any]], header: str, title: str) -> None:
    table = Table(title=title)
    columns = ["ranks", "hosts", "wall s/step", "CPU s/step", "sim ms/step", "fake exec %",
               "intercept %", "coordinator %", "network %", "rank PSS MB", "rank RSS MB",
               "wall s (runs)"]
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        shares = row["shares_pct"] or {}
        table.add_row(*map(_cell, [row["ranks"], row["hosts"], row["wall_s_per_step"],
                                   row["cpu_s_per_step"], row["sim_step_ms"],
                                   *(shares.get(part) for part in OVERHEAD_PARTS),
                                   row["rank_pss_mb"], row["rank_rss_mb"]]),
                      f"{row['short']['wall_s']:.0f} / {row['long']['wall_s']:.0f}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # keep rows whole in logs and pipes
    console.print(header)
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2, 8, 16],
                        help=f"DDP ranks; more than {GPUS_PER_HOST} must be a multiple of it")
    parser.add_argument("--model", default="gpt2-124m")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--num-workers", type=int, default=0,
                        help="DataLoader workers per rank (0: measure the simulator alone)")
    parser.add_argument("--steps", type=int, nargs=2, default=[2, 5], metavar=("SHORT", "LONG"),
                        help="steps of the two runs whose difference is measured")
    parser.add_argument("--backend", choices=["ns3", "flow"], default="ns3",
                        help="network backend between hosts")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--export-result", type=Path)
    parser.add_argument("--import-result", type=Path)
    args = parser.parse_args()
    if args.import_result:
        saved = json.loads(args.import_result.read_text())
        print_table(saved["rows"], saved["header"], saved["title"])
        return
    for ranks in args.ranks:
        if ranks > GPUS_PER_HOST and ranks % GPUS_PER_HOST:
            parser.error(f"--ranks {ranks}: more than {GPUS_PER_HOST} ranks must fill whole "
                         f"{GPUS_PER_HOST}-GPU hosts")
    if args.steps[1] <= args.steps[0]:
        parser.error(f"--steps {args.steps[0]} {args.steps[1]}: LONG must exceed SHORT")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    header = (f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
              f"Python {platform.python_version()}; commit {commit}")
    title = (f"phantora-ns3 live overhead: {args.model} DDP, batch {args.batch_size} x "
             f"seq {args.seq_len} per rank, {args.backend} between hosts")
    print(header, flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for ranks in args.ranks:
            rows.append(asdict(measure(ranks, args, Path(work))))
            print(json.dumps(rows[-1]), flush=True)
    print_table(rows, header, title)
    if args.export_result:
        args.export_result.write_text(json.dumps({"header": header, "title": title,
                                                  "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
