"""scripts/record_traffic.py records what the examples really send, run for real under
torchrun on this CPU (gloo): the bytes follow the model's shapes and the router's counts."""

import json
import sys
from pathlib import Path

import pytest

from tests.integration.live_examples import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import record_traffic  # scripts/ is not a package: imported from its folder

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
