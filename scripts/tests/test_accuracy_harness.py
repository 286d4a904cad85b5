"""The accuracy harness reads the stored step logs and builds valid scenarios from them
(no simulation here: that takes minutes, see scripts/validate/validate_accuracy.py)."""

import shlex
from pathlib import Path

import pytest

from phantora.scenario import parse_scenario
from scripts.measure import measure_steps
from scripts.validate import validate_accuracy as harness


TORCHRUN = ("/opt/python3 -m torch.distributed.run --standalone --nproc_per_node 2 "
            "/repo/scenarios/examples/gpt_fsdp2.py --model llama-1b --steps 10 --batch-size 4")


def test_every_measured_run_becomes_a_valid_scenario() -> None:
    cases = harness.measured_cases()
    names = {case.name for case in cases}
    assert {"h100x1-gpt2-124m-b8", "h100x1-llama-1b-b4", "h200x2-fsdp2-llama-1b-b4-sac",
            "h200x2-ddp-gpt2-124m-b16"} <= names
    assert not any(name.startswith(f"h100x1-{measure_steps.PROFILE_PREFIX}") for name in names)
    for case in cases:
        scenario = parse_scenario(case.scenario, str(case.scenario_path))
        workload = scenario.workload
        args = list(workload.args)
        steps = int(args[args.index("--steps") + 1])
        if case.scenario.get("simulation", {}).get("routing", "").startswith("trace:"):
            assert steps >= harness.SIMULATED_STEPS, case.name  # the run's own steps
        else:
            assert steps <= harness.SIMULATED_STEPS, case.name
        assert scenario.cluster.gpu == case.machine.split("x")[0]
        assert case.measured_ms > 0 and case.measured_gib is not None


def test_committed_accuracy_scenarios_match_the_logs() -> None:
    """scenarios/accuracy/ is generated; regenerate with --write-scenarios after measuring."""
    cases = harness.measured_cases()
    committed = sorted(harness.ACCURACY_DIR.glob("*.yaml"))
    assert committed == sorted(case.scenario_path for case in cases)
    for case in cases:
        assert case.scenario_path.read_text() == harness.scenario_yaml(case), case.name


def test_anchor_scenario_and_published_numbers() -> None:
    (anchor,) = harness.anchor_cases()
    scenario = parse_scenario(anchor.scenario, str(anchor.scenario_path))
    assert scenario.cluster.gpu == "h100-hbm2e-96g"
    assert scenario.workload.world_size == 8
    assert anchor.measured_ms == pytest.approx(2843.46, abs=0.01)  # 2 x 8192 / 5762 s
    assert (anchor.measured_gib, anchor.memory) == (82.4, "reserved")


def test_roofline_anchor_scenarios_parse_on_gpus_without_tables() -> None:
    """Every published anchor of ROOFLINE_ANCHORS has its scenario, on an A100 or a B200."""
    cases = harness.anchor_cases(harness.ROOFLINE_ANCHORS)
    assert {path.name for path in harness.ANCHOR_DIR.glob("*.yaml")} == {
        case.scenario_path.name for case in cases + harness.anchor_cases()}
    for case in cases:
        scenario = parse_scenario(case.scenario, str(case.scenario_path))
        assert scenario.cluster.gpu in {"a100-80g", "b200"}, case.name
        assert case.measured_ms > 0


def test_command_line_to_script_args_and_ranks() -> None:
    assert harness.invocation(TORCHRUN) == (
        "gpt_fsdp2.py", ["--model", "llama-1b", "--steps", "10", "--batch-size", "4"], 2, {})
    single = "/usr/bin/python3 /r/scenarios/examples/gpt_single.py --steps 3"
    assert harness.invocation(single) == ("gpt_single.py", ["--steps", "3"], 1, {})
    megatron = next(r for r in measure_steps.plan_runs("frameworks", 2)
                    if r.script == "megatron_gpt.py")
    script, _, nproc, env = harness.invocation(shlex.join(megatron.command()))
    assert (script, nproc, env) == ("megatron_gpt.py", 2, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    assert harness.measured_scenario("h100x2", megatron.name, shlex.join(megatron.command()))[
        "workload"]["env"] == {"OMP_NUM_THREADS": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert measure_steps.with_steps(["--steps", "10", "--x"], 5) == ["--steps", "5", "--x"]
    assert measure_steps.with_steps(["--steps", "3"], 5) == ["--steps", "5"]
    assert measure_steps.with_steps(["--x"], 5) == ["--x", "--steps", "5"]
    assert harness.cluster_of("h200x2") == {"gpu": "h200", "hosts": 1, "gpus_per_host": 2}
    with pytest.raises(ValueError, match="h100x1"):
        harness.cluster_of("8xh100")


def test_simulated_output_read_by_the_measurement_rule() -> None:
    rank0 = "\n".join(f"step {i}/5 | loss 1.0 | norm 1.0 | lr 1e-4 | {ms} ms (gpu {ms} ms) | x"
                      for i, ms in enumerate([90.0, 50.0, 12.0, 10.0, 11.0], 1))
    rank0 += "\nrank 0: max_memory_allocated 2.000 GiB\nrank 0: max_memory_reserved 3.000 GiB"
    rank1 = "rank 1: max_memory_allocated 2.500 GiB\nrank 1: max_memory_reserved 2.900 GiB"
    result = measure_steps.parse_output([rank0, rank1], "h100x1", "x")
    assert result.steps_ms == [12.0, 10.0, 11.0]  # steps 1-2 are warm-up
    assert result.median_ms == 11.0
    assert (result.peak_gib, result.reserved_gib) == (2.5, 3.0)


def test_error_and_goals() -> None:
    assert harness.error_pct(110.0, 100.0) == pytest.approx(10.0)
    assert harness.error_pct(None, 100.0) is None
    assert harness.goals_met([4.0, -6.0], [9.0])
    assert not harness.goals_met([4.0, -11.0], [1.0])
    assert not harness.goals_met([1.0], [-12.0])
    message = "rank 5 failed:\nTraceback ...\nRuntimeError: CUDA out of memory. Tried\nmore"
    assert harness.failure_line(message) == "RuntimeError: CUDA out of memory. Tried"


@pytest.mark.parametrize("machine", ["h200x4", "h200x8"])
def test_multi_gpu_logs_become_cases_on_all_gpus(tmp_path: Path, machine: str) -> None:
    """Logs as measure_steps.py writes them on 4 or 8 GPUs (fabricated here, commands from the
    suites' own plan) become scenarios of that many ranks on one host of that many GPUs."""
    ngpus = int(machine.split("x")[1])
    runs = measure_steps.plan_runs("dist,dist-more", ngpus)
    folder = tmp_path / machine
    folder.mkdir()
    steps = "\n".join(f"step {i}/10 | loss 1.0 | {20.0 + i} ms (gpu {20.0 + i} ms) | x"
                      for i in range(1, 11))
    for run in runs:
        with open(measure_steps.log_path(folder, machine, run), "a") as log:
            log.write(f"=== RUN {run.name}: {measure_steps.shlex.join(run.command())}\n"
                      f"{steps}\nrank {ngpus - 1}: max_memory_allocated 3.250 GiB\n"
                      f"=== EXIT {run.name}: 0\n=== WALL {run.name}: 31.0 s\n")
    with open(folder / f"{machine}_gpt_ddp.log", "a") as log:  # left out: not measured
        log.write("=== SKIP late-run: budget of 280 s spent\n"
                  "=== RUN failed-run: python3 -m torch.distributed.run --nproc_per_node "
                  f"{ngpus} /r/scenarios/examples/gpt_ddp.py\n=== EXIT failed-run: 124\n")
    cases = harness.measured_cases(tmp_path)
    assert sorted(case.name for case in cases) == sorted(f"{machine}-{r.name}" for r in runs)
    by_script = {}
    for case in cases:
        assert case.machine == machine and Path(case.source).parent == folder
        assert case.measured_ms == 26.5 and case.measured_gib == 3.25  # median of steps 3..10
        assert case.scenario["cluster"] == {"gpu": "h200", "hosts": 1, "gpus_per_host": ngpus}
        assert case.scenario["workload"]["nproc_per_node"] == ngpus
        scenario = parse_scenario(case.scenario, str(case.scenario_path))
        assert scenario.workload.world_size == ngpus
        args = list(scenario.workload.args)
        assert args[args.index("--steps") + 1] == str(harness.SIMULATED_STEPS)
        by_script.setdefault(Path(scenario.workload.script).name, []).append(args)
    assert set(by_script) == {"gpt_ddp.py", "gpt_fsdp2.py", "gpt_tp.py"}
    tp_models = {args[args.index("--model") + 1] for args in by_script["gpt_tp.py"]}
    assert tp_models == ({"gpt2-124m", "gpt2-350m"} if ngpus == 4 else {"gpt2-350m"})


def test_one_command_under_two_run_names_is_one_case(tmp_path: Path) -> None:
    """Two suites log the same command under two names, each session under its own: one case,
    named as most sessions name it, with every session's median and a routing trace of either
    name."""
    machine = tmp_path / "h200x1"
    machine.mkdir()
    command = ("/p/python3 /r/scenarios/examples/moe_ep.py --model moe-600m --steps {steps} "
               "--routing learned")
    for session, name, steps, ms in (("a", "moe-learned", 10, 100.0),
                                     ("b", "moe-learned", 10, 110.0),
                                     ("c", "ep-moe-learned", 12, 130.0)):
        lines = "\n".join(f"step {i}/{steps} | loss 1.0 | {ms:.2f} ms" for i in range(1, steps + 1))
        (machine / f"h200x1_moe_ep.{session}.log").write_text(
            f"=== RUN {name}: {command.format(steps=steps)}\n{lines}\n"
            f"rank 0: max_memory_allocated 1.000 GiB\n=== EXIT {name}: 0\n"
            f"=== WALL {name}: 9.0 s\n")
    (machine / "h200x1_ep-moe-learned.routing.json").write_text("{}")
    (case,) = harness.measured_cases(tmp_path)
    assert case.name == "h200x1-moe-learned"
    assert sorted(case.session_ms) == [100.0, 110.0, 130.0]
    assert case.scenario["simulation"]["routing"].endswith("h200x1_ep-moe-learned.routing.json")
    assert harness.run_key("h200x1", "env TORCH_CUDA_ARCH_LIST=9.0 " + command.format(steps=3)) \
        == harness.run_key("h200x1", command.format(steps=10))


def test_megatron_runs_under_torchrun_even_on_one_gpu() -> None:
    """Megatron's model-parallel state needs a process group, which only torchrun's rendezvous
    gives the example (train_utils.init_distributed)."""
    megatron = next(r for r in measure_steps.plan_runs("frameworks", 1)
                    if r.script == "megatron_gpt.py")
    assert harness.invocation(shlex.join(megatron.command()))[2] == 1
    assert "torch.distributed.run" in megatron.command()
    examples = Path(measure_steps.EXAMPLES)
    assert measure_steps.PROCESS_GROUP_SCRIPTS == {
        path.name for path in examples.glob("*.py") if "init_distributed()" in path.read_text()
        and path.name != "train_utils.py"}


def test_sessions_own_spread_is_one_session_against_the_others() -> None:
    assert harness.leave_one_out_pct((100.0, 110.0)) == []
    assert harness.leave_one_out_pct((100.0, 100.0, 150.0)) == pytest.approx([-20.0, -20.0, 50.0])
    case = harness.Case("h200x1-x", "h200x1", {}, Path("x.yaml"), 100.0, 1.0, "allocated", "log",
                        (90.0, 100.0, 120.0), ("a", "b", "c"))
    outcome = harness.Outcome(100.0, 1.0, 1.0, [], host_share=0.5)
    text = harness.report([(case, outcome)])
    assert ("the real sessions' own spread there (1 cases of 3+ sessions, 3 sessions): one "
            "session against the median of the others, mean |difference| 16.4%, max 26.3%"
            ) in text


def test_a_case_meets_its_goal_within_12_percent_or_inside_a_wide_range() -> None:
    assert harness.case_met(11.9, (100.0,), 111.9)
    assert not harness.case_met(-15.0, (80.0, 88.0), 85.0)  # a range of 10%: not wide
    assert harness.case_met(-15.0, (80.0, 100.0), 85.0)      # wide, and inside it
    assert not harness.case_met(-25.0, (80.0, 100.0), 75.0)  # wide, below it
    case = harness.Case("h200x1-x", "h200x1", {}, Path("x.yaml"), 100.0, 1.0, "allocated", "log",
                        (90.0, 110.0), ("a", "b"))
    text = harness.report([(case, harness.Outcome(130.0, 1.0, 1.0, [], host_share=0.5))])
    assert "or inside their sessions' range where it spans more than 10%: 0 of 1; " \
           "missed: h200x1-x +30.0%" in text
