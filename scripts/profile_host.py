"""Where a real GPU host's CPU goes while a training script runs: cProfile of every rank.

Run on a lent GPU machine, under torchrun, in place of the script:

    torchrun --nproc_per_node 2 scripts/profile_host.py --out $OUT/tp \\
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
import runpy
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the per-rank reports")
    parser.add_argument("--top", type=int, default=80, help="rows per table")
    parser.add_argument("script", help="the training script")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    options = parser.parse_args()
    sys.argv = [options.script, *options.args]
    sys.path.insert(0, str(Path(options.script).resolve().parent))
    profile = cProfile.Profile()
    profile.enable()
    try:
        runpy.run_path(options.script, run_name="__main__")
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
