"""The pipeline-parallel and expert-parallel examples compute what one device computes: same
seed, same batches, same losses and gradient norms, run for real under torchrun on this CPU
(gloo, fp32)."""

from pathlib import Path

import pytest

from tests.integration.live_examples import Step, parse_steps
from tests.integration.test_live_examples_cpu import torchrun

TINY = ["--steps", "2", "--num-workers", "0"]
PP_MODEL = ["--model", "llama-tiny", "--n-layer", "4", "--batch-size", "2"]
MICROBATCHES = 4
EP_BATCH = 4
"""Sequences per step of the expert-parallel comparison, split over its ranks."""


def _assert_same_training(reference: list[Step], parallel: list[Step]) -> None:
    assert len(parallel) == len(reference) == 2
    for one, other in zip(reference, parallel, strict=True):
        assert other.loss == pytest.approx(one.loss, abs=2e-4)
        assert other.norm == pytest.approx(one.norm, abs=2e-4)
    assert reference[0].loss != reference[1].loss  # the steps did train


@pytest.fixture(scope="module")
def single_device_llama(tmp_path_factory: pytest.TempPathFactory) -> list[Step]:
    """gpt_single.py accumulating over as many micro-batches as the pipeline runs."""
    log = torchrun("gpt_single.py", [*TINY, *PP_MODEL, "--grad-accum", str(MICROBATCHES)], 1,
                   tmp_path_factory.mktemp("single"))[0]
    return parse_steps(log)


@pytest.mark.slow
@pytest.mark.parametrize(("ranks", "schedule", "static"), [
    (2, "1f1b", False), (2, "gpipe", True), (4, "1f1b", True), (4, "gpipe", False),
    (2, "interleaved1f1b", False), (2, "zbv", True),
], ids=lambda v: str(v))
def test_pipeline_trains_exactly_like_one_device(single_device_llama: list[Step], ranks: int,
                                                 schedule: str, static: bool,
                                                 tmp_path: Path) -> None:
    args = [*TINY, *PP_MODEL, "--microbatches", str(MICROBATCHES), "--schedule", schedule]
    if schedule == "interleaved1f1b":
        args += ["--stages-per-rank", "2"]
    if static:
        args.append("--static-shapes")
    logs = torchrun("llama_pp.py", args, ranks, tmp_path)
    _assert_same_training(single_device_llama, parse_steps(logs[0]))
    assert all(not parse_steps(log) for log in logs[1:]), "only rank 0 prints steps"


@pytest.fixture(scope="module")
def single_process_moe(tmp_path_factory: pytest.TempPathFactory) -> list[Step]:
    """moe_ep.py in one process, on the whole batch the expert-parallel runs split."""
    log = torchrun("moe_ep.py", [*TINY, "--batch-size", str(EP_BATCH)], 1,
                   tmp_path_factory.mktemp("one"))[0]
    return parse_steps(log)


@pytest.mark.slow
@pytest.mark.parametrize(("ranks", "all_to_all"), [(2, "nn"), (2, "functional"),
                                                   (4, "functional")])
def test_expert_parallel_trains_exactly_like_one_process(single_process_moe: list[Step],
                                                         ranks: int, all_to_all: str,
                                                         tmp_path: Path) -> None:
    """W ranks of B sequences each see, step by step, the same sequences as one process of
    W x B (DistributedSampler interleaves one shuffled order); tokens are routed one by
    one, no capacity limit drops any, so the mean loss and the global gradient match."""
    logs = torchrun("moe_ep.py", [*TINY, "--batch-size", str(EP_BATCH // ranks),
                                  "--all-to-all", all_to_all], ranks, tmp_path)
    _assert_same_training(single_process_moe, parse_steps(logs[0]))
