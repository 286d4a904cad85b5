"""Accuracy regression in CI: the error bounds the README states, recomputed by the validation
harnesses (``scripts/validate/``) from the stored measurements (``data/``).

A failure here means the model's accuracy moved. If it got better, lower the bound here and in
the README's "Measured" table. The golden summaries of bundled scenarios are
``tests/integration/test_golden_summaries.py``.
"""

import itertools
import multiprocessing
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from hwmodel.catalogue import CATALOGUE
from hwmodel.compute.fitted import EfficiencyCurves
from hwmodel.compute.model import ComputeModel, table_path
from hwmodel.compute.table import KernelTable
from phantora.cpu_affinity import usable_cpus
from phantora.scenario import parse_scenario
from scripts.measure import measure_steps
from scripts.validate import validate_accuracy as harness
from scripts.validate import validate_collectives as collectives_harness
from scripts.validate import validate_compute as compute_harness

COLLECTIVE_BOUNDS = {"h100x8": (3.4, 6.9), "h200x2": (7.5, 24.5)}
"""README: collectives >= 1 MiB with NCCL's own choices, (mean, max) |error| in %."""
HOLDOUT_MEDIAN_BOUNDS = {("h100", "matmul"): 8.0, ("h100", "memory"): 7.9,
                         ("h100", "attention"): 13.4, ("h200", "matmul"): 6.9,
                         ("h200", "memory"): 8.0, ("h200", "attention"): 13.9}
"""README: median |error| in % of kernels the compute model was not given (held-out shapes)."""
STEADY_STEP_BOUNDS = (3.6, 15.6)
"""README: (mean, max) |step error| in % over the workloads steady across host instances, in
reproducible mode (the README's mean is 3.6% over 20 workloads, the 17 of at most two ranks that
CI runs 3.63%, rounded up by the check to 3.65; the max is the model zoo's Hugging Face Llama on
1xH100, +15.6%, held out; next GPT-2 350M batch 8 on 2xH200, 12.2%; the harness's goal is a mean
of 5% and a max of 12%)."""
STEADY_CI_MAX_RANKS = 2
"""The steady workloads CI simulates have at most this many ranks: the three steady 4xH200 ones
(pipeline-parallel Llama: 1F1B, GPipe, interleaved) would add ~1.5 minutes to the test command.
``validate_accuracy.py --steady`` runs them all; ``docs/validation.md`` gives their errors."""
HOST_BOUND_STEP_BOUNDS = (11.0, 31.3)
"""README: (mean, max) |step error| in % over the CI-sized host-bound workloads (``ci-`` in the
case's name: a tiny GPT single, DDP, FSDP2 and TP, the tiny MoE on H100 and on H200 replaying
their runs' routing traces) with counted host time, the default; deterministic on one rank, so
one simulation each (the mean is 10.96% over eight cases; the bound, 11.0 rounded up to 11.05,
leaves 0.1 point for the two-rank runs, which move the mean by hundredths of a point between runs).
The max is the tiny GPT on 1xH100 (+31.3%: its three stored sessions span 9.5-13.8 ms, a
fourth host that day ran it at 16.8 ms); next are the tiny GPT on 1xH200 (-23.7%: six sessions
on five instances, 12.7-18.3 ms) and the tiny FSDP2 on 2xH200 (-13.1%)."""


def _rounded_up(value: float) -> float:
    """A bound stated with one decimal holds up to the next 0.05."""
    return value + 0.05


def test_collectives_stay_within_the_readme_bounds() -> None:
    points = collectives_harness.h100_points() + [
        point for name, folder in collectives_harness.measured_sets().items()
        for point in collectives_harness.measured_points(name, folder, "default")]
    for point in points:
        collectives_harness.simulate(point)
    for dataset, (mean_bound, max_bound) in COLLECTIVE_BOUNDS.items():
        errors = [abs(p.error_pct) for p in points if p.dataset == dataset and p.nbytes >= 1 << 20
                  and p.variant in collectives_harness.GOAL_VARIANTS]
        assert errors, dataset
        assert statistics.mean(errors) <= _rounded_up(mean_bound), (dataset, errors)
        assert max(errors) <= _rounded_up(max_bound), (dataset, errors)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_held_out_kernels_stay_within_the_readme_bounds(gpu: str) -> None:
    path = table_path(gpu)
    assert path is not None
    spec = CATALOGUE[gpu]
    without_holdouts = KernelTable.load(path, holdout=False)
    model = ComputeModel(spec, without_holdouts, EfficiencyCurves.fit(without_holdouts, spec))
    holdouts = [row for row in KernelTable.load(path).rows
                if compute_harness.is_modelled_holdout(row)]
    by_family = compute_harness.errors(holdouts, lambda s: model.cost(s).duration_ns)
    for (bound_gpu, family), bound in HOLDOUT_MEDIAN_BOUNDS.items():
        if bound_gpu == gpu:
            median = 100 * float(np.median(np.abs(by_family[family])))
            assert median <= _rounded_up(bound), (gpu, family, median)


@pytest.mark.slow
def test_steady_workloads_stay_within_the_readme_bounds_in_reproducible_mode(
        tmp_path: Path) -> None:
    """Every measured workload of at most :data:`STEADY_CI_MAX_RANKS` ranks whose real step
    does not move with the host instance (``validate_accuracy.steady_across_hosts``), simulated
    once in reproducible mode: about a minute and a half here."""
    cases = [case for case in harness.measured_cases()
             if harness.steady_across_hosts(case) and _ranks(case) <= STEADY_CI_MAX_RANKS]
    assert len(cases) >= 8
    _assert_within(STEADY_STEP_BOUNDS, tmp_path, [_reproducible(case) for case in cases])


def _reproducible(case: harness.Case) -> harness.Case:
    """``case`` in reproducible mode. There every step of a one-process run after the warm-up
    takes the same time (checked on each such case: the median of steps 3-8 is step 3's), so
    it runs up to the first step the measurement reads only."""
    scenario = {**case.scenario, "simulation": {"reproducible": True}}
    workload = scenario["workload"]
    if workload["nproc_per_node"] == 1:
        scenario["workload"] = {**workload, "args": measure_steps.with_steps(
            workload["args"], measure_steps.FIRST_MEASURED_STEP)}
    return replace(case, scenario=scenario)


def test_host_bound_workloads_stay_within_the_readme_bounds_with_counted_host_time(
        tmp_path: Path) -> None:
    """The CI-sized measured workloads, whose real steps are host time: about two minutes."""
    cases = [case for case in harness.measured_cases() if "-ci-" in case.name]
    assert len(cases) >= 5
    _assert_within(HOST_BOUND_STEP_BOUNDS, tmp_path, cases)


def _assert_within(bounds: tuple[float, float], tmp_path: Path,
                   cases: list[harness.Case]) -> None:
    """Simulate each case once; the (mean, max) |step error| in % must be within ``bounds``."""
    errors = {}
    for case, outcome in zip(cases, _simulate_all(cases, tmp_path), strict=True):
        assert outcome.error is None, (case.name, outcome.error)
        errors[case.name] = harness.error_pct(outcome.simulated_ms, case.measured_ms)
    magnitudes = [abs(error) for error in errors.values()]
    table = "\n".join(f"{name:32} {error:+6.1f}%" for name, error in errors.items())
    mean_bound, max_bound = bounds
    assert statistics.mean(magnitudes) <= _rounded_up(mean_bound), table
    assert max(magnitudes) <= _rounded_up(max_bound), table


def _simulate_all(cases: list[harness.Case], out_root: Path) -> list[harness.Outcome]:
    """Each case simulated once. A one-rank simulation keeps to one CPU
    (``phantora.cpu_affinity``), so those run as many at a time as this process has CPUs,
    each in a process pinned to a CPU of its own; then the others one at a time on all of
    them (ranks time-sharing a CPU take ~60% more CPU time). Counted and reproducible host
    time do not depend on the machine's load."""
    one_rank = [case for case in cases if _ranks(case) == 1]
    cpus = usable_cpus()
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(len(cpus), mp_context=context, initializer=_pin_to_next_cpu,
                             initargs=(cpus, context.Value("i", 0))) as pool:
        outcomes = dict(zip((case.name for case in one_rank),
                            pool.map(_simulate, one_rank, itertools.repeat(out_root)),
                            strict=True))
    return [outcomes[case.name] if case.name in outcomes else _simulate(case, out_root)
            for case in cases]


def _ranks(case: harness.Case) -> int:
    """The case's world size: how many ranks its simulation runs."""
    return parse_scenario(case.scenario, str(case.scenario_path)).workload.world_size


def _pin_to_next_cpu(cpus: list[int], taken: Synchronized) -> None:
    """A pool worker's start: onto the first of ``cpus`` no other worker took."""
    with taken.get_lock():
        cpu = cpus[taken.value]
        taken.value += 1
    os.sched_setaffinity(0, {cpu})


def _simulate(case: harness.Case, out_root: Path) -> harness.Outcome:
    """A pool worker's task: a module function, which the pool sends by name."""
    return harness.simulate(case, out_root, Console(quiet=True))
