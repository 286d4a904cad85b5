"""The Python-reuse microbenchmark runs on CPU (its launch a CPU op) and records every segment."""

from scripts.measure import measure_python_reuse as reuse


def test_every_segment_is_timed_and_counted() -> None:
    record = reuse.measure("cpu", rounds=1, round_ms=0.2, passes=1)
    rows = record["rows"]
    assert len(rows) == 2 * len(reuse.SEGMENTS) * 2  # kinds x segment lengths x afters
    by_key = {(row["kind"], row["k"], row["after"]): row for row in rows}
    # a unit runs 6 lines; the loop adds its header and call line per iteration (and the last
    # header), straight-line code its call line per unit (and the wrapping lambda's line)
    assert by_key["same", 4, "none"]["lines"] == 4 * 8 + 1
    assert by_key["distinct", 4, "none"]["lines"] == 4 * 7 + 1
    assert set(record["baseline_ns"]) == {"none", "launch"}
