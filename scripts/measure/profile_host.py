"""Where a real GPU host's CPU goes while a training script runs: cProfile of every rank.

Run on a lent GPU machine, under torchrun, in place of the script:

    torchrun --nproc_per_node 2 scripts/measure/profile_host.py --out $OUT/tp \\
        scenarios/examples/gpt_tp.py --steps 30 --num-workers 0

Writes ``<out>/rank<r>.txt``: the functions with the most own time (C functions included, such
as a storage resize or a C++ dispatch entry that no intercepted op covers) and the most
cumulative time. cProfile slows Python code (every call is timed), so read C functions' own time
and the shares of whole subsystems, not absolute step times.
"""

import argparse
import cProfile
import io
import os
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--out", type=Path, required=True, help="folder of the per-rank reports")
    parser.add_argument("--top", type=int, default=80, help="rows per table")
    parser.add_argument("script", help="the training script")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    options = parser.parse_args()
    profile = cProfile.Profile()
    profile.enable()
    try:
        common.run_as_main(options.script, options.args)
    finally:
        profile.disable()
        options.out.mkdir(parents=True, exist_ok=True)
        report = io.StringIO()
        stats = pstats.Stats(profile, stream=report)
        for order in ("tottime", "cumulative"):
            report.write(f"==== by {order}\n")
            stats.sort_stats(order).print_stats(options.top)
        rank = os.environ.get("RANK", "0")
        (options.out / f"rank{rank}.txt").write_text(report.getvalue())


if __name__ == "__main__":
    main()
