"""Scale: wall time, memory and live processes of a large FSDP2 job, by GPU count.

The workload is ``scenarios/scale/h100-1024-llama3-8b-fsdp2.yaml`` (Llama 3 8B, FSDP2,
``gpt_fsdp2.py --model llama3-8b --batch-size 2 --seq-len 8192``, selective activation
checkpointing, reproducible host time, 3 steps) on 8-GPU H100 hosts, rail-optimized 400 Gbps,
flow backend, with its host count changed: 8, 64, 256 and 1024 GPUs by default. Each size runs
in a fresh ``phantora-ns3`` process; the bench follows rank 0's log and the process tree
(``bench_live.follow``). Per size it reports:

* live processes: ranks that ran (rank deduplication mirrors the others) and how many ranks
  the run mirrored;
* wall seconds per iteration: the median wall time between rank 0's consecutive step lines
  after the first (the first step includes building the model and the network's routes), and
  the whole run's wall seconds (start-up, every restart and the summary included);
* peak memory of the whole process tree (coordinator, fork server, live ranks), as the sum of
  their PSS (shared pages counted once) sampled every 0.25 s, and the coordinator's peak RSS;
* what the script printed: simulated ms per step (median after the first) and tokens/s/GPU.

Goals (issue 19, this 2-core machine): 1024 GPUs in at most 5 minutes wall for the 3-step run
and at most 16 GiB peak memory.

Usage:
  1. python scripts/bench/bench_scale.py                         # 8, 64, 256, 1024 GPUs
  2. python scripts/bench/bench_scale.py --gpus 1024             # the goal case only
  3. python scripts/bench/bench_scale.py --dedup off --gpus 8    # every rank live
  4. python scripts/bench/bench_scale.py --export-result scale.json / --import-result scale.json
"""

import json
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.bench.bench_live import RankMemory, levels, memory_mb, run_followed  # noqa: E402
from scripts.common import REPO as ROOT  # noqa: E402

SCENARIO = ROOT / "scenarios" / "scale" / "h100-1024-llama3-8b-fsdp2.yaml"
GPUS_PER_HOST = 8


@dataclass
class Row:
    gpus: int
    dedup: str
    status: str
    """``ok``, or ``out of memory`` (the script's own ``torch.OutOfMemoryError``: a real
    finding, e.g. 8 x 80 GB H100 cannot hold this job)."""
    live_processes: int
    mirrored_ranks: int
    wall_s_per_iteration: float | None
    run_wall_s: float
    peak_tree_pss_gib: float
    coordinator_peak_rss_gib: float | None
    sim_ms_per_step: float | None
    tokens_per_s_per_gpu: float | None
    regroups: int


class TreeMemory(RankMemory):
    """Also the peak of the whole tree's summed PSS (coordinator, fork server, ranks)."""

    def __init__(self) -> None:
        super().__init__()
        self.peak_total_mb = 0.0

    def sample(self, root: int) -> None:
        super().sample(root)
        total = sum(m[0] for level in levels(root) for pid in level
                    if (m := memory_mb(pid)) is not None)
        self.peak_total_mb = max(self.peak_total_mb, total)


def scenario(gpus: int, dedup: str) -> dict[str, Any]:
    spec = yaml.safe_load(SCENARIO.read_text())
    spec["name"] = f"bench-scale-{gpus}"
    spec["cluster"]["hosts"] = gpus // GPUS_PER_HOST
    if gpus == GPUS_PER_HOST:
        del spec["cluster"]["network"]  # one host: NVLink only
    spec["workload"]["script"] = str((SCENARIO.parent / spec["workload"]["script"]).resolve())
    spec["simulation"]["dedup"] = dedup
    return spec


def tokens_per_gpu_step(spec: dict[str, Any]) -> int:
    """The script's batch x sequence length per GPU, from its arguments."""
    args = spec["workload"]["args"]
    return int(args[args.index("--batch-size") + 1]) * int(args[args.index("--seq-len") + 1])


def measure(gpus: int, dedup: str, work: Path, timeout_s: float) -> Row:
    path = work / f"scale-{gpus}-{dedup}.yaml"
    spec = scenario(gpus, dedup)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    out = work / path.stem
    console_log = work / f"{path.stem}.console"
    memory = TreeMemory()
    proc, marks, run_wall = run_followed(["/usr/bin/time", "-f", "%M", sys.executable, "-m",
                                          "phantora.cli", str(path), "--out", str(out)],
                                         out, console_log, timeout_s, memory)
    text = console_log.read_text()
    if proc.returncode != 0 and "OutOfMemoryError" in text:
        return Row(gpus=gpus, dedup=dedup, status="out of memory", live_processes=0,
                   mirrored_ranks=0, wall_s_per_iteration=None, run_wall_s=round(run_wall, 1),
                   peak_tree_pss_gib=round(memory.peak_total_mb / 1024, 2),
                   coordinator_peak_rss_gib=None, sim_ms_per_step=None,
                   tokens_per_s_per_gpu=None, regroups=0)
    if proc.returncode != 0:
        raise SystemExit(f"{path.name} failed (exit {proc.returncode}):\n{text[-4000:]}")
    coordinator_kib = int(text.strip().splitlines()[-1])  # /usr/bin/time's %M: max RSS, KiB
    summary = json.loads((out / "summary.json").read_text())
    steady = [later.wall_s - earlier.wall_s
              for earlier, later in zip(marks, marks[1:], strict=False)]
    sim_ms = [mark.sim_ms for mark in marks[1:]]
    dedup_info = summary.get("dedup", {})
    live = len(dedup_info.get("live_ranks", range(gpus)))
    return Row(gpus=gpus, dedup=dedup, status="ok", live_processes=live,
               mirrored_ranks=gpus - live,
               wall_s_per_iteration=round(statistics.median(steady), 1) if steady else None,
               run_wall_s=round(run_wall, 1),
               peak_tree_pss_gib=round(memory.peak_total_mb / 1024, 2),
               coordinator_peak_rss_gib=round(coordinator_kib / 2**20, 2),
               sim_ms_per_step=round(statistics.median(sim_ms), 1) if sim_ms else None,
               tokens_per_s_per_gpu=round(tokens_per_gpu_step(spec) / statistics.median(sim_ms)
                                          * 1e3) if sim_ms else None,
               regroups=len(dedup_info.get("regroups", [])))


def print_table(rows: list[dict[str, Any]], header: str) -> None:
    table = Table(title="phantora-ns3 at scale: Llama 3 8B FSDP2, batch 2 x 8192 per GPU, "
                        "H100 hosts of 8, rail-optimized 400 Gbps, flow backend, 3 steps")
    columns = ["GPUs", "dedup", "status", "live procs", "mirrored", "wall s/iter", "run wall s",
               "peak mem GiB", "coord RSS GiB", "sim ms/step", "tok/s/GPU", "regroups"]
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*("-" if value is None else str(value) for value in row.values()))
    console = Console(width=200)
    console.print(header)
    console.print(table)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--gpus", type=int, nargs="*", default=[8, 64, 256, 1024])
    parser.add_argument("--dedup", choices=["auto", "off"], default="auto")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    common.add_result_flags(parser)
    args = parser.parse_args()
    if saved := common.imported_result(args):
        print_table(saved["rows"], saved["header"])
        return
    for gpus in args.gpus:
        if gpus < GPUS_PER_HOST or gpus % GPUS_PER_HOST:
            parser.error(f"--gpus {gpus}: whole hosts of {GPUS_PER_HOST} GPUs")
    header = common.machine_header()
    print(header, flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for gpus in args.gpus:
            rows.append(asdict(measure(gpus, args.dedup, Path(work), args.timeout)))
            print(json.dumps(rows[-1]), flush=True)
    print_table(rows, header)
    common.export_result(args, header, rows)


if __name__ == "__main__":
    main()
