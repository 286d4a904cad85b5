"""The host cost of a collective call on two or more ranks (``intercept.host_time.collective_host``)."""

import json
from pathlib import Path

import pytest

from intercept.host_time.collective_host import (CollectiveCallCost, cost_from_json,
                                                 load_collective_cost)

MODEL = CollectiveCallCost("h100-host", {"all_reduce": 40_000, "all_gather": 15_000,
                                         "reduce_scatter": 20_000, "all_to_all": 25_000,
                                         "broadcast": 18_000, "default": 20_000},
                           slope_ns=17_000, tau_ns=10_000, max_gap_ns=20_000_000)
REPO = Path(__file__).resolve().parents[2]


def test_the_cost_grows_with_the_gap_up_to_its_cap() -> None:
    costs = [MODEL.call_ns("all_reduce", gap) for gap in (0, 10_000, 1_000_000, 20_000_000)]
    assert costs[0] == 40_000 and costs == sorted(costs) and len(set(costs)) == 4
    assert MODEL.call_ns("all_reduce", 10**12) == costs[-1]
    assert MODEL.call_ns("all_reduce", None) == costs[-1]  # a rank's first call: the coldest


def test_ops_without_a_row_take_the_all_to_all_or_default_row() -> None:
    assert MODEL.call_ns("all_to_allv", 0) == 25_000
    assert MODEL.call_ns("send", 0) == MODEL.call_ns("recv", 0) == 20_000


def test_a_slower_host_scales_costs_and_gaps_alike() -> None:
    slow = MODEL.scaled("slow-host", 2.0)
    for gap in (0, 50_000, 3_000_000):
        assert slow.call_ns("all_gather", 2 * gap) == pytest.approx(
            2 * MODEL.call_ns("all_gather", gap), abs=2)


def test_a_bad_document_names_the_key() -> None:
    data = json.loads((REPO / "hwmodel/measured/data/collective_host.json").read_text())
    with pytest.raises(ValueError, match="slope_ns"):
        cost_from_json({k: v for k, v in data.items() if k != "slope_ns"})
    with pytest.raises(ValueError, match="hot_ns needs exactly"):
        cost_from_json({**data, "hot_ns": {"all_reduce": 1}})


def test_the_stored_sessions_are_the_ones_the_model_names() -> None:
    sessions = load_collective_cost().provenance["sessions"]
    assert sessions and all((REPO / Path(s)).is_dir() for s in sessions)
