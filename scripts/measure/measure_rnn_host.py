"""Measure the host time of one cuDNN recurrent call: what the CPU spends in ``_cudnn_rnn`` and
``_cudnn_rnn_backward`` before they return (cuDNN enqueues one or more kernels, events and
stream waits per time step and layer), beside the host-speed probe.

Each case times the call's wall time on the host while the GPU is held by a ``torch.cuda._sleep``
(about 0.05 s) so that nothing the call enqueues can start, the median of ``REPEATS`` calls after
``WARMUP``. A call that filled the driver's launch queue would wait for the sleep: such a row
(``queue_full``) says nothing of the host. The GPU time of the same calls is in the kernel tables (``measure_kernels.py
--sections rnn``). A cloud host's speed drifts within minutes, so each case carries its own
host-speed probe (``intercept.host_time.host_benchmark``, taken just before it, ``probe_ns``);
the run's first and last probes are kept too. The grid holds two layer widths (512, the zoo
LSTM's 1024); shapes between them are the check cases (``"check": true``). Writes
``rnn_host.json``.

  python3 scripts/measure/measure_rnn_host.py --out "$OUT/rnn_host"    # on a GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts.measure import measure_kernels as mk  # noqa: E402  (sets the safety environment)

import torch  # noqa: E402

from intercept.host_time import host_benchmark  # noqa: E402

SEQS = (8, 32, 128)
LAYERS = (1, 2)
DIRECTIONS = (1, 2)
BATCH = 32
HIDDENS = (512, 1024)
CHECK_CASES = (("lstm", "fp16", (96, 32, 768, 768, 2, 1)), ("gru", "fp32", (64, 32, 768, 768, 1, 2)))
"""Shapes between the grid's: measured, not fitted on."""
PROBE_ROUNDS = 3
WARMUP, REPEATS = 2, 5
SLEEP_CYCLES = 100_000_000
"""A ``torch.cuda._sleep`` of about 0.05 s, longer than any case's host time."""
QUEUE_FULL_NS = 30_000_000


def host_ns(call: mk.Call) -> int:
    """Median host wall time of ``call`` with the GPU held busy."""
    times = []
    for index in range(WARMUP + REPEATS):
        torch.cuda.synchronize()
        torch.cuda._sleep(SLEEP_CYCLES)
        start = time.perf_counter_ns()
        call()
        elapsed = time.perf_counter_ns() - start
        if index >= WARMUP:
            times.append(elapsed)
    torch.cuda.synchronize()
    return round(statistics.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    device = torch.device("cuda")
    probe_before = host_benchmark.measure()
    grid = [(cell, dtype, (seq, BATCH, hidden, hidden, layers, directions), False)
            for cell in ("lstm", "gru") for dtype in ("fp16", "fp32") for hidden in HIDDENS
            for seq in SEQS for layers in LAYERS for directions in DIRECTIONS]
    rows = []
    for cell, dtype, dims, check in [*grid, *((*case, True) for case in CHECK_CASES)]:
        seq, batch, _input, hidden, layers, directions = dims
        for direction in ("fwd", "bwd"):
            call = mk.rnn_case(direction, cell, dtype, dims).build(device)
            probe = host_benchmark.measure(rounds=PROBE_ROUNDS)
            elapsed = host_ns(call)
            rows.append({"cell": cell, "dtype": dtype, "seq": seq, "batch": batch,
                         "hidden": hidden, "layers": layers, "directions": directions,
                         "pass": direction, "check": check, "host_ns": elapsed,
                         "queue_full": elapsed > QUEUE_FULL_NS, "probe_ns": probe})
            print(rows[-1], flush=True)
    probe_after = host_benchmark.measure()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rnn_host.json").write_text(json.dumps(
        {"system": mk.system_facts(device), "probe_before": probe_before,
         "probe_after": probe_after, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
