"""scripts/measure/record_traffic.py records what the examples really send, run for real under
torchrun on this CPU (gloo): the bytes follow the model's shapes and the router's counts; and
scripts/validate/validate_traffic.py finds the simulator's traffic equal to those recordings."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.measure import record_traffic
from scripts.validate import validate_traffic
from tests.integration.live_examples import ROOT

EXAMPLES = ROOT / "scenarios" / "examples"
TINY = ["--steps", "1", "--num-workers", "0", "--batch-size", "2"]
SEQ, WIDTH, EXPERTS, TOP_K, LAYERS = 128, 128, 8, 2, 2
"""moe-tiny / llama-tiny: tokens per sequence, model width, experts, top-k, blocks."""


@pytest.mark.slow
def test_expert_parallel_traffic_follows_the_routing(tmp_path: Path) -> None:
    out, trace = tmp_path / "traffic.json", tmp_path / "trace.json"
    record_traffic.main(["--nproc", "2", "--out", str(out), "--routing-trace", str(trace),
                         "--", str(EXAMPLES / "moe_ep.py"), *TINY])
    result = json.loads(out.read_text())
    assert all(result["checks"].values()), result["checks"]
    ranks = result["ranks"]
    routed = 2 * SEQ * TOP_K  # this rank's token copies per MoE layer
    for rank in ranks:
        calls = rank["router_calls"]
        assert len(calls) == LAYERS
        assert all(sum(c["counts"]) == routed and len(c["counts"]) == EXPERTS for c in calls)
    local = EXPERTS // 2
    for layer in range(LAYERS):
        counts = [rank["router_calls"][layer]["counts"] for rank in ranks]
        for receiver, rank in enumerate(ranks):
            # forward: per layer the count exchange, the dispatch, the combine
            a2as = [e for e in rank["events"] if "input_split_sizes" in e]
            dispatch = a2as[3 * layer + 1]
            mine = slice(receiver * local, (receiver + 1) * local)
            assert dispatch["output_split_sizes"] == [sum(c[mine]) for c in counts]
            assert dispatch["input_split_sizes"] == [
                sum(counts[receiver][s * local:(s + 1) * local]) for s in range(2)]
            assert dispatch["row_bytes"] == WIDTH * 4  # fp32 on a CPU
    written = json.loads(trace.read_text())
    assert written == {"experts": EXPERTS, "top_k": TOP_K,
                       "calls": [c["counts"] for c in ranks[0]["router_calls"]]}
    assert json.loads((tmp_path / "trace.rank1.json").read_text())["calls"] == [
        c["counts"] for c in ranks[1]["router_calls"]]


def test_the_light_routing_recorder_writes_every_router_call(tmp_path: Path) -> None:
    """``record_routing.py`` (no dispatch mode, so a timed run keeps its speed): one process,
    two steps, every MoE layer's counts in call order, each summing to the routed copies."""
    trace = tmp_path / "trace.json"
    recorder = ROOT / "scripts" / "measure" / "record_routing.py"
    done = subprocess.run([sys.executable, str(recorder), "--out", str(trace), "--",
                           str(EXAMPLES / "moe_ep.py"), *TINY[2:], "--steps", "2"],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads(trace.read_text())
    assert written["experts"] == EXPERTS and written["top_k"] == TOP_K
    assert len(written["calls"]) == 2 * LAYERS
    assert all(sum(call) == 2 * SEQ * TOP_K for call in written["calls"])


@pytest.mark.slow
def test_pipeline_traffic_is_one_activation_per_micro_batch(tmp_path: Path) -> None:
    microbatches = 4
    result = record_traffic.record(EXAMPLES / "llama_pp.py",
                                   [*TINY, "--microbatches", str(microbatches)], 2, None,
                                   {"OMP_NUM_THREADS": "1"})
    assert all(result["checks"].values()), result["checks"]
    activation = 2 * SEQ * WIDTH * 4  # a micro-batch's hidden states, fp32
    for rank, peer in ((0, 1), (1, 0)):
        sends = [e for e in result["ranks"][rank]["events"] if e["op"] == "c10d.send"
                 and "context" not in e and e["dtype"] == "float32"]
        # rank 0 sends activations forward, rank 1 their gradients back
        assert [(e["peer"], e["bytes"]) for e in sends] == [(peer, activation)] * microbatches
    shapes = [e for e in result["ranks"][1]["events"] if e.get("context")]
    assert shapes, "the stages exchanged their shapes (no input_args)"


def test_traffic_comparison_judges_fixed_sizes_and_counts() -> None:
    """Fixed-size traffic must match op by op and size by size; all_to_allv only in count
    (its size follows the routing)."""
    recorded = [[("send", 8), ("all_to_allv", 100)], [("recv", 8), ("all_to_allv", 60)]]
    same = [[("send", 8), ("all_to_allv", 90)], [("recv", 8), ("all_to_allv", 90)]]
    assert validate_traffic.compare(recorded, same)[1] == 0
    assert validate_traffic.compare(recorded, [[("send", 4), ("all_to_allv", 90)],
                                               [("recv", 8), ("all_to_allv", 90)]])[1] == 2
    assert validate_traffic.compare(recorded, [[("send", 8)], [("recv", 8)]])[1] == 2
    barrier = {"rank": 0, "events": [{"op": "c10d.barrier", "bytes": 1}]}
    assert validate_traffic.recorded_events(barrier) == [("all_reduce", 4)]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", validate_traffic.CASES)
def test_simulated_traffic_matches_the_recorded_run(scenario: str, tmp_path: Path) -> None:
    """The committed recording of a real run against the simulator's trace."""
    table, mismatches = validate_traffic.validate(scenario, tmp_path)
    assert mismatches == 0, table
