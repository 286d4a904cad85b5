"""Host windows between collective calls: the real record's and the simulated graph's."""

import json
from pathlib import Path

from phantora.record.graph import FORMAT, VERSION
from scripts.measure import compare_host_windows as windows


def test_real_windows_take_the_calls_in_and_the_timed_waits_out() -> None:
    record = {"step_ends_us": [0.0, 100.0, 200.0],
              "timeline_us": [[10.0, 5.0, "all_reduce/2"], [30.0, 4.0, "sync.item/0"],
                              [50.0, 5.0, "all_reduce/2"], [110.0, 5.0, "all_reduce/2"],
                              [160.0, 5.0, "all_reduce/2"]]}
    kinds, steps = windows.real_windows(record)
    assert kinds == ["all_reduce", "all_reduce"]
    assert steps == [[55.0 - 15.0 - 4.0], [165.0 - 115.0]]


def test_simulated_windows_sum_host_gaps_between_collectives(tmp_path: Path) -> None:
    (tmp_path / "graph").mkdir()
    bounds = [0, 1000, 2000, 3000, 4000]
    (tmp_path / "graph" / "meta.json").write_text(json.dumps(
        {"format": FORMAT, "version": VERSION, "world_size": 1, "optimizer_steps_ns": [bounds]}))
    records = []
    for start in bounds[:-1]:
        records += [{"op": "collective", "t_ns": start + 100, "cpu_ns": 50, "kind": "all_gather"},
                    {"op": "kernel", "t_ns": start + 300, "cpu_ns": 200, "name": "aten::mm"},
                    {"op": "sync", "t_ns": start + 400, "cpu_ns": 100, "blocked_ns": 900},
                    {"op": "collective", "t_ns": start + 600, "cpu_ns": 200, "kind": "all_reduce"}]
    (tmp_path / "graph" / "rank0.jsonl").write_text("\n".join(map(json.dumps, records)))
    kinds, steps = windows.simulated_windows(tmp_path, 0)
    assert kinds == ["all_gather", "all_reduce"]
    assert steps == [[0.5], [0.5]]  # steps 3 and 4: 200 + 100 + 200 ns, the block left out
    assert windows.medians([[1.0, 4.0], [3.0, 2.0, 9.0]]) == [2.0, 3.0]
