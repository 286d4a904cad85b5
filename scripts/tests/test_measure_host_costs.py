"""``scripts/measure/measure_host_costs.py``'s derivation of the table's per-op rows: records
from other hosts are put on the base record's footing before their median is taken."""

from typing import Any

from intercept.host_time.host_cost import EMBEDDING_BACKWARD_SMALL, INDEX_PUT_ACCUMULATE, SORT_SMALL
from scripts.measure import measure_host_costs as mhc


def _record(aten_us: float, ops_us: float) -> dict[str, Any]:
    rows = [{"family": "aten.elementwise", "case": case, "us_median": aten_us, "valid_rounds": 7}
            for case in ("mul bf16 1M", "copy_", "index_select")]
    rows += [{"family": "ops", "case": case, "us_median": ops_us, "valid_rounds": 7}
             for case, _ in mhc.OP_CASES.values()]
    return {"provenance": {}, "rows": rows}


def test_a_faster_hosts_op_rows_are_scaled_to_the_base_host() -> None:
    base = _record(aten_us=10.0, ops_us=0.0)
    ops, scales = mhc.ops_ns(base, [_record(aten_us=5.0, ops_us=40.0),
                                    _record(aten_us=10.0, ops_us=70.0),
                                    _record(aten_us=20.0, ops_us=200.0)])
    assert scales == [2.0, 1.0, 0.5]
    assert ops["sort"] == 80_000  # the median of 80, 70 and 100 us
    # the composite's index_select is charged on its own: subtracted
    assert ops["repeat_interleave"] == round((40.0 - 5.0) * 2 * 1000)
    # the script spells the simulator's keys itself (torch and the standard library only)
    assert {INDEX_PUT_ACCUMULATE, SORT_SMALL, EMBEDDING_BACKWARD_SMALL} <= ops.keys()
