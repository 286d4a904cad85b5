"""``phantora-ns3 diff``: one classifier sorts real and simulated kernels into the same
families; a step's GPU idle and exposed communication come from the kernels inside its window;
a synthetic run folder and trace are aligned step by step with the numbers worked out by hand,
whether the profiler was stepped or ran around the whole loop; the profiler's own host cost is
estimated beside each step; traces of another job are refused, saying what does not match."""

import json
from pathlib import Path
from typing import Literal

import pytest

from hwmodel.compute.inductor import generated_name
from hwmodel.errors import ProfileError
from phantora.cli import main
from phantora.diff.compare import (PROFILER_NS_PER_EVENT, CollectiveStats, ProfilerCost,
                                   StepMetrics, compare, measure_step, profiler_cost,
                                   with_transfers)
from phantora.diff.simulated import read_run
from phantora.profiles.activity import Activity, op_bucket, real_activities
from phantora.profiles.families import kernel_family
from phantora.profiles.kineto import read_trace
from tests.unit.kineto_traces import TraceBuilder

MM_FLOPS = 2 * 64 * 128 * 256
US = 1000


@pytest.mark.parametrize(("op", "kernel", "family"), [
    ("aten::addmm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "gemm"),
    ("aten::mm", "aten::mm", "gemm"),
    (None, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
    ("aten::copy_", "Memcpy DtoD", "elementwise"),  # the simulator's copy_ kernel
    ("aten::copy_", "Memcpy HtoD", "memcpy"),
    ("Memcpy DtoH", "Memcpy DtoH", "memcpy"),
    (None, "Memset", "memcpy"),
    (None, "triton_poi_fused_add_0", "triton"),
    ("inductor::triton_reduction", "inductor::triton_reduction", "triton"),  # simulated
    ("aten::native_layer_norm", "aten::native_layer_norm", "norm"),
    ("aten::_fused_rms_norm_backward", "", "norm"),
    ("aten::_fused_adamw_", "", "optimizer"),
    ("aten::_foreach_norm", "", "optimizer"),
    ("aten::_foreach_copy_", "", "elementwise"),
    ("aten::linalg_vector_norm", "", "elementwise"),
    ("fsdp::chunk_cat", "fsdp::chunk_cat", "elementwise"),
    ("aten::_scaled_dot_product_flash_attention", "", "attention"),
    ("aten::convolution_backward", "", "conv"),
    (None, "sm90_xmma_dgrad_implicit_gemm_indexed", "conv"),
    (None, "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm>", "gemm"),
    ("aten::my_op", "my_kernel", "other"),
])
def test_one_classifier_for_both_sides(op: str | None, kernel: str, family: str) -> None:
    assert kernel_family(op, kernel) == family


def test_buckets_join_variants_of_one_kernel() -> None:
    """In-place and overload variants are one kernel; attention is compared by direction,
    whichever SDPA backend the real GPU picked."""
    assert op_bucket("aten::add_") == op_bucket("aten::add.Tensor") == "aten::add"
    assert op_bucket("fsdp::chunk_cat") == "fsdp::chunk_cat"
    assert (op_bucket("aten::_cudnn_attention_forward")
            == op_bucket("aten::_scaled_dot_product_flash_attention") == "attention forward")
    assert op_bucket("aten::_cudnn_attention_backward") == "attention backward"


def test_a_steps_idle_and_exposed_communication_come_from_its_window() -> None:
    def activity(start: int, end: int, launch: int | None, comm: bool = False) -> Activity:
        return Activity("communication" if comm else "gemm", "b", start, end, launch,
                        collective=("all_reduce", 8) if comm else None)

    step = measure_step([activity(-20, 5, None),  # the previous step's, launch not traced
                         activity(10, 30, 1), activity(20, 50, 2, comm=True),
                         activity(60, 70, 3), activity(95, 120, 90)], 0, 100)
    # covered: 0-5, 10-50, 60-70, 95-100 = 60; compute alone: 0-5, 10-30, 60-70, 95-100 = 40
    assert (step.step_ns, step.gpu_idle_ns, step.exposed_communication_ns) == (100, 40, 20)
    assert step.busy_by_family_ns == {"gemm": 20 + 10 + 25, "communication": 30}
    assert step.collectives == {("all_reduce", 8): CollectiveStats(1, 30, None)}


def test_a_collectives_transfer_is_its_shortest_instance_over_the_ranks() -> None:
    """Rank 1 arrived last at the first all-reduce, rank 0 at the second: each waited for none
    there. A kernel launched before the trace began is no instance."""
    def comm(start: int, end: int, launch: int | None = 0) -> Activity:
        return Activity("communication", "b", start, end, launch, collective=("all_reduce", 8))

    rank0 = [comm(0, 5, None), comm(10, 50), comm(60, 70)]
    rank1 = [comm(30, 50), comm(55, 70)]
    (_, first0, second0), (first1, second1) = with_transfers([rank0, rank1])
    assert [a.transfer_ns for a in (first0, second0, first1, second1)] == [20, 10, 20, 10]
    assert with_transfers([rank0])[0][1].transfer_ns is None


def test_a_real_kernel_is_named_by_the_outermost_op_the_simulator_names(tmp_path: Path) -> None:
    trace = TraceBuilder()
    trace.host("aten::to", 0.0, 20.0)
    trace.host("aten::_to_copy", 1.0, 18.0)
    trace.host("aten::copy_", 2.0, 16.0)
    trace.kernel("void at::native::unrolled_elementwise_kernel", 3.0, 5.0, 1.0)
    kernels = read_trace(trace.write(tmp_path / "cast.json"))
    (cast,) = real_activities(kernels, {"aten::copy_", "aten::_to_copy", "aten::mm"})
    assert (cast.bucket, cast.family) == ("aten::_to_copy", "elementwise")
    (unknown,) = real_activities(kernels, {"aten::mm"})
    assert unknown.bucket == "aten::copy"


def _write_run(run_dir: Path, world_size: int = 1, steps: int = 3) -> Path:
    """A live run's folder as phantora-ns3 writes it: each 1 ms step issues an mm (300 us), an
    add (50 us) and an all-reduce of 1 KiB (200 us, 150 us of it moving data) on the NCCL
    stream."""
    records, slices, attribution = [], [], []
    for step in range(steps):
        start = step * 1000 * US
        attribution.append({"rank": 0, "step": step + 1, "start_ns": start,
                            "end_ns": start + 1000 * US})
        records += [
            {"op": "kernel", "t_ns": start + 100 * US, "cpu_ns": 0, "stream": 0,
             "name": "aten::mm", "duration_ns": 300 * US, "flops": MM_FLOPS, "bytes": 0},
            {"op": "kernel", "t_ns": start + 110 * US, "cpu_ns": 0, "stream": 0,
             "name": "aten::add", "duration_ns": 50 * US, "flops": 0, "bytes": 4096},
            {"op": "collective", "t_ns": start + 120 * US, "cpu_ns": 0, "stream": 20,
             "kind": "all_reduce", "group": "0", "ranks": [0], "seq": step, "bytes": 1024}]
        slices += [
            {"ph": "X", "cat": "kernel", "name": "aten::mm", "pid": 0, "tid": 1,
             "ts": start / US + 150, "dur": 300.0},
            {"ph": "X", "cat": "kernel", "name": "aten::add", "pid": 0, "tid": 1,
             "ts": start / US + 450, "dur": 50.0},
            {"ph": "X", "cat": "collective", "name": "all_reduce", "pid": 0, "tid": 2,
             "ts": start / US + 500, "dur": 200.0,
             "args": {"bytes": 1024, "group": "0", "seq": step, "ranks": [0],
                      "transfer_start_ns": start + 550 * US}}]
    graph = run_dir / "graph"
    graph.mkdir(parents=True)
    (graph / "meta.json").write_text(json.dumps(
        {"format": "phantora-execution-graph", "version": 1, "world_size": world_size}))
    for rank in range(world_size):
        (graph / f"rank{rank}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records))
    events = [event for rank in range(world_size) for event in (
        {"ph": "M", "name": "thread_name", "pid": rank, "tid": 1,
         "args": {"name": "stream 0 (default)"}},
        {"ph": "M", "name": "thread_name", "pid": rank, "tid": 2,
         "args": {"name": "stream 20 (NCCL)"}},
        *({**e, "pid": rank} for e in slices))]
    (run_dir / "trace.json").write_text(json.dumps({"traceEvents": events}))
    (run_dir / "summary.json").write_text(json.dumps({"attribution": {"steps": attribution}}))
    return run_dir


def _real_trace(path: Path, mm_dims: list[list[int]] | None = None,
                world_size: int | None = 1,
                cut: Literal["profiler", "optimizer", ""] = "profiler",
                step_us: float = 1100.0) -> Path:
    """Training step 2 on the real GPU: 1.1 ms (``step_us``), the mm 400 us, the add 40 us,
    the all-reduce 300 us, one after the other. Its window is ``ProfilerStep#1`` (``cut``
    "profiler"), or runs from the end of the first optimizer step to the end of the second
    ("optimizer": a profiler around the whole loop); "" records neither."""
    trace = TraceBuilder(rank=0 if world_size else None, world_size=world_size)
    if cut == "profiler":
        trace.step(1, 0.0, step_us)
    elif cut == "optimizer":
        trace.optimizer_step(-30.0, 30.0)
        trace.optimizer_step(step_us - 50.0, 50.0)
    trace.host("aten::mm", 100.0, 10.0, **{"Input Dims": mm_dims or [[64, 128], [128, 256]]})
    trace.kernel("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n", 101.0, 150.0, 400.0)
    trace.host("aten::add", 111.0, 5.0)
    trace.kernel("void at::native::vectorized_elementwise_kernel", 112.0, 560.0, 40.0)
    trace.host("record_param_comms", 120.0, 10.0, **{
        "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 256,
        "Out msg nelems": 256, "Group size": 1})
    trace.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 121.0, 600.0, 300.0, stream=20)
    return trace.write(path)


def test_a_profiled_step_against_the_same_simulated_step(tmp_path: Path) -> None:
    run = read_run(_write_run(tmp_path / "run"))
    diff = compare([read_trace(_real_trace(tmp_path / "rank0.json"))], run)
    (step,) = diff.steps
    assert (step.rank, step.sim_rank, step.real_step, step.sim_steps, step.match) == (
        0, 0, 1, [2], "same step")
    document = diff.document()
    row = document["steps"][0]
    assert (row["real_step_ns"], row["sim_step_ns"], row["error_ns"], row["error_pct"]) == (
        1100 * US, 1000 * US, -100 * US, -9.09)
    # real: 150-550, 560-600, 600-900 covered of 1100 us; sim: 150-700 of 1000 us
    assert row["gpu_idle_ns"] == {"real": 360 * US, "sim": 450 * US}
    assert row["exposed_communication_ns"] == {"real": 300 * US, "sim": 200 * US}
    assert row["real"]["busy_by_family_ns"] == {"gemm": 400 * US, "elementwise": 40 * US,
                                                "communication": 300 * US}
    mean = document["mean"]
    # one trace: the real transfer is unknown; the simulated one started 50 us in
    assert mean["collectives"] == [{
        "op": "all_reduce", "bytes": 1024, "real_count": 1, "sim_count": 1,
        "real_total_ns": 300 * US, "sim_total_ns": 200 * US, "real_mean_ns": 300 * US,
        "sim_mean_ns": 200 * US, "real_mean_transfer_ns": None,
        "sim_mean_transfer_ns": 150 * US}]
    divergences = [(d["bucket"], d["divergence_ns"], d["share_of_error"])
                   for d in mean["divergences"]]
    assert divergences == [
        ("all_reduce 1KiB", -100 * US, 1.0), ("aten::mm 0.004194 GFLOP", -100 * US, 1.0),
        ("GPU idle", 90 * US, -0.9), ("aten::add", 10 * US, -0.1)]


def test_steady_mean_when_asked_or_when_the_run_lacks_the_step(tmp_path: Path) -> None:
    run = read_run(_write_run(tmp_path / "run", steps=2))
    trace = read_trace(_real_trace(tmp_path / "rank0.json"))
    assert compare([trace], run, "steady").steps[0].match == "mean of steady steps"
    short = read_run(_write_run(tmp_path / "short", steps=1))
    (step,) = compare([trace], short).steps
    assert (step.sim_steps, step.match) == ([1], "mean of steady steps")


def test_a_mirrored_rank_is_compared_with_its_representative(tmp_path: Path) -> None:
    run = read_run(_write_run(tmp_path / "run"))
    run.world_size, run.mirrors = 4, {1: 0, 2: 0}
    trace = TraceBuilder(rank=2, world_size=4)
    trace.step(1, 0.0, 1100.0)
    trace.host("aten::mm", 100.0, 10.0, **{"Input Dims": [[64, 128], [128, 256]]})
    trace.kernel("gemm", 101.0, 150.0, 400.0)
    (step,) = compare([read_trace(trace.write(tmp_path / "rank2.json"))], run).steps
    assert (step.rank, step.sim_rank) == (2, 0)


def test_traces_of_another_job_are_refused(tmp_path: Path) -> None:
    run = read_run(_write_run(tmp_path / "run"))
    with pytest.raises(ProfileError, match="a trace of 2 ranks, the run .* has 1"):
        compare([read_trace(_real_trace(tmp_path / "ws.json", world_size=2))], run)
    with pytest.raises(ProfileError, match=r"no ProfilerStep#N ranges and fewer than two "
                                           r"Optimizer\.step#<class>\.step ranges.*prof\.step"):
        compare([read_trace(_real_trace(tmp_path / "nostep.json", cut=""))], run)
    other = _real_trace(tmp_path / "other.json", mm_dims=[[64, 128], [128, 512]])
    with pytest.raises(ProfileError, match=r"only 0% of the traces' 1 matrix-product shapes .*"
                                           r"e\.g\. aten::mm \(64, 128\) x \(128, 512\)"):
        compare([read_trace(other)], run)
    two = read_trace(_real_trace(tmp_path / "a.json"))
    with pytest.raises(ProfileError, match="rank 0 is given twice"):
        compare([two, two], run)
    multi = read_run(_write_run(tmp_path / "multi", world_size=2))
    with pytest.raises(ProfileError, match="a single-process trace .* has 2 ranks"):
        compare([read_trace(_real_trace(tmp_path / "single.json", world_size=None))], multi)


def test_a_whole_run_trace_is_compared_step_by_step_as_a_stepped_one(tmp_path: Path) -> None:
    run = read_run(_write_run(tmp_path / "run"))
    stepped = compare([read_trace(_real_trace(tmp_path / "stepped.json"))], run).document()
    whole = compare([read_trace(_real_trace(tmp_path / "whole.json", cut="optimizer"))],
                    run).document()
    assert [t["step_cut"] for t in (stepped["traces"][0], whole["traces"][0])] == [
        "ProfilerStep#N", "Optimizer.step#AdamW.step"]
    assert whole["traces"][0]["profiled_steps"] == [1]
    assert whole["steps"] == stepped["steps"] and whole["mean"] == stepped["mean"]


def test_the_profilers_cost_is_its_recorded_host_events_as_far_as_the_gpu_waits(
        tmp_path: Path) -> None:
    """Three ops and three launches recorded in the step; its GPU idles 360 us of 1.1 ms, more
    than they cost, and for under half the step: not host-bound. An estimate is capped at the
    step's GPU idle: only there can host time lengthen a step."""
    run = read_run(_write_run(tmp_path / "run"))
    document = compare([read_trace(_real_trace(tmp_path / "rank0.json"))], run).document()
    expected = {"cpu_ops": 3, "runtime_calls": 3, "inflation_ns": 6 * PROFILER_NS_PER_EVENT,
                "host_bound": False}
    assert document["steps"][0]["profiler"] == document["mean"]["profiler"] == expected
    busy = StepMetrics(step_ns=10_000 * US, gpu_idle_ns=2_000 * US, exposed_communication_ns=0)
    assert profiler_cost(1000, 500, busy) == ProfilerCost(1000, 500, 2_000 * US, False)
    waiting = StepMetrics(step_ns=10_000 * US, gpu_idle_ns=8_000 * US, exposed_communication_ns=0)
    assert profiler_cost(1000, 500, waiting) == ProfilerCost(
        1000, 500, 1500 * PROFILER_NS_PER_EVENT, True)


def test_the_command_prints_and_writes_diff_json(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _write_run(tmp_path / "run")
    trace = _real_trace(tmp_path / "rank0.json.gz")
    assert main(["diff", str(trace), str(run_dir), "--out", str(tmp_path / "d")]) == 0
    printed = capsys.readouterr().out
    assert "real vs simulated" in printed and "largest divergences" in printed
    assert "steps cut at ProfilerStep#N\n" in printed and "host-bound" not in printed
    document = json.loads((tmp_path / "d" / "diff.json").read_text())
    assert document["schema_version"] == 1 and document["traces"][0]["profiled_steps"] == [1]
    other = _real_trace(tmp_path / "other.json", world_size=2)
    assert main(["diff", str(other), str(run_dir)]) == 1
    assert "a trace of 2 ranks" in capsys.readouterr().out
    assert not (run_dir / "diff.json").exists()


def test_the_command_says_how_steps_were_cut_and_flags_host_bound_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A whole-run trace whose 3 ms step leaves the GPU idle for 2.26 ms of it."""
    run_dir = _write_run(tmp_path / "run")
    trace = _real_trace(tmp_path / "rank0.json", cut="optimizer", step_us=3000.0)
    assert main(["diff", str(trace), str(run_dir), "--out", str(tmp_path / "d")]) == 0
    printed = capsys.readouterr().out
    assert "steps cut at Optimizer.step#AdamW.step (no ProfilerStep ranges)" in printed
    assert "host-bound under the profiler" in printed and "~0.0 host-bound" in printed
    row = json.loads((tmp_path / "d" / "diff.json").read_text())["steps"][0]
    assert row["profiler"]["host_bound"] and row["real_step_ns"] == 3000 * US


def test_products_whose_shapes_follow_the_routing_are_left_out_of_the_shape_check() -> None:
    from phantora.diff.compare import _token_routed
    dense = {("aten::mm", 2 * 4096 * 1024 * 1024): ((4096, 1024), (1024, 1024))}
    experts = {("aten::mm", 2 * m * 1024 * 2816): ((m, 1024), (1024, 2816))
               for m in (7213, 9555, 10042)}
    grad_weights = {("aten::mm", 2 * m * 1024 * 2816): ((1024, m), (m, 2816))
                    for m in (7000, 8000)}
    routed = _token_routed({**dense, **experts, **grad_weights})
    assert set(experts) <= routed
    assert not set(dense) & routed
    assert not set(grad_weights) & routed  # two sizes only: not enough to call them routed
    batch_change = {("aten::mm", 2 * m * 768 * 768): ((m, 768), (768, 768)) for m in (8192,)}
    assert not _token_routed(batch_change)


def test_an_even_all_to_allv_is_named_all_to_all_as_the_real_trace_names_it() -> None:
    from phantora.diff.simulated import _kind
    assert _kind({"kind": "all_to_allv", "splits": [8, 8, 8, 8]}) == "all_to_all"
    assert _kind({"kind": "all_to_allv", "splits": [8, 16, 8, 8]}) == "all_to_allv"
    assert _kind({"kind": "all_to_all", "splits": None}) == "all_to_all"


@pytest.mark.parametrize(("kernel", "bucket"), [
    ("triton_poi_fused_add_relu_16", "inductor::triton_pointwise"),
    ("triton_per_fused__to_copy_native_layer_norm_3", "inductor::triton_persistent_reduction"),
    ("triton_red_fused_sum_1", "inductor::triton_reduction"),
    ("void at::native::vectorized_elementwise_kernel", None),
])
def test_real_inductor_kernels_share_the_simulated_buckets(kernel: str, bucket: str | None) -> None:
    """A real trace names each generated kernel; the simulator names its kind: diff compares
    them by kind."""
    assert generated_name(kernel) == bucket
