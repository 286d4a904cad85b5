"""The value model on the fake GPU: integers, bools and small tensors carry real values, router
indices of fake floats follow the declared routing, and values a collective has yet to deliver
are computed once they arrive."""

import statistics
from typing import Any

import pytest

from tests.intercept.device_harness import run_snippet

ROUTING = """
import numpy as np
from intercept.dispatch import fake_mode
from intercept.values.value_model import ValueModel
from launch.value_policy import Routing
mode = fake_mode.active()
logits = torch.randn(4096, 8, device="cuda")  # 32768 fake floats: unknown values
def counts(routing, seed=0):
    mode.value_model = ValueModel(mode.values, Routing.parse(routing), seed, 0)
    _, idx = torch.topk(torch.softmax(logits, -1), 2, dim=-1)
    rows = idx.tolist()
    return {"counts": torch.bincount(idx.flatten(), minlength=8).tolist(),
            "distinct_rows": all(len(set(r)) == 2 for r in rows), "first": rows[:4]}
result["routing"] = {name: counts(name) for name in ("uniform", "balanced", "zipf:1.5")}
result["same_seed"] = counts("uniform", 7)["first"] == counts("uniform", 7)["first"]
result["other_seed"] = counts("uniform", 7)["first"] != counts("uniform", 8)["first"]
result["argmax_range"] = sorted(set(torch.argmax(logits, -1).tolist()))
vocab = torch.randn(8192, 50304, device="cuda")  # a language model's logits: few of many
mode.value_model = ValueModel(mode.values, Routing.parse("uniform"), 0, 0)
result["vocab_argmax"] = torch.argmax(vocab, -1).tolist()
result["vocab_top5"] = torch.topk(vocab, 5, dim=-1)[1].tolist()
import json, os, tempfile
trace = os.path.join(tempfile.mkdtemp(), "trace.json")
with open(trace, "w") as f:
    json.dump({"experts": 8, "top_k": 2, "calls": [[1000, 2000, 500, 1500, 1200, 800, 592, 600],
                                                   [4000, 4000, 100, 92, 0, 0, 0, 0]]}, f)
mode.value_model = ValueModel(mode.values, Routing.parse("trace:" + trace), 0, 0)
replayed = []
for rows in (4096, 4096, 4096, 2048):
    _, idx = torch.topk(torch.randn(rows, 8, device="cuda"), 2, dim=-1)
    replayed.append({"counts": torch.bincount(idx.flatten(), minlength=8).tolist(),
                     "distinct_rows": all(len(set(r)) == 2 for r in idx.tolist())})
result["trace"] = replayed
ranked = os.path.join(tempfile.mkdtemp(), "ranked.json")
for name, calls in (("ranked", [[4096] * 2 + [0] * 6]), ("ranked.rank0", [[4096] * 2 + [0] * 6]),
                    ("ranked.rank1", [[0] * 6 + [4096] * 2])):
    with open(os.path.join(os.path.dirname(ranked), name + ".json"), "w") as f:
        json.dump({"experts": 8, "top_k": 2, "calls": calls}, f)
result["by_rank"] = []
for rank in (0, 1, 2):
    mode.value_model = ValueModel(mode.values, Routing.parse("trace:" + ranked), 0, rank)
    _, idx = torch.topk(torch.randn(4096, 8, device="cuda"), 2, dim=-1)
    result["by_rank"].append(torch.bincount(idx.flatten(), minlength=8).tolist())
"""

COMPARISONS = """
from intercept.dispatch import fake_mode
from intercept.values.value_model import ValueModel
from launch.value_policy import Routing
mode = fake_mode.active()
norm = torch.randn(1 << 16, device="cuda").norm()  # a one-element fake float: reads 1.0
limit = torch.tensor(5.0, device="cuda")          # a known value
scores = torch.randn(4096, device="cuda")
def checks(rank):
    mode.value_model = ValueModel(mode.values, Routing.parse("uniform"), 0, rank)
    return {"negative": bool(norm < 0), "at_least_one": bool(norm >= 1.0),
            "over_limit": bool(norm > limit), "item_agrees": bool(norm < 2) == (norm.item() < 2),
            "share_true": (scores > 0).sum().item() / 4096}
result["ranks"] = [checks(0), checks(1)]
"""

PENDING = """
import numpy as np
from intercept.dispatch import fake_mode
store = fake_mode.active().values
t = torch.empty(4, dtype=torch.long, device="cuda")
store.expect(99, [t])            # a collective will write t
doubled = t * 2                  # queued: t's values are not there yet
total = doubled.sum()
result["pending_before"] = store.pending(total)
store.deliver([(99, np.array([1, 2, 3, 4]))])
result["total"] = total.item()
result["doubled"] = doubled.tolist()
"""

PENDING_DROPPED = """
import numpy as np
from intercept.dispatch import fake_mode
store = fake_mode.active().values
t = torch.empty(512, dtype=torch.long, device="cuda")
store.expect(99, [t])            # a collective will write t
doubled = t * 2                  # queued: reads t once its values are there
held = torch.cuda.memory_allocated()
del t                            # the script drops t before the values arrive
result["freed"] = torch.cuda.memory_allocated() < held
fresh = torch.full((512,), 7, dtype=torch.long, device="cuda")  # may reuse t's storage
result["fresh_pending"] = store.pending(fresh)
result["fresh"] = fresh.sum().item()
store.deliver([(99, np.arange(512))])
result["doubled"] = doubled.sum().item()
"""

FINITE_AND_UNKNOWN = """
import warnings
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
loss = model(torch.randn(512, 64, device="cuda")).sum()
scaler.scale(loss).backward()
mark = len(runtime.kernels)
scaler.step(opt)
scaler.update()
result["optimizer_kernels"] = len(runtime.kernels) - mark
result["scale"] = scaler.get_scale()
result["isnan"] = bool(torch.isnan(loss))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result["unknown_int"] = int(loss.long())
result["warned"] = [str(w.message) for w in caught]
try:
    torch.nonzero(torch.randn(4096, device="cuda").long())
except Exception as error:
    result["unknown_shape"] = f"{type(error).__name__}: {error}"
"""


@pytest.fixture(scope="module")
def routing() -> dict[str, Any]:
    return run_snippet(ROUTING)["result"]


def test_router_top_k_is_self_consistent(routing: dict[str, Any]) -> None:
    for name, found in routing["routing"].items():
        assert sum(found["counts"]) == 4096 * 2, name  # every token routed k times
        assert found["distinct_rows"], name


def test_routing_modes_shape_the_load(routing: dict[str, Any]) -> None:
    modes = routing["routing"]
    assert modes["balanced"]["counts"] == [1024] * 8
    assert all(abs(c - 1024) < 0.1 * 1024 for c in modes["uniform"]["counts"])
    zipf = sorted(modes["zipf:1.5"]["counts"])
    assert zipf[-1] > 4 * zipf[0]  # a few hot experts, like trained routers


def test_a_routing_trace_is_replayed_exactly_call_by_call(routing: dict[str, Any]) -> None:
    """Each router call takes its recorded call's counts (cycled), scaled where the call routes
    another number of tokens: expert GEMM shapes repeat as in the recorded run."""
    assert [call["counts"] for call in routing["trace"]] == [
        [1000, 2000, 500, 1500, 1200, 800, 592, 600], [4000, 4000, 100, 92, 0, 0, 0, 0],
        [1000, 2000, 500, 1500, 1200, 800, 592, 600], [2000, 2000, 50, 46, 0, 0, 0, 0]]
    assert all(call["distinct_rows"] for call in routing["trace"])


def test_a_trace_recorded_on_several_ranks_is_replayed_rank_by_rank(
        routing: dict[str, Any]) -> None:
    """Each rank replays its own ``<stem>.rank<r>.json``; a rank without one, the trace's."""
    rank0, rank1, rank2 = routing["by_rank"]
    assert rank0 == rank2 == [4096, 4096, 0, 0, 0, 0, 0, 0]
    assert rank1 == [0, 0, 0, 0, 0, 0, 4096, 4096]


def test_few_of_many_picks_are_uniform_and_distinct(routing: dict[str, Any]) -> None:
    """An argmax over a vocabulary, a top-5 of it: in range, distinct within a row, spread
    over the vocabulary (drawn, not one Gumbel key per logit)."""
    picks = routing["vocab_argmax"]
    assert all(0 <= p < 50304 for p in picks) and len(set(picks)) > 7000  # 8192 of 50304
    rows = routing["vocab_top5"]
    assert all(len(set(row)) == 5 and all(0 <= p < 50304 for p in row) for row in rows)
    assert statistics.mean(p for row in rows for p in row) == pytest.approx(50304 / 2, rel=0.02)


def test_values_are_seeded(routing: dict[str, Any]) -> None:
    assert routing["same_seed"] and routing["other_seed"]
    assert routing["argmax_range"] == list(range(8))


def test_one_element_comparisons_read_like_the_host_and_agree_across_ranks() -> None:
    """A norm checked against 0 (DeepSpeed's overflow check) must not differ between ranks,
    or their collectives stop matching; many elements still split about evenly."""
    first, second = run_snippet(COMPARISONS)["result"]["ranks"]
    for checks in (first, second):
        assert checks["negative"] is False
        assert checks["at_least_one"] is True
        assert checks["over_limit"] is False
        assert checks["item_agrees"] is True
        assert 0.4 < checks["share_true"] < 0.6
    assert first["share_true"] != second["share_true"]  # per rank: its own draws


def test_values_pending_on_a_collective_are_computed_when_they_arrive() -> None:
    result = run_snippet(PENDING)["result"]
    assert result == {"pending_before": True, "total": 20, "doubled": [2, 4, 6, 8]}


def test_a_dropped_pending_tensor_frees_its_memory_at_once() -> None:
    """Simulated memory follows the script, not the values' wall-clock arrival (reproducible
    peak memory); queued actions still read the dropped tensor's values, and a new tensor in
    the same memory is not pending on them."""
    result = run_snippet(PENDING_DROPPED)["result"]
    assert result == {"freed": True, "fresh_pending": False, "fresh": 7 * 512,
                      "doubled": 2 * sum(range(512))}


def test_fake_floats_are_finite_and_unknown_integers_say_so() -> None:
    result = run_snippet(FINITE_AND_UNKNOWN)["result"]
    assert result["optimizer_kernels"] > 0  # GradScaler found no inf: the step ran
    assert result["scale"] == 65536.0
    assert result["isnan"] is False
    assert result["unknown_int"] == 1
    assert any("does not know" in w for w in result["warned"])
    assert "simulation.unknown_shapes" in result["unknown_shape"]
    assert "aten::nonzero" in result["unknown_shape"]
