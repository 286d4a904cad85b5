"""cuBLAS's heuristic cost for products of shapes new to the process
(``intercept.host_time.gemm_heuristic``); its fit is checked with its script
(``scripts/tests/test_gemm_heuristic_fit.py``)."""

import math

import pytest

from intercept.host_time.gemm_heuristic import (GemmShapeCache, ProductRows, heuristic_from_json,
                                      kernel_map_from_json)

COSTS = {"reference": "h100-host", "base_ns": 200_000, "distance_edges": [8, 64, 512],
         "warm_ns": [100_000, 1_000_000, 2_000_000, 3_000_000, 4_000_000],
         "decay_shapes": 100, "new_reduction_ns": 150_000, "new_shape_ns": 180_000,
         "new_kernel_ns": 3_000_000, "provenance": {}}
FORWARD = ("mm", "bf16", "nt", 1, 2048, 2816, 1024)


def _forward(rows: int) -> tuple[str, str, str, int, int, int, int]:
    return (*FORWARD[:4], rows, *FORWARD[5:])


def test_a_row_count_far_from_any_the_product_ran_costs_more_than_a_near_one() -> None:
    cache = GemmShapeCache(heuristic_from_json(COSTS), capacity=100)
    first = cache.first_seen_ns(_forward(2048))
    assert first == 200_000 + 4_000_000  # none run yet
    assert cache.first_seen_ns(_forward(2048)) == 0  # cached
    near = cache.first_seen_ns(_forward(2052))  # 4 rows away, one row count run
    far = cache.first_seen_ns(_forward(3000))  # 948 rows from the nearest
    assert near == round(200_000 + 100_000 * math.exp(-1 / 100))
    assert far == round(200_000 + 3_000_000 * math.exp(-2 / 100))
    # another product (the input gradient's layout) has run nothing yet
    assert cache.first_seen_ns(("mm", "bf16", "nn", 1, 2048, 2816, 1024)) == 4_200_000


def test_the_extra_cost_fades_as_the_product_runs_more_row_counts() -> None:
    cache = GemmShapeCache(heuristic_from_json(COSTS), capacity=10_000)
    costs = [cache.first_seen_ns(_forward(1000 + 100 * i)) for i in range(400)]
    assert costs[1] > costs[50] > costs[399] >= 200_000
    assert costs[399] - 200_000 < 0.05 * (costs[1] - 200_000)


def test_a_new_reduction_length_alone_costs_the_reduction_price() -> None:
    cache = GemmShapeCache(heuristic_from_json(COSTS), capacity=3)
    wgrad = ("mm", "bf16", "tn", 1, 2816, 1024, 2000)
    assert cache.first_seen_ns(wgrad) == 4_200_000  # its output is new
    assert cache.first_seen_ns((*wgrad[:6], 2001)) == 150_000
    # least recently used shapes are forgotten, as cuBLAS's cache forgets them
    for rows in (1, 2, 3):
        cache.first_seen_ns(_forward(rows))
    assert cache.first_seen_ns((*wgrad[:6], 2001)) > 150_000


def test_the_nearest_row_count_is_looked_for_both_ways() -> None:
    def placed(m: int) -> tuple[int | None, int]:
        rows = ProductRows()
        for ran in (10, 20, 40):
            rows.place("mm", ran)
        return rows.place("mm", m)

    assert ProductRows().place("mm", 5) == (None, 0)
    assert placed(26) == (6, 3)
    assert placed(5) == (5, 3)
    assert placed(41) == (1, 3)
    rows = ProductRows()
    rows.place("mm", 10)
    assert rows.place("mm", 10) == (0, 1) and rows.place("mm", 11) == (1, 1)


def test_bad_costs_are_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match="decay_shapes"):
        heuristic_from_json({k: v for k, v in COSTS.items() if k != "decay_shapes"})
    with pytest.raises(ValueError, match="warm_ns"):
        heuristic_from_json({**COSTS, "warm_ns": [1, 2]})
    with pytest.raises(ValueError, match="must be > 0"):
        heuristic_from_json({**COSTS, "decay_shapes": 0})


MAP = {"kernels": ["k0", "k1", "k2"], "provenance": {}, "products": [
    {"op": "mm", "dtype": "bf16", "layout": "nt", "batch": 1, "m": None, "n": 2816, "k": 1024,
     "rows_max": 100, "runs": [[1, 0], [40, 1, 2], [60, 0]]},
    {"op": "mm", "dtype": "bf16", "layout": "tn", "batch": 1, "m": 2816, "n": 1024, "k": None,
     "rows_max": 100, "runs": [[1, 2]]}]}


def test_a_mapped_product_pays_for_a_kernel_only_the_first_time_the_process_launches_it() -> None:
    cache = GemmShapeCache(heuristic_from_json(COSTS), kernel_map_from_json("h100", MAP))
    assert cache.first_seen_ns(_forward(10)) == 180_000 + 3_000_000  # k0 new
    assert cache.first_seen_ns(_forward(10)) == 0  # cached
    assert cache.first_seen_ns(_forward(70)) == 180_000  # k0 again, far away or not
    assert cache.first_seen_ns(_forward(45)) == 3_180_000  # k1 and k2 (a split reduction)
    # a weight gradient's kernel is k2, launched already; its reduction is the routed count
    assert cache.first_seen_ns(("mm", "bf16", "tn", 1, 2816, 1024, 77)) == 180_000
    assert cache.first_seen_ns(_forward(0)) == 0  # no tokens: cuBLAS is not called
    # beyond the map's counts, the mean cost of an unmapped product (none run yet)
    assert cache.first_seen_ns(_forward(101)) == 4_200_000


def test_a_bad_kernel_map_is_refused_naming_the_product() -> None:
    bad = {**MAP, "products": [{**MAP["products"][0], "k": None}]}
    with pytest.raises(ValueError, match="product 0 needs exactly one of m, n, k null"):
        kernel_map_from_json("h100", bad)
    with pytest.raises(ValueError, match="kernels missing"):
        kernel_map_from_json("h100", {"products": [], "provenance": {}})


