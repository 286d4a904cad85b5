"""Measure what cuBLAS's heuristic costs the host for products of row counts new to the process,
replayed as an MoE step runs them; then fit ``intercept.gemm_heuristic``'s costs.

On a GPU machine, ``--replay TRACE --out LOG`` runs, in a fresh process, the products of the
``moe-600m`` experts (SwiGLU, d_model 1024, hidden 2816, bf16) for the tokens per expert of a
recorded routing trace (``scripts/record_routing.py``), layer by layer and step by step: per
expert with tokens, forward (up, gate: one shape, down), then backward (input and weight
gradients of down, gate and up). Each call's host time is logged with whether its shape was new
to the process. No model, no autograd: only the products, so what varies is cuBLAS.

Here, ``--fit LOG --check LOG...`` fits ``base_ns``, the per-distance-bin warm costs and the
decay (least squares over the new-output calls of the fit log; decay by grid search) and
reports per step the real and the fitted sum of new-shape host time on every log; ``--write``
writes ``phantora/calibration/data/gemm_heuristic.json``.

  # on the GPU machine, each in a fresh process
  python3 scripts/measure_gemm_heuristic.py --replay trace_b4.json --out "$OUT/replay-b4.json"
  # here
  python3 scripts/measure_gemm_heuristic.py --fit scripts/data/gemm_heuristic/h100x1-replay-b4.json \\
      --check scripts/data/gemm_heuristic/h100x1-replay-b8.json --write
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LAYERS = 8
"""Router calls per step of the ``moe-600m`` trace (its layers)."""
DISTANCE_EDGES = (8, 64, 512)
DECAYS = (25, 50, 100, 150, 200, 300, 400, 600, 1000)
"""Decays (new row counts of a product) the fit tries."""
D_MODEL, HIDDEN = 1024, 2816


def replay(trace_path: Path, out: Path) -> None:
    """The device half (module doc): one JSON list of ``[product, rows, new, host_us]`` per
    call, ``["step", i, 0, 0]`` after each step."""
    import torch

    dev = "cuda"
    rows_max = 17000
    x = torch.randn(rows_max, D_MODEL, device=dev, dtype=torch.bfloat16)
    h = torch.randn(rows_max, HIDDEN, device=dev, dtype=torch.bfloat16)
    dy = torch.randn(rows_max, D_MODEL, device=dev, dtype=torch.bfloat16)
    dh = torch.randn(rows_max, HIDDEN, device=dev, dtype=torch.bfloat16)
    w_up = torch.randn(HIDDEN, D_MODEL, device=dev, dtype=torch.bfloat16)
    w_down = torch.randn(D_MODEL, HIDDEN, device=dev, dtype=torch.bfloat16)
    products = {
        "fwd_up": lambda m: x[:m] @ w_up.t(), "fwd_down": lambda m: h[:m] @ w_down.t(),
        "dgrad_down": lambda m: dy[:m] @ w_down, "dgrad_up": lambda m: dh[:m] @ w_up,
        "wgrad_down": lambda m: dy[:m].t() @ h[:m], "wgrad_up": lambda m: dh[:m].t() @ x[:m],
    }
    x[:2048] @ w_up.t()
    torch.cuda.synchronize()
    seen: set[tuple[str, int]] = set()
    log: list[list[Any]] = []

    def call(name: str, m: int) -> None:
        new = (name, m) not in seen
        seen.add((name, m))
        start = time.perf_counter()
        products[name](m)
        log.append([name, m, int(new), round((time.perf_counter() - start) * 1e6, 1)])

    calls = json.loads(trace_path.read_text())["calls"]
    for step in range(len(calls) // LAYERS):
        layers = calls[step * LAYERS:(step + 1) * LAYERS]
        for counts in layers:
            for m in counts:
                if m:
                    for name in ("fwd_up", "fwd_up", "fwd_down"):
                        call(name, m)
            torch.cuda.synchronize()  # the script's .tolist() of the next layer's counts
        for counts in reversed(layers):
            for m in reversed(counts):
                if m:
                    for name in ("dgrad_down", "wgrad_down", "dgrad_up", "wgrad_up",
                                 "dgrad_up", "wgrad_up"):
                        call(name, m)
        torch.cuda.synchronize()
        log.append(["step", step, 0, 0])
    out.write_text(json.dumps({"provenance": {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(), "python": platform.python_version(),
        "torch": torch.__version__, "trace": trace_path.name,
        "script": "scripts/measure_gemm_heuristic.py --replay"}, "calls": log}) + "\n")


def new_output_calls(log: list[list[Any]]) -> list[tuple[int, int | None, int, float]]:
    """``(step, distance, seen, host_us)`` of every call whose output shape was new, with the
    distance to the nearest row count its product ran and how many it had run, as
    ``intercept.gemm_heuristic`` reckons them."""
    from intercept.gemm_heuristic import ProductRows

    rows = ProductRows()
    step, out = 0, []
    for name, m, new, host_us in log:
        if name == "step":
            step += 1
        elif new and not name.startswith("wgrad"):
            out.append((step, *rows.place(name, m), host_us))
    return out


def repeat_us(log: list[list[Any]]) -> float:
    """Median host time of a call whose shape the process had run: the product's own cost."""
    return statistics.median(us for name, _, new, us in log if name != "step" and not new)


def fit(log: list[list[Any]]) -> dict[str, Any]:
    """The costs of ``intercept.gemm_heuristic`` from one replay (module doc)."""
    import numpy as np

    from intercept.gemm_heuristic import distance_bin

    calls = new_output_calls(log)
    same = repeat_us(log)
    y = np.array([us - same for *_, us in calls]) * 1000
    best: tuple[float, float, Any] | None = None
    for decay in DECAYS:
        x = np.zeros((len(calls), len(DISTANCE_EDGES) + 3))
        for i, (_, distance, seen, _) in enumerate(calls):
            x[i, 0] = 1.0
            x[i, 1 + distance_bin(DISTANCE_EDGES, distance)] = math.exp(-seen / decay)
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        error = float(np.abs(x @ coef - y).mean())
        if best is None or error < best[0]:
            best = (error, decay, coef)
    assert best is not None
    _, decay, coef = best
    reduction = [us - same for name, _, new, us in log if new and str(name).startswith("wgrad")]
    return {"base_ns": max(0, round(coef[0])), "distance_edges": list(DISTANCE_EDGES),
            "warm_ns": [max(0, round(c)) for c in coef[1:]], "decay_shapes": decay,
            "new_reduction_ns": round(statistics.mean(reduction) * 1000)}


def per_step_ms(log: list[list[Any]], costs: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Per step, the new-output calls' measured extra host ms and the fitted costs' ms."""
    from intercept.gemm_heuristic import heuristic_from_json

    model = heuristic_from_json({**costs, "reference": "-", "provenance": {}})
    same = repeat_us(log)
    real: dict[int, float] = defaultdict(float)
    fitted: dict[int, float] = defaultdict(float)
    for step, distance, seen, us in new_output_calls(log):
        real[step] += (us - same) / 1000
        fitted[step] += model.new_output_ns(distance, seen) / 1e6
    return [real[s] for s in sorted(real)], [fitted[s] for s in sorted(real)]


def median_error_pct(real: list[float], fitted: list[float]) -> float:
    """The fitted against the measured median over steps 3.. (the accuracy harness's steps)."""
    return 100 * (statistics.median(fitted[2:]) / statistics.median(real[2:]) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--replay", type=Path, help="on a GPU: replay this routing trace")
    parser.add_argument("--out", type=Path, help="with --replay: the log to write")
    parser.add_argument("--fit", type=Path, help="fit on this replay log")
    parser.add_argument("--check", type=Path, nargs="*", default=[],
                        help="with --fit: replay logs to check the fit on")
    parser.add_argument("--reference", default="h100-host",
                        help="the simulation.host_cpu reference host the logs were taken on")
    parser.add_argument("--write", action="store_true",
                        help="with --fit: write phantora/calibration/data/gemm_heuristic.json")
    args = parser.parse_args()
    if args.replay:
        if not args.out:
            parser.error("--replay needs --out")
        replay(args.replay, args.out)
        return
    if not args.fit:
        parser.error("give --replay (on a GPU machine) or --fit")
    sys.path.insert(0, str(REPO))
    logs = {path: json.loads(path.read_text()) for path in [args.fit, *args.check]}
    costs = fit(logs[args.fit]["calls"])
    print(json.dumps(costs))
    checks = {}
    for path, record in logs.items():
        real, fitted = per_step_ms(record["calls"], costs)
        error = median_error_pct(real, fitted)
        role = "fit" if path == args.fit else "check"
        checks[path.name] = {"role": role, "median_error_pct_steps_3_on": round(error, 1)}
        print(f"{path.name} ({role}): new-shape host ms per step, measured / fitted; median of "
              f"steps 3.. {error:+.1f}%")
        print("  " + "  ".join(f"{r:.0f}/{f:.0f}" for r, f in zip(real, fitted, strict=True)))
    if args.write:
        target = REPO / "phantora" / "calibration" / "data" / "gemm_heuristic.json"
        provenance = {**logs[args.fit]["provenance"], "fit_on": args.fit.name,
                      "checks": checks, "derived_by": "scripts/measure_gemm_heuristic.py --fit"}
        target.write_text(json.dumps({"reference": args.reference, **costs,
                                      "provenance": provenance}, indent=1) + "\n")
        print(f"wrote {target.relative_to(REPO)}")


if __name__ == "__main__":
    main()
