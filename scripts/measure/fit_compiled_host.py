"""Fit the host costs of ``torch.compile``d graphs (``intercept.host_time.compiled_call``) on the
probe of ``scripts/measure/compiled_chains.py``.

The real rows are records of ``scripts/measure/measure_host_costs.py --sections aten compiled``
taken on lent GPU machines (``--real``); each is put on the host-cost table's reference host by
the median ratio of its ``aten`` cases to the table's raw record (``anchor_scale``). The same rows
are simulated here on that reference host (one H100), with the shipped costs. Then, each the
shipped value plus the median over the records of real less simulated:

* a generated kernel's launch: the inference chains' slope per mean (one kernel each, of one
  buffer read and one written);
* a further buffer read, and one written: the wide and the output chains' slopes per mean at
  their two widths, their difference per further buffer;
* a compiled backward node and a backward run: per number K of compiled graphs in one backward,
  the backward's host time (the training row less the training-forward row, whose kernels are
  the same in both) real less simulated, against K: its slope and its intercept.

Printed beside them as checks: every row, simulated and real; the forward rows' slope and
intercept (a forward call's cost is assumed, ``intercept.dispatch.compiled``); the backward of one
chain of each depth, real less simulated, against what the fit adds. A refit after a change of
the costs runs the probe with the new ones (they move the simulated rows; run until the
printed gaps are about 0).

    python3 scripts/measure/fit_compiled_host.py --real scripts/measure/data/host_costs/h200x*-compiled*.json \\
        --write hwmodel/measured/data/compiled_call.json
"""

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO  # noqa: E402
from scripts.measure.measure_host_costs import anchor_scale  # noqa: E402

PROBE = Path(__file__).resolve().with_name("compiled_chains.py")
BASE = REPO / "scripts" / "measure" / "data" / "host_costs" / "h100x1.json"
"""The host-cost table's raw record: the footing the real rows are put on."""
GPU = "h100"
"""The simulated GPU: its reference host is the table's."""
INFERENCE, FORWARD, TRAINING = "inference chain", "training forward chain", "training chain"
WIDE, OUTPUT = "inference wide chain", "inference output chain"
"""Rows ``<kind> of <depth> means of <n> inputs`` (``outputs``): n buffers more read (written)."""
GRAPHS_FORWARD, GRAPHS_TRAINING = "training forward", "training"
"""The rows of K compiled graphs (``training of 4 graphs``): named ``<kind> of <count> ...``."""


def simulate(out: Path) -> dict[str, float]:
    """The probe's rows simulated on one :data:`GPU` (us per call by case)."""
    from phantora.run import run_scenario
    from phantora.scenario import parse_scenario

    rows = out / "rows.json"
    spec = {"name": "fit-compiled-call", "cluster": {"gpu": GPU, "hosts": 1, "gpus_per_host": 1},
            "workload": {"script": str(PROBE), "args": ["--json", str(rows)],
                         "nproc_per_node": 1, "env": {"OMP_NUM_THREADS": "1"}}}
    path = out / "probe.yaml"
    path.write_text(yaml.safe_dump(spec))
    run_scenario(parse_scenario(spec, str(path)), out / "run", Console(stderr=True, quiet=True))
    return {row["case"]: float(row["us"]) for row in json.loads(rows.read_text())["rows"]}


def real_rows(record: dict[str, Any], base: dict[str, Any]) -> dict[str, float]:
    """A record's compiled rows (valid rounds only), us per call on the reference host of
    ``base`` (the table's raw record, :data:`BASE`)."""
    scale = anchor_scale(base, record)
    return {row["case"]: float(row["us_median"]) * scale for row in record["rows"]
            if row.get("family") == "compiled" and row.get("valid_rounds")}


def count(case: str) -> int:
    """A row's depth or number of graphs (``... of 16 means``, ``... of 4 graphs``)."""
    return int(case.split(" of ")[1].split()[0])


def line(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """Slope and intercept of ``points`` (None for fewer than two)."""
    if len(points) < 2:
        return None
    slope, intercept = np.polyfit(*zip(*points, strict=True), 1)
    return float(slope), float(intercept)


def rows_line(rows: dict[str, float], prefix: str) -> tuple[float, float] | None:
    """Slope (us per depth or graph) and intercept of the rows named ``prefix of N ...``."""
    return line([(count(case), us) for case, us in rows.items()
                 if case.split(" of ")[0] == prefix])


def width_slopes(rows: dict[str, float], prefix: str) -> dict[int, float]:
    """Per width (inputs or outputs) of the rows named ``prefix of D means of W ...``: their
    slope per mean (us)."""
    widths: dict[int, list[tuple[int, float]]] = {}
    for case, us in rows.items():
        if case.split(" of ")[0] == prefix:
            widths.setdefault(int(case.split(" of ")[2].split()[0]), []).append((count(case), us))
    return {width: fit[0] for width, points in widths.items() if (fit := line(points))}


def per_buffer(rows: dict[str, float], prefix: str) -> float | None:
    """The slope's change per further buffer between the narrowest and the widest rows (us)."""
    slopes = width_slopes(rows, prefix)
    if len(slopes) < 2:
        return None
    narrow, wide = min(slopes), max(slopes)
    return (slopes[wide] - slopes[narrow]) / (wide - narrow)


def backward_gaps(real: dict[str, float], simulated: dict[str, float], forward: str,
                  training: str) -> list[tuple[int, float]]:
    """Per depth or number of graphs with both rows in both: the real backward's host time (the
    training row less the forward one) less the simulated one (us)."""
    gaps = []
    for case, us in real.items():
        if case.split(" of ")[0] == training:
            other = case.replace(training, forward, 1)
            if other in real and case in simulated and other in simulated:
                gaps.append((count(case), (us - real[other])
                             - (simulated[case] - simulated[other])))
    return gaps


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--real", type=Path, nargs="+", required=True,
                        help="records of measure_host_costs.py --sections aten compiled")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "fit_compiled_host",
                        help="folder of the simulator outputs")
    parser.add_argument("--write", type=Path, help="write the fitted cost here")
    args = parser.parse_args()
    from intercept.host_time.compiled_call import load_compiled_call

    args.out.mkdir(parents=True, exist_ok=True)
    start_s = time.perf_counter()
    simulated = simulate(args.out)
    print(f"simulated the probe in {time.perf_counter() - start_s:.0f} s", flush=True)
    base = json.loads(BASE.read_text())
    records = {path.name: real_rows(json.loads(path.read_text()), base) for path in args.real}
    print(f"\n{'case (us per call, reference host)':38s} {'simulated':>9s} "
          + " ".join(f"{name.removesuffix('.json')[-9:]:>9s}" for name in records))
    for case, us in simulated.items():
        print(f"{case:38s} {us:9.1f} " + " ".join(
            f"{rows[case]:9.1f}" if case in rows else f"{'-':>9s}" for rows in records.values()))
    for prefix in (INFERENCE, FORWARD, GRAPHS_FORWARD):
        fits = [rows_line(rows, prefix) for rows in [simulated, *records.values()]]
        print(f"{prefix} per step / intercept: simulated {fits[0][0]:.1f} / {fits[0][1]:.1f}; "
              "real " + ", ".join(f"{f[0]:.1f} / {f[1]:.1f}" for f in fits[1:] if f))
    shipped = load_compiled_call()
    simulated_launch = rows_line(simulated, INFERENCE)[0]
    launch_gaps = [fit[0] - simulated_launch for rows in records.values()
                   if (fit := rows_line(rows, INFERENCE))]
    node_run = [fit for rows in records.values()
                if (fit := line(backward_gaps(rows, simulated, GRAPHS_FORWARD, GRAPHS_TRAINING)))]
    if not launch_gaps or not node_run:
        raise SystemExit("the records lack the inference rows or the rows of K graphs")
    buffer_gaps = {}
    for prefix in (WIDE, OUTPUT):
        simulated_buffer = per_buffer(simulated, prefix)
        if simulated_buffer is None:
            raise SystemExit(f"the probe lacks the {prefix} rows")
        buffer_gaps[prefix] = [real - simulated_buffer for rows in records.values()
                               if (real := per_buffer(rows, prefix)) is not None]
        if not buffer_gaps[prefix]:
            raise SystemExit(f"the records lack the {prefix} rows")
    node_gap = statistics.median(n for n, _ in node_run)
    run_gap = statistics.median(r for _, r in node_run)
    fitted = {"generated_launch_ns": shipped.generated_launch_ns
              + statistics.median(launch_gaps) * 1000,
              "generated_read_ns": shipped.generated_read_ns
              + statistics.median(buffer_gaps[WIDE]) * 1000,
              "generated_write_ns": shipped.generated_write_ns
              + statistics.median(buffer_gaps[OUTPUT]) * 1000,
              "backward_call_ns": shipped.backward_call_ns + node_gap * 1000,
              "backward_run_ns": shipped.backward_run_ns + run_gap * 1000}
    fitted = {key: max(0, round(value)) for key, value in fitted.items()}
    print(f"\ngenerated kernel launch, real less simulated: "
          f"{', '.join(f'{g:.1f}' for g in launch_gaps)} us")
    for prefix, gaps in buffer_gaps.items():
        print(f"{prefix}: a further buffer, real less simulated: "
              f"{', '.join(f'{g:.2f}' for g in gaps)} us")
    print("backward of K graphs, real less simulated, per graph / per run: "
          + ", ".join(f"{n:.0f} / {r:.0f}" for n, r in node_run) + " us")
    chains = [gap for rows in records.values()
              for _, gap in backward_gaps(rows, simulated, FORWARD, TRAINING)]
    if chains:
        print(f"check, backward of one chain (one graph, one run), real less simulated: "
              f"{', '.join(f'{g:.0f}' for g in chains)} us; the fit adds "
              f"{node_gap + run_gap:.0f}")
    for key, value in fitted.items():
        print(f"{key} {getattr(shipped, key)} -> {value} ({shipped.reference})")
    if args.write:
        document = {"reference": shipped.reference, **fitted,
                    "provenance": {"records": [str(p.relative_to(REPO) if p.is_absolute() else p)
                                               for p in args.real],
                                   "launch_gaps_us": [round(g, 2) for g in launch_gaps],
                                   "read_gaps_us": [round(g, 3) for g in buffer_gaps[WIDE]],
                                   "write_gaps_us": [round(g, 3) for g in buffer_gaps[OUTPUT]],
                                   "backward_gaps_us_per_graph_and_run": [
                                       [round(n, 1), round(r, 1)] for n, r in node_run],
                                   "fitted_by": "scripts/measure/fit_compiled_host.py",
                                   "date": time.strftime("%Y-%m-%d", time.gmtime())}}
        args.write.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {args.write}")


if __name__ == "__main__":
    main()
