"""How well the compute model predicts kernel times it was not given: a table of errors.

Three checks, per op family (matmul, attention, memory-bound/optimizer), on the packaged
tables (``hwmodel/measured/data``):

* ``interpolated``: the random off-grid shapes measured as holdouts (``"holdout": true``),
  predicted from a table that leaves them out (attention: only the backend stock PyTorch
  picks, which the model stands for; the ``flash`` rows run ~1.5-2x slower on Hopper);
* ``fitted, own GPU``: every row, predicted by the efficiency curves fitted from the same GPU's
  table (what an op the table lacks gets);
* ``fitted, other GPU``: every H200 row predicted from curves fitted on the H100 table, and the
  reverse (what an unmeasured GPU gets).

Error = predicted / measured - 1; the table prints the median and 90th percentile of |error|
and the median signed error (bias).

  python3 scripts/validate/validate_compute.py
"""

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from hwmodel.catalogue import CATALOGUE, GpuSpec  # noqa: E402
from hwmodel.compute.fitted import EfficiencyCurves  # noqa: E402
from hwmodel.compute.model import ComputeModel, table_path  # noqa: E402
from hwmodel.compute.spec import KernelSpec  # noqa: E402
from hwmodel.compute.table import (BACKEND_OF_DEFAULT_SDPA, KernelTable,  # noqa: E402
                                    MeasuredRow, attention_flops, matmul_flops)
from scripts import common  # noqa: E402

def spec_of(row: MeasuredRow) -> KernelSpec | None:
    """The launch a table row measured, as the rank side would describe it."""
    if row.section == "matmul":
        op = {"mm": "aten::mm", "addmm": "aten::addmm", "bmm": "aten::bmm"}[row.aten_ops]
        return KernelSpec(op, matmul_flops(row.dims), row.bytes, row.dtype, row.dims,
                          row.variant)
    if row.section == "attention":
        name = ("aten::_scaled_dot_product_flash_attention"
                + ("_backward" if row.backward else ""))
        return KernelSpec(name, attention_flops(row.dims, row.variant == "causal",
                                                row.backward),
                          row.bytes, "bf16", row.dims, row.variant)
    ops = row.aten_ops.split("+")
    if len(ops) != 1:
        return None
    return KernelSpec(f"aten::{ops[0]}", 0, row.bytes, row.dtype, variant=row.variant)


def errors(rows: Iterable[MeasuredRow],
           predict: Callable[[KernelSpec], int]) -> dict[str, list[float]]:
    by_section: dict[str, list[float]] = {}
    for row in rows:
        spec = spec_of(row)
        if spec is None or not row.cold:
            continue
        by_section.setdefault(row.section, []).append(predict(spec) / row.time_ns - 1)
    return by_section


def is_modelled_holdout(row: MeasuredRow) -> bool:
    """An off-grid row of a kernel the model stands for (attention: the default backend's)."""
    return row.holdout and row.shape.get("backend", BACKEND_OF_DEFAULT_SDPA) in (
        BACKEND_OF_DEFAULT_SDPA, "default")


def fitted_predictor(curves: EfficiencyCurves, gpu: GpuSpec) -> Callable[[KernelSpec], int]:
    model = ComputeModel(gpu, None, curves)
    return lambda spec: model.cost(spec).duration_ns


def main() -> None:
    common.parser(__doc__).parse_args()  # no options: --help only
    table = Table(title="compute model: predicted vs measured kernel time")
    for column in ("GPU", "check", "family", "kernels", "median |err|", "p90 |err|",
                   "median err"):
        table.add_column(column, justify="right" if column[0] in "kmp" else "left")
    tables = {name: KernelTable.load(path) for name in ("h100", "h200")
              if (path := table_path(name)) is not None}
    for name, full in tables.items():
        gpu = CATALOGUE[name]
        other = next(o for o in tables if o != name)
        without_holdout = KernelTable.load(table_path(name), holdout=False)  # type: ignore[arg-type]
        interpolating = ComputeModel(gpu, without_holdout,
                                     EfficiencyCurves.fit(without_holdout, gpu))
        holdouts = [r for r in full.rows if is_modelled_holdout(r)]
        checks = {
            "interpolated (holdouts)": errors(holdouts,
                                              lambda s: interpolating.cost(s).duration_ns),
            "fitted, own GPU": errors(full.rows, fitted_predictor(
                EfficiencyCurves.fit(full, gpu), gpu)),
            f"fitted from {other}": errors(full.rows, fitted_predictor(
                EfficiencyCurves.fit(tables[other], CATALOGUE[other]), gpu)),
        }
        for check, by_section in checks.items():
            for section, errs in sorted(by_section.items()):
                values = np.array(errs)
                table.add_row(name, check, section, str(len(values)),
                              f"{np.median(np.abs(values)):.1%}",
                              f"{np.percentile(np.abs(values), 90):.1%}",
                              f"{np.median(values):+.1%}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
