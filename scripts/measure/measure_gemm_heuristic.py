"""Measure what cuBLAS costs the host for products of row counts new to the process, as an MoE
step runs them; then fit ``intercept.host_time.gemm_heuristic``'s costs.

On a GPU machine, each in a fresh process:

- ``--kernel-map OUT [--pair D_MODEL HIDDEN ROWS_MAX]...`` runs every row count 1..ROWS_MAX of
  the six products of a SwiGLU expert (bf16; default the ``moe-600m`` experts to 16,384 rows)
  under the PyTorch profiler with CUDA activity and records which kernels each ``aten::mm``
  launched, run-length encoded: the kernel map the simulator reads per GPU model
  (``hwmodel/measured/data/cublas_kernels_<gpu>.json``). cuBLAS's choice is a function of
  the shape alone, so one pass in order maps it.
- ``--profile OUT -- SCRIPT ARGS...`` runs the training script itself under the PyTorch
  profiler (shapes recorded) and logs each ``moe-600m`` expert product's ``aten::mm`` (SwiGLU,
  d_model 1024, hidden 2816, bf16): forward products on the script's thread, input and weight
  gradients on autograd's. The fit uses these logs: they are the calls a simulated step
  must pay for, in the order and amid the work of the real script (the profiler adds about
  10 us to every call, which the repeat cost subtracted below takes out).
- ``--replay TRACE --out LOG`` runs only the products, for the tokens per expert of a recorded
  routing trace (``scripts/measure/record_routing.py``), layer by layer and step by step: per expert
  with tokens, forward (up, gate: one shape, down), then backward (input and weight gradients
  of down, gate and up). No model, no autograd: only cuBLAS varies; kept as a check.

Both logs are ``[product, rows, new, host_us]`` per call, ``["step", i, 0, 0]`` after each step.

Here, ``--fit LOG --check LOG...`` fits, pooled over the fit logs (one process's costs differ
from another's by about 30%), each call's extra taken over its log's repeat cost:
- with the shipped kernel map of ``--gpu``: ``new_shape_ns``, the mean extra of a new shape
  whose kernels the process had launched, and ``new_kernel_ns``, how much more one with a
  kernel new to the process cost;
- for products without a map: ``base_ns``, the per-distance-bin warm costs and the decay
  (least squares over the new-output calls; decay by grid search).
It reports per step the measured new-shape host time and what the simulator's
``GemmShapeCache`` charges, with the map and without, on every log; ``--write`` writes
``hwmodel/measured/data/gemm_heuristic.json``.

  # on the GPU machine, each in a fresh process
  python3 scripts/measure/measure_gemm_heuristic.py --kernel-map "$OUT/kernel-map.json"
  python3 scripts/measure/measure_gemm_heuristic.py --profile "$OUT/training-b4.json" -- \\
      scenarios/examples/moe_ep.py --model moe-600m --batch-size 4 --routing learned
  python3 scripts/measure/measure_gemm_heuristic.py --replay trace_b8.json --out "$OUT/replay-b8.json"
  # here
  python3 scripts/measure/measure_gemm_heuristic.py --fit
  scripts/measure/data/gemm_heuristic/h100x1-training-b4-*.json \\
      --check scripts/measure/data/gemm_heuristic/h100x1-training-b8-*.json --write
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import json
import math
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from measurements import plain_name, read_text  # noqa: E402
from scripts import common  # noqa: E402
from scripts.common import REPO  # noqa: E402

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

    products = expert_products(D_MODEL, HIDDEN, 17000)
    products["fwd_up"](2048)
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
    write_log(out, log, {"trace": trace_path.name,
                         "script": "scripts/measure/measure_gemm_heuristic.py --replay"})


def expert_products(d_model: int, hidden: int, rows_max: int) -> dict[str, Callable[[int], Any]]:
    """The six bf16 products of one SwiGLU expert's up (or gate) and down projections for
    ``m`` routed tokens, on the GPU: forward, input gradient (dgrad) and weight gradient
    (wgrad, reducing over the tokens); :data:`PRODUCT_SHAPES` gives each one's shape."""
    import torch

    def random(*shape: int) -> Any:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    x, h, dy, dh = (random(rows_max, d_model), random(rows_max, hidden),
                    random(rows_max, d_model), random(rows_max, hidden))
    w_up, w_down = random(hidden, d_model), random(d_model, hidden)
    return {
        "fwd_up": lambda m: x[:m] @ w_up.t(), "fwd_down": lambda m: h[:m] @ w_down.t(),
        "dgrad_down": lambda m: dy[:m] @ w_down, "dgrad_up": lambda m: dh[:m] @ w_up,
        "wgrad_down": lambda m: dy[:m].t() @ h[:m], "wgrad_up": lambda m: dh[:m].t() @ x[:m],
    }


PRODUCT_SHAPES: dict[str, tuple[str, Callable[[int, int], tuple[int | None, int | None,
                                                                  int | None]]]] = {
    "fwd_up": ("nt", lambda d, h: (None, h, d)), "fwd_down": ("nt", lambda d, h: (None, d, h)),
    "dgrad_down": ("nn", lambda d, h: (None, h, d)), "dgrad_up": ("nn", lambda d, h: (None, d, h)),
    "wgrad_down": ("tn", lambda d, h: (d, h, None)), "wgrad_up": ("tn", lambda d, h: (h, d, None)),
}
"""Per expert product, its layout and ``(m, n, k)`` as ``intercept.dispatch.op_costs`` names an
``mm`` of it (``d_model``, ``hidden`` given), None where the routed tokens go."""
KERNEL_MAP_CHUNK = 2048
"""Products per profiler session of ``--kernel-map`` (keeps each trace small)."""


def launched_kernels(events: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Per ``aten::mm`` of a Chrome trace with CUDA activity, in order, the names of the kernels
    it launched (a split reduction launches two): the runtime calls inside the op on its
    thread, matched to kernels by correlation id."""
    kernels = {e["args"]["correlation"]: e["name"] for e in events
               if e.get("ph") == "X" and e.get("cat") == "kernel"}
    launches = sorted(((e["ts"], e["tid"], e["args"].get("correlation")) for e in events
                       if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")),
                      key=lambda launch: launch[0])
    starts = [ts for ts, _, _ in launches]
    ops = sorted((e["ts"], e["ts"] + e["dur"], e["tid"]) for e in events
                 if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["name"] == "aten::mm")
    out = []
    for begin, end, tid in ops:
        inside = launches[bisect.bisect_left(starts, begin):bisect.bisect_left(starts, end)]
        out.append(tuple(kernels[c] for _, t, c in inside if t == tid and c in kernels))
    return out


def record_kernel_map(out: Path, pairs: list[tuple[int, int, int]]) -> None:
    """The device half of ``--kernel-map`` (module doc)."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile as torch_profile

    names: dict[str, int] = {}
    products = []
    for d_model, hidden, rows_max in pairs:
        for name, product in expert_products(d_model, hidden, rows_max).items():
            runs: list[list[int]] = []
            for start in range(1, rows_max + 1, KERNEL_MAP_CHUNK):
                rows = range(start, min(start + KERNEL_MAP_CHUNK, rows_max + 1))
                with torch_profile(activities=[ProfilerActivity.CPU,
                                               ProfilerActivity.CUDA]) as profiler:
                    for m in rows:
                        product(m)
                with tempfile.TemporaryDirectory() as tmp:
                    trace = Path(tmp) / "trace.json"
                    profiler.export_chrome_trace(str(trace))
                    launched = launched_kernels(json.loads(trace.read_text())["traceEvents"])
                if len(launched) != len(rows):
                    raise SystemExit(f"--kernel-map: {len(launched)} aten::mm traced for "
                                     f"{len(rows)} {name} products")
                for m, kernels in zip(rows, launched, strict=True):
                    ids = [names.setdefault(kernel, len(names)) for kernel in kernels]
                    if not runs or runs[-1][1:] != ids:
                        runs.append([m, *ids])
            layout, dims = PRODUCT_SHAPES[name]
            m, n, k = dims(d_model, hidden)
            products.append({"op": "mm", "dtype": "bf16", "layout": layout, "batch": 1,
                             "m": m, "n": n, "k": k, "rows_max": rows_max, "runs": runs})
            print(f"{name} d_model {d_model} hidden {hidden}: {len(runs)} runs, "
                  f"{len({tuple(r[1:]) for r in runs})} kernel choices", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "provenance": device_provenance({"script": "scripts/measure/measure_gemm_heuristic.py "
                                                   "--kernel-map"}),
        "kernels": list(names), "products": products}) + "\n")


def write_log(out: Path, log: list[list[Any]], provenance: dict[str, str]) -> None:
    """A measured log with where it was taken (the GPU machine's side)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": device_provenance(provenance), "calls": log}) + "\n")


def device_provenance(extra: dict[str, str]) -> dict[str, str]:
    """Where and when a measurement was taken, and by what (the GPU machine's side)."""
    import torch

    return {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "gpu": torch.cuda.get_device_name(), "python": platform.python_version(),
            "torch": torch.__version__, "cuda": str(torch.version.cuda), **extra}


def expert_product(dims: list[list[int]], forward: bool) -> tuple[str, int] | None:
    """``(product, rows)`` of an ``aten::mm`` with these input shapes, if it is one of the
    replay's expert products (forward on the script's thread, gradients on autograd's)."""
    if len(dims) < 2 or len(dims[0]) != 2 or len(dims[1]) != 2:
        return None
    (a, b), (_, d) = dims[0], dims[1]
    if (b, d) == (D_MODEL, HIDDEN):
        return ("fwd_up" if forward else "dgrad_down"), a
    if (b, d) == (HIDDEN, D_MODEL):
        return ("fwd_down" if forward else "dgrad_up"), a
    if not forward and (a, d) == (D_MODEL, HIDDEN):
        return "wgrad_down", b
    if not forward and (a, d) == (HIDDEN, D_MODEL):
        return "wgrad_up", b
    return None


def training_log(events: list[dict[str, Any]]) -> list[list[Any]]:
    """The expert products of a profiled training run (Chrome trace events) in the replay's
    log format; a step ends where the step's last fused AdamW ends."""
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    adam = [e for e in ops if e["name"] == "aten::_fused_adamw_"]
    if not adam:
        raise SystemExit("--profile: the script ran no fused AdamW (aten::_fused_adamw_), "
                         "so its steps cannot be told apart")
    script_thread = adam[0]["tid"]
    ends = sorted(e["ts"] + e["dur"] for e in adam)
    step_ends = [t for i, t in enumerate(ends) if i + 1 == len(ends) or ends[i + 1] - t > 5000]
    calls = sorted((e["ts"], *product, e["dur"]) for e in ops if e["name"] == "aten::mm"
                   and (product := expert_product(e.get("args", {}).get("Input Dims", []),
                                                  e["tid"] == script_thread)))
    seen: set[tuple[str, int]] = set()
    log: list[list[Any]] = []
    steps_closed = 0
    for ts, name, m, dur in calls:
        while steps_closed < len(step_ends) and step_ends[steps_closed] < ts:
            log.append(["step", steps_closed, 0, 0])
            steps_closed += 1
        log.append([name, m, int((name, m) not in seen), round(dur, 1)])
        seen.add((name, m))
    log.extend(["step", i, 0, 0] for i in range(steps_closed, len(step_ends)))
    return log


def profile(out: Path, script: Path, script_args: list[str]) -> None:
    """The device half of ``--profile`` (module doc)."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile as torch_profile


    profiler = torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True)
    with profiler:
        common.run_as_main(script, script_args)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        profiler.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    write_log(out, training_log(events), {
        "script": "scripts/measure/measure_gemm_heuristic.py --profile -- "
                  + " ".join([script.name, *script_args])})


def new_output_calls(log: list[list[Any]]) -> list[tuple[int, int | None, int, float]]:
    """``(step, distance, seen, host_us)`` of every call whose output shape was new, with the
    distance to the nearest row count its product ran and how many it had run, as
    ``intercept.host_time.gemm_heuristic`` reckons them."""
    from intercept.host_time.gemm_heuristic import ProductRows

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


def fit(logs: list[list[list[Any]]]) -> dict[str, Any]:
    """The costs of ``intercept.host_time.gemm_heuristic`` from the pooled calls of several logs,
    each call's extra taken over its own log's repeat cost (module doc)."""
    import numpy as np

    from intercept.host_time.gemm_heuristic import distance_bin

    calls = [(distance, seen, us - same) for log in logs for same in [repeat_us(log)]
             for _, distance, seen, us in new_output_calls(log)]
    y = np.array([extra_us for *_, extra_us in calls]) * 1000
    best: tuple[float, float, Any] | None = None
    for decay in DECAYS:
        x = np.zeros((len(calls), len(DISTANCE_EDGES) + 3))
        for i, (distance, seen, _) in enumerate(calls):
            x[i, 0] = 1.0
            x[i, 1 + distance_bin(DISTANCE_EDGES, distance)] = math.exp(-seen / decay)
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        error = float(np.abs(x @ coef - y).mean())
        if best is None or error < best[0]:
            best = (error, decay, coef)
    assert best is not None
    _, decay, coef = best
    reduction = [us - same for log in logs for same in [repeat_us(log)]
                 for name, _, new, us in log if new and str(name).startswith("wgrad")]
    return {"base_ns": max(0, round(coef[0])), "distance_edges": list(DISTANCE_EDGES),
            "warm_ns": [max(0, round(c)) for c in coef[1:]], "decay_shapes": decay,
            "new_reduction_ns": round(statistics.mean(reduction) * 1000)}


def shape_of(product: str, rows: int) -> tuple[str, str, str, int, int, int, int]:
    """The ``intercept.host_time.gemm_heuristic`` shape of a logged ``moe-600m`` expert product."""
    layout, dims = PRODUCT_SHAPES[product]
    m, n, k = (rows if size is None else size for size in dims(D_MODEL, HIDDEN))
    return "mm", "bf16", layout, 1, m, n, k


def kernel_costs(logs: list[list[list[Any]]], kernel_map: Any) -> dict[str, int]:
    """``new_shape_ns``: the mean extra host time of a new shape whose kernels the process had
    launched; ``new_kernel_ns``: how much more a new shape with a kernel new to the process
    cost, on average (pooled over ``logs``, each call's extra over its own log's repeat cost)."""
    from intercept.host_time.gemm_heuristic import LaunchedKernels

    known, first = [], []
    for log in logs:
        same = repeat_us(log)
        launched = LaunchedKernels()
        for name, m, new, us in log:
            if name != "step" and new and m:
                kernels = kernel_map.kernels_for(shape_of(name, m))
                (first if launched.launch(kernels) else known).append(us - same)
    new_shape = statistics.mean(known)
    return {"new_shape_ns": round(new_shape * 1000),
            "new_kernel_ns": round((statistics.mean(first) - new_shape) * 1000)}


def per_step_ms(log: list[list[Any]], costs: dict[str, Any],
                kernel_map: Any) -> tuple[list[float], list[float]]:
    """Per step, the new-shape calls' measured extra host ms and what the simulator's
    ``GemmShapeCache`` charges for the log's calls with these costs (``kernel_map`` None: the
    mean-cost model of unmapped products)."""
    from intercept.host_time.gemm_heuristic import GemmShapeCache, heuristic_from_json

    cache = GemmShapeCache(heuristic_from_json({**costs, "reference": "-", "provenance": {}}),
                           kernel_map)
    same = repeat_us(log)
    real: dict[int, float] = defaultdict(float)
    fitted: dict[int, float] = defaultdict(float)
    step = 0
    for name, m, new, us in log:
        if name == "step":
            step += 1
            continue
        fitted[step] += cache.first_seen_ns(shape_of(name, m)) / 1e6
        if new:
            real[step] += (us - same) / 1000
    return [real[s] for s in sorted(fitted)], [fitted[s] for s in sorted(fitted)]


def median_error_pct(real: list[float], fitted: list[float]) -> float:
    """The fitted against the measured median over steps 3.. (the accuracy harness's steps)."""
    return 100 * (statistics.median(fitted[2:]) / statistics.median(real[2:]) - 1)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--profile", type=Path,
                        help="on a GPU: profile the training script after '--' into this log")
    parser.add_argument("--replay", type=Path, help="on a GPU: replay this routing trace")
    parser.add_argument("--out", type=Path, help="with --replay: the log to write")
    parser.add_argument("--kernel-map", type=Path,
                        help="on a GPU: record the kernels cuBLAS picks per row count into this")
    parser.add_argument("--pair", type=int, nargs=3, action="append",
                        metavar=("D_MODEL", "HIDDEN", "ROWS_MAX"),
                        help="with --kernel-map: an expert's sizes and the most rows to map")
    parser.add_argument("--fit", type=Path, nargs="+", help="fit on these logs, pooled")
    parser.add_argument("--check", type=Path, nargs="*", default=[],
                        help="with --fit: logs to check the fit on")
    parser.add_argument("--gpu", default="h100",
                        help="with --fit: the catalogue GPU the logs ran on (its kernel map)")
    parser.add_argument("--reference", default="h100-host",
                        help="the simulation.host_cpu reference host the logs were taken on")
    parser.add_argument("--write", action="store_true",
                        help="with --fit: write hwmodel/measured/data/gemm_heuristic.json")
    parser.add_argument("script", nargs="?", type=Path, help="with --profile: the script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    args = parser.parse_args()
    if args.profile:
        if not args.script:
            parser.error("--profile needs the training script after '--'")
        profile(args.profile, args.script, args.script_args)
        return
    if args.replay:
        if not args.out:
            parser.error("--replay needs --out")
        replay(args.replay, args.out)
        return
    if args.kernel_map:
        pairs = args.pair or [[D_MODEL, HIDDEN, 16384]]
        record_kernel_map(args.kernel_map, [(d_model, hidden, rows)
                                            for d_model, hidden, rows in pairs])
        return
    if not args.fit:
        parser.error("give --profile, --replay or --kernel-map (on a GPU machine), or --fit")
    from intercept.host_time.gemm_heuristic import load_kernel_map

    shipped_map = load_kernel_map(args.gpu)
    if shipped_map is None:
        parser.error(f"--gpu {args.gpu}: no kernel map shipped; measure one with --kernel-map")
    logs = {path: json.loads(read_text(path)) for path in [*args.fit, *args.check]}
    fitted_on = [logs[path]["calls"] for path in args.fit]
    costs = {**fit(fitted_on), **kernel_costs(fitted_on, shipped_map)}
    print(json.dumps(costs))
    checks = {}
    for path, record in logs.items():
        role = "fit" if path in args.fit else "check"
        checks[plain_name(path)] = {"role": role}
        for model, mapped in (("kernel_map", shipped_map), ("mean_cost", None)):
            real, fitted = per_step_ms(record["calls"], costs, mapped)
            error = median_error_pct(real, fitted)
            checks[plain_name(path)][f"{model}_error_pct"] = round(error, 1)
            print(f"{plain_name(path)} ({role}, {model}): new-shape host ms per step, measured / "
                  f"fitted; median of steps 3.. {error:+.1f}%")
            print("  " + "  ".join(f"{r:.0f}/{f:.0f}" for r, f in zip(real, fitted, strict=True)))
    if args.write:
        target = REPO / "hwmodel" / "measured" / "data" / "gemm_heuristic.json"
        provenance = {"fit_on": [plain_name(path) for path in args.fit], "logs": checks,
                      "measured_on": {plain_name(path): logs[path]["provenance"]
                                      for path in args.fit},
                      "derived_by": "scripts/measure/measure_gemm_heuristic.py --fit"}
        target.write_text(json.dumps({"reference": args.reference, **costs,
                                      "provenance": provenance}, indent=1) + "\n")
        print(f"wrote {target.relative_to(REPO)}")


if __name__ == "__main__":
    main()
