"""The collective measuring and validation scripts plan and read 4- and 8-GPU runs.

Nothing here needs a GPU: plans are printed with --dry-run, logs and CSVs are fabricated in a
temporary folder, and only a few collectives are simulated (milliseconds each).
"""

import argparse
import csv
import json
import os
import sys
import tarfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from scripts.measure import measure_collectives as mc
from scripts.measure import measure_steps
from scripts.validate import validate_collectives as vc

ROOT = Path(__file__).resolve().parents[2]

GIB = 1 << 30


@pytest.fixture
def safety_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_collectives.main sets the NVLS switches in os.environ: restore them after."""
    for key, value in mc.SAFETY_ENV.items():
        monkeypatch.setenv(key, value)


# --- machine names and process counts ---------------------------------------------------------


@pytest.mark.parametrize(("gpu", "count", "name"), [
    ("NVIDIA H200", 8, "h200x8"),
    ("NVIDIA H200", 4, "h200x4"),
    ("NVIDIA H100 80GB HBM3", 1, "h100x1"),
    ("NVIDIA A100-SXM4-80GB", 2, "a100x2"),
    ("Tesla V100-SXM2-16GB", 8, "v100x8"),
    ("NVIDIA GeForce RTX", 1, "gpux1"),
])
def test_machine_name_from_gpu_name_and_count(gpu: str, count: int, name: str) -> None:
    assert measure_steps.machine_name(gpu, count) == name
    assert measure_steps.machine_gpus(name) == (count if name != "gpux1" else None)


def test_machine_names_match_the_validation_scripts() -> None:
    """The folder names the measuring scripts write are the ones the validators read."""
    from scripts.validate import validate_accuracy

    for name in ("h200x4", "h200x8"):
        assert vc.MACHINE_RE.match(name) and validate_accuracy.MACHINE_RE.match(name)
    assert measure_steps.machine_gpus("8xh100") is None


# --- measure_steps.py -------------------------------------------------------------------------


def test_two_gpu_suites_are_unchanged() -> None:
    """The 2-GPU plan still makes the runs stored in scripts/data/steps/h200x2, with the same
    arguments (but for the step count: the CI scenarios ran 3 steps before session d) and
    process counts."""
    from scripts.validate import validate_accuracy

    planned = {r.name: r for r in measure_steps.plan_runs("single,dist,dist-more", 2)}
    stored = [run for log in sorted((ROOT / "scripts/data/steps/h200x2").glob("*_gpt_*.log"))
              for run in measure_steps.parse_log(log, "h200x2")]
    assert len(stored) >= 15
    for run in stored:
        script, args, nproc, _ = validate_accuracy.invocation(run.command)
        plan = planned[run.name]
        assert (plan.script, measure_steps.with_steps(list(plan.args), 1), plan.nproc) == (
            script, measure_steps.with_steps(args, 1), nproc), run.name


def test_ci_scenario_runs_are_measured_over_more_steps_than_their_yaml_says() -> None:
    ci = {r.name: r for r in measure_steps.suite("single")}["ci-h100x1-gpt-single"]
    at = ci.args.index("--steps") + 1
    assert ci.args[at] == str(measure_steps.CI_STEPS)
    assert measure_steps.CI_STEPS - measure_steps.FIRST_MEASURED_STEP + 1 >= 5


def test_learned_moe_runs_record_their_routing_and_the_harness_replays_it() -> None:
    """``measure_moe_steps.py`` runs learned routing under ``record_routing.py``, its trace
    beside the log; the accuracy harness then replays that trace over the run's own steps (the
    measured median covers steps 3..10: each simulated step replays its recorded calls)."""
    from scripts.measure import measure_moe_steps
    from scripts.validate import validate_accuracy

    runs = {r.name: r for r in measure_moe_steps.moe_runs(Path("/o"), "h100x1")}
    learned, balanced = runs["moe-600m-b4-learned"], runs["moe-600m-b4-balanced"]
    command = learned.command()
    assert command[1].endswith("record_routing.py") and command[2:4] == [
        "--out", "/o/h100x1_moe-600m-b4-learned.routing.json"]
    assert not balanced.runner
    assert validate_accuracy.invocation(" ".join(command))[0] == "moe_ep.py"
    cases = {c.name: c for c in validate_accuracy.measured_cases()}
    replayed = cases["h100x1-moe-600m-b4-learned"].scenario
    assert replayed["simulation"]["routing"] == (
        "trace:../../scripts/data/steps/h100x1/h100x1_moe-600m-b4-learned.routing.json")
    args = replayed["workload"]["args"]
    assert args[args.index("--steps") + 1] == "10"
    assert "simulation" not in cases["h100x1-moe-600m-b4-balanced"].scenario


@pytest.mark.parametrize("nproc", [4, 8])
def test_distributed_suites_use_every_gpu(nproc: int) -> None:
    runs = measure_steps.plan_runs("dist,dist-more", nproc)
    assert {r.nproc for r in runs} == {nproc}
    for run in runs:
        command = run.command()
        assert command[command.index("--nproc_per_node") + 1] == str(nproc)
    kinds = {r.script for r in runs}
    assert kinds == {"gpt_ddp.py", "gpt_fsdp2.py", "gpt_tp.py"}
    # the CI scenarios are 2-GPU scenarios: not rerun at another count
    assert not any(r.name.startswith("ci-") for r in runs)
    # at most 4 logs per machine: with collectives' 4 files, the device's 8-file limit
    assert len({measure_steps.log_path(Path("o"), "m", r) for r in runs}) == 3


def test_tensor_parallel_model_splits_its_heads() -> None:
    """gpt_tp.py splits heads, vocabulary and sequence N ways; GPT-2 124M's 12 heads do not
    split 8 ways, so 8 GPUs use 350M's 16."""
    sys.path.insert(0, str(ROOT / "scenarios" / "examples"))
    from model import PRESETS  # the example scripts' presets (imports torch)

    for model, heads in measure_steps.TP_MODELS:
        assert PRESETS[model].n_head == heads
        assert PRESETS[model].vocab_size == measure_steps.GPT2_VOCAB
    assert measure_steps.GPT2_SEQ == int(measure_steps.GPT2_124M[3])
    assert measure_steps.tp_model(4) == "gpt2-124m"
    assert measure_steps.tp_model(8) == "gpt2-350m"
    assert measure_steps.tp_model(6) is None
    for nproc in (2, 4, 8):
        tp_runs = [r for r in measure_steps.plan_runs("dist,dist-more", nproc)
                   if r.script == "gpt_tp.py"]
        assert "tp-gpt2-350m-b8" in {r.name for r in tp_runs}
        for run in tp_runs:
            args = list(run.args)
            config = PRESETS[args[args.index("--model") + 1] if "--model" in args else "tiny"]
            seq = int(args[args.index("--seq-len") + 1]) if "--seq-len" in args else \
                config.block_size
            assert config.n_head % nproc == config.vocab_size % nproc == seq % nproc == 0
    assert not [r for r in measure_steps.plan_runs("dist", 6) if r.script == "gpt_tp.py"]


def test_run_dry_run_prints_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "steps" / "{machine}"
    measure_steps.main(["run", "--machine", "h200x8", "--suites", "dist,dist-more",
                        "--out", str(out), "--dry-run"])
    text = capsys.readouterr().out
    assert f"machine h200x8: 8 runs, logs under {tmp_path}/steps/h200x8" in text
    assert "tp-gpt2-350m-b8" in text and "h200x8_gpt_tp.log" in text
    assert text.count("--nproc_per_node 8") == 8
    assert not (tmp_path / "steps").exists()
    measure_steps.main(["run", "--machine", "h200x4", "--nproc", "2", "--suites", "dist",
                        "--out", str(out), "--dry-run"])
    assert capsys.readouterr().out.count("--nproc_per_node 2") == 6


def test_run_without_gpus_or_machine_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure_steps, "visible_gpu_names", list)
    with pytest.raises(SystemExit):
        measure_steps.main(["run", "--suites", "dist", "--out", "/tmp/x", "--dry-run"])
    monkeypatch.setattr(measure_steps, "visible_gpu_names", lambda: ["NVIDIA H200"] * 4)
    with pytest.raises(SystemExit):  # 8 processes on 4 GPUs
        measure_steps.main(["run", "--machine", "h200x8", "--suites", "dist",
                            "--out", "/tmp/x"])


@dataclass(frozen=True)
class ShellRun(measure_steps.Run):
    """A run whose command is a Python one-liner (no GPU, no example script)."""

    code: str = ""

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.code]


STEPS_CODE = ("for i in range(1, 6): print(f'step {i}/5 | loss 1 | {10.0 + i} ms (gpu {i} ms) | x')"
              "\nprint('rank 0: max_memory_allocated 1.500 GiB')")


def test_execute_budget_timeout_and_log_format(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    hang = ("import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
            "print('step 1/5 | loss 1 | 5.0 ms | x', flush=True)\ntime.sleep(60)")
    runs = [ShellRun("ok", "gpt_ddp.py", (), 2, code=STEPS_CODE),
            ShellRun("hang", "gpt_ddp.py", (), 2, code=hang),
            ShellRun("late", "gpt_fsdp2.py", (), 2, code=STEPS_CODE)]
    start = time.monotonic()
    measure_steps.execute(runs, tmp_path, "h200x8", budget_s=1.5)
    assert time.monotonic() - start < 1.5 + measure_steps.KILL_GRACE_S
    # the timed-out run's whole process group is gone, its child included
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the hanging run's child survived")
    ddp = measure_steps.parse_log(tmp_path / "h200x8_gpt_ddp.log", "h200x8")
    assert [(r.name, r.rc) for r in ddp] == [("ok", 0), ("hang", 124)]
    assert ddp[0].steps_ms == [13.0, 14.0, 15.0] and ddp[0].peak_gib == 1.5
    text = (tmp_path / "h200x8_gpt_ddp.log").read_text()
    assert "=== WALL ok: " in text and "=== WALL hang: " in text
    fsdp2 = (tmp_path / "h200x8_gpt_fsdp2.log").read_text()
    assert fsdp2.startswith("=== SKIP late: budget of 2 s spent")
    assert measure_steps.parse_log(tmp_path / "h200x8_gpt_fsdp2.log", "h200x8") == []


# --- measure_collectives.py -------------------------------------------------------------------


def test_collectives_plan_for_eight_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         safety_env: None) -> None:
    assert mc.main(["--out", str(tmp_path / "{machine}"), "--machine", "h200x8",
                    "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "GPUs: 8;" in text and f"output: {tmp_path}/h200x8" in text
    assert "at 64KiB, 128KiB," in text and "2GiB, 4GiB\n" in text
    assert not (tmp_path / "h200x8").exists()
    # two GPUs keep the 1 GiB top; an explicit --max-bytes wins
    assert mc.main(["--out", str(tmp_path), "--ngpus", "2", "--dry-run"]) == 0
    assert "512MiB, 1GiB\n" in capsys.readouterr().out
    assert mc.main(["--out", str(tmp_path), "--ngpus", "4", "--max-bytes", "16MiB",
                    "--variants", "default", "--dry-run"]) == 0
    assert "8MiB, 16MiB\n" in capsys.readouterr().out
    for environ_key, value in mc.SAFETY_ENV.items():
        assert os.environ[environ_key] == value


def test_collectives_refuses_inconsistent_counts(tmp_path: Path, safety_env: None) -> None:
    with pytest.raises(SystemExit):
        mc.main(["--out", str(tmp_path), "--machine", "h200x8", "--ngpus", "4", "--dry-run"])
    with pytest.raises(SystemExit):  # no GPU here: a real run is refused before any spawn
        mc.main(["--out", str(tmp_path), "--machine", "h200x8"])


@pytest.mark.parametrize("ngpus", [4, 8])
def test_sizes_divide_and_bus_bandwidth(ngpus: int) -> None:
    args = argparse.Namespace(ops=",".join(mc.OPS), min_bytes="64KiB", max_bytes=None,
                              step_factor=2, forced_sizes=mc.DEFAULT_FORCED_SIZES,
                              variants="all")
    plan = mc.build_plan(args, ngpus)
    assert plan[0].name == "default" and plan[0].sizes_bytes[-1] == 4 * GIB
    assert len(plan[0].sizes_bytes) == 17 and len(plan) == 7
    mc._check_divisible(plan, ngpus)
    row = mc.make_row("NVIDIA H200", ngpus, "default", "all_reduce", GIB, [4000.0, 4100.0])
    assert row.busbw_gbs == pytest.approx(row.algbw_gbs * 2 * (ngpus - 1) / ngpus, rel=1e-3)
    sent, expected = mc.check_pattern("all_to_all", 1, ngpus)
    assert len(sent) == len(expected) == ngpus


def tuning_line(func: str, nbytes: int, algo: str, proto: str, lo: int, hi: int) -> str:
    return (f"vm:1:1 [0] NCCL INFO {func}: {nbytes} Bytes -> Algo {algo} proto {proto} "
            f"channel{{Lo..Hi}}={{{lo}..{hi}}}")


def test_eight_gpu_logs_packed_and_read_back(tmp_path: Path) -> None:
    """NCCL's choices at 8 GPUs (per-rank byte counts for all_gather) survive --tar-logs."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / mc.rank_log_name("default", 0)).write_text("\n".join([
        tuning_line("AllReduce", 64 << 20, "RING", "SIMPLE", 0, 15),
        tuning_line("AllGather", (64 << 20) // 8, "RING", "LL128", 0, 31),
    ]) + "\n")
    for rank in range(1, 8):
        (logs / mc.rank_log_name("default", rank)).write_text("rank log\n")
    (logs / mc.rank_log_name("Tree/LL", 0)).write_text(
        tuning_line("AllReduce", 1 << 20, "TREE", "LL", 0, 7) + "\n")
    archive = mc.pack_logs(tmp_path)
    assert not logs.exists()
    with tarfile.open(archive) as tar:
        assert len(tar.getnames()) == 1 + 9 and "logs/nccl_Tree-LL_rank0.log" in tar.getnames()
    rows = [mc.make_row("NVIDIA H200", 8, "default", "all_reduce", 64 << 20, [500.0]),
            mc.make_row("NVIDIA H200", 8, "default", "all_gather", 64 << 20, [300.0]),
            mc.make_row("NVIDIA H200", 8, "Tree/LL", "all_reduce", 1 << 20, [40.0])]
    assert mc.annotate_rows(rows, archive) == []
    assert [(r.algo, r.proto, r.nchannels) for r in rows] == [
        ("RING", "SIMPLE", "16"), ("RING", "LL128", "32"), ("TREE", "LL", "8")]
    mc.write_csv(rows, tmp_path / "results.csv")
    assert [r.ngpus for r in mc.read_csv(tmp_path / "results.csv")] == [8, 8, 8]


# --- validate_collectives.py ------------------------------------------------------------------


def write_results(folder: Path, rows: list[tuple[str, int, str, int, float, str, str]],
                  name: str = "results.csv") -> None:
    """rows: (variant, ngpus, op, bytes, time_us, algo, proto)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / name).open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=mc.CSV_COLUMNS)
        writer.writeheader()
        for variant, ngpus, op, nbytes, time_us, algo, proto in rows:
            row = mc.make_row("NVIDIA H200", ngpus, variant, op, nbytes, [time_us])
            row.algo, row.proto, row.nchannels = algo, proto, "16" if algo else ""
            writer.writerow(asdict(row))


@pytest.fixture
def collectives_root(tmp_path: Path) -> Path:
    root = tmp_path / "collectives"
    write_results(root / "h200x8", [
        ("default", 8, "all_reduce", 64 << 20, 420.0, "RING", "SIMPLE"),
        ("default", 8, "all_gather", 64 << 20, 230.0, "RING", "SIMPLE"),
        ("default", 8, "all_to_all", 64 << 20, 260.0, "", ""),
        ("Tree/LL", 8, "all_reduce", 1 << 20, 60.0, "TREE", "LL"),
    ])
    write_results(root / "h200x4", [("default", 4, "all_reduce", 1 << 20, 20.0, "RING", "LL")])
    write_results(root / "h200x4", [("default", 4, "all_reduce", 1 << 20, 99.0, "RING", "LL"),
                                    ("default", 4, "all_reduce", 4 * GIB, 9e3, "RING", "SIMPLE")],
                  name="results_run2.csv")
    (root / "notes").mkdir()  # not <gpu>x<count>: ignored
    (root / "h200x16").mkdir()  # no results.csv: ignored
    return root


def test_every_measured_folder_is_a_set(collectives_root: Path) -> None:
    sets = vc.measured_sets(collectives_root)
    assert list(sets) == ["h200x4", "h200x8"]
    assert "h200x2" in vc.measured_sets()  # the stored 2-GPU data
    points = vc.measured_points("h200x8", sets["h200x8"], "default")
    assert [(p.dataset, p.gpu, p.ngpus, p.op) for p in points] == [
        ("h200x8", "h200", 8, "all_reduce"), ("h200x8", "h200", 8, "all_gather"),
        ("h200x8", "h200", 8, "all_to_all")]
    assert [p.ref_choice for p in points] == ["ring/simple", "ring/simple", "p2p"]
    assert len(vc.measured_points("h200x8", sets["h200x8"], "all")) == 4
    # a later run adds only the (variant, op, size) the first lacks
    four = vc.measured_points("h200x4", sets["h200x4"], "default")
    assert [(p.nbytes, p.ref_us) for p in four] == [(1 << 20, 20.0), (4 * GIB, 9e3)]


def test_only_choices_follow_the_folders(collectives_root: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert vc.main(["--only", "h200x8", "--variants", "all", "--dry-run"],
                   root=collectives_root) == 0
    text = capsys.readouterr().out
    assert "h200x8  default       8 x h200 on one NVSwitch host: 3 points" in text
    assert "h200x8  Tree/LL       8 x h200 on one NVSwitch host: 1 points" in text
    with pytest.raises(SystemExit):
        vc.main(["--only", "h200x2", "--dry-run"], root=collectives_root)
    assert vc.main(["--dry-run"], root=collectives_root) == 0
    text = capsys.readouterr().out
    assert "h100x8" in text and "4 x h200" in text and "8 x h200" in text


def test_eight_gpu_points_simulated_without_nvls(collectives_root: Path) -> None:
    points = vc.measured_points("h200x8", collectives_root / "h200x8", "all")
    for point in points:
        vc.simulate(point)
        assert point.sim_us > 0 and point.flows > 0
        assert not point.sim_choice.startswith("nvls")  # measured with NCCL_NVLS_ENABLE=0
    assert points[-1].sim_choice == "tree/ll"  # the forced variant
    # the public 8x H100 sweep ran with NVLS: the model may choose it there
    assert vc.config_for(vc.h100_points()[0]).nvls is None
    assert vc.config_for(points[0]).nvls is False


# --- validate_accuracy.py: several measuring sessions of one workload ---------------------------


def step_log(command: str, name: str, step_ms: list[float], peak_gib: float) -> str:
    """A measure_steps.py log of one run: its header, step lines, peak and exit."""
    lines = [f"=== RUN {name}: {command}"]
    lines += [f"step {i}/{len(step_ms)} | loss 1.0 | {ms:.2f} ms (gpu {ms:.2f} ms) | 1 tok/s"
              for i, ms in enumerate(step_ms, start=1)]
    lines += [f"rank 0: max_memory_allocated {peak_gib:.3f} GiB", f"=== EXIT {name}: 0"]
    return "\n".join(lines) + "\n"


def test_sessions_of_one_workload_make_one_case(tmp_path: Path) -> None:
    """Logs of one workload from three sessions (host instances): one case, measured as the
    median of the session medians, each session's median kept for the report's range."""
    from scripts.validate import validate_accuracy as va

    machine = tmp_path / "h200x2"
    machine.mkdir()
    command = "python3 /x/scenarios/examples/gpt_single.py --model gpt2-124m --steps 4"
    for session, ms in (("", 30.0), (".b", 27.0), (".c", 40.0)):
        (machine / f"h200x2_gpt_single{session}.log").write_text(
            step_log(command, "gpt2-124m-b8", [500.0, 60.0, ms, ms], 9.2))
    (cases,) = [va.measured_cases(tmp_path)]
    assert len(cases) == 1
    case = cases[0]
    assert sorted(case.session_ms) == [27.0, 30.0, 40.0] and case.measured_ms == 30.0
    assert case.measured_gib == pytest.approx(9.2)
    table = va.report([(case, va.Outcome(33.0, 9.2, 1.0, [], host_share=0.5))])
    assert "27.0-40.0" in table and "within the measured sessions' range: 1 of 1" in table
    # sessions 27-40 ms span more than 10%; the host bounds half the simulated step
    assert "1 of the 1 whose sessions span more than 10%" in table
    assert "host-bound when simulated (host bounds >= 20% of the step), 1 cases" in table
    assert "not host-bound" not in table


def test_steady_needs_sessions_on_two_host_instances(tmp_path: Path) -> None:
    """Close session medians make a workload steady only where the sessions' env logs name
    two host instances (GPU UUIDs): on one instance a host-bound run can be steady too."""
    from scripts.validate import validate_accuracy as va

    machine = tmp_path / "h200x1"
    machine.mkdir()
    command = "python3 /x/scenarios/examples/moe_ep.py --steps 4"
    for session, uuid in ((".s1", "GPU-a"), (".s2", "GPU-a"), (".s3", "GPU-b")):
        (machine / f"h200x1_moe_ep{session}.log").write_text(
            step_log(command, "moe", [500.0, 60.0, 100.0, 100.0], 1.0))
        (machine / f"h200x1_env{session}.log").write_text(f"    GPU UUID : {uuid}\n")
    (case,) = va.measured_cases(tmp_path)
    assert case.session_hosts == ("GPU-a", "GPU-a", "GPU-b")
    assert va.steady_across_hosts(case)
    one_host = va.replace(case, session_ms=case.session_ms[:2],
                          session_hosts=case.session_hosts[:2])
    assert not va.steady_across_hosts(one_host)
    (machine / "h200x1_env.s3.log").unlink()
    (case,) = va.measured_cases(tmp_path)
    assert case.session_hosts[2] == str(machine / "h200x1_moe_ep.s3.log")


# --- the MoE step's host phases (measure_moe_phases.py) ----------------------------------------


def test_phase_records_split_into_runs_and_tabulate(capsys: pytest.CaptureFixture[str]) -> None:
    """Every stored phase record parses into runs with steady steps; its table has one row per
    run, its step longer than any one phase."""
    from scripts.measure import measure_moe_phases as mp

    records = sorted((ROOT / "scripts" / "measure" / "data" / "host_phases").glob("*.txt"))
    assert records
    runs = {name: steps for path in records for name, steps in mp.runs_of(path).items()}
    assert len(runs) >= 3 and all(len(steps) >= mp.FIRST_STEADY_STEP + 1
                                  for steps in runs.values())
    mp.table(records)
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == len(runs)
    *phases, step = (float(v) for v in rows[0].split()[-len(mp.PHASES) - 1:])
    assert 0 < max(phases) < step


def test_phase_table_refuses_a_run_without_steady_steps(tmp_path: Path) -> None:
    from scripts.measure import measure_moe_phases as mp

    record = tmp_path / "short.txt"
    phases = {name: 1.0 for name in mp.PHASES}
    record.write_text("# run a: --batch-size 4\n"
                      + "".join(f"PHASES {json.dumps({'step': i, **phases})}\n" for i in range(2)))
    with pytest.raises(SystemExit, match="short.txt, short a: no step"):
        mp.table([record])


def test_a_run_under_the_profiler_measures_no_step() -> None:
    command = ("python3 -m torch.distributed.run --nproc_per_node 4 "
               "/repo/scripts/measure/profile_run.py --out /tmp/t -- "
               "/repo/scenarios/examples/gpt_ddp.py --steps 10")
    profiled = measure_steps.Result("h200x4", "ddp", command)
    plain = measure_steps.Result("h200x4", "ddp", "python3 gpt_ddp.py --steps 10")
    for step in range(1, 11):
        for result in (profiled, plain):
            result.read(f"step {step}/10 | loss 1.0 | {step:.2f} ms")
    assert profiled.steps_ms == [] and profiled.median_ms is None
    assert plain.steps_ms == [float(step) for step in range(3, 11)]
