"""The Kineto trace reader: each kernel gets the innermost aten op that launched it (shapes
included), NCCL kernels their op and nccl-tests size, copies their short name; steps come from
the ProfilerStep ranges, else (a whole-run trace) the optimizer's step ranges; what is not a
usable trace is refused with how to record one."""

from pathlib import Path

import pytest

from hwmodel.errors import ProfileError
from phantora.profiles.kineto import PROFILER_STEPS, OpCall, collective_op, read_trace
from tests.unit.kineto_traces import TraceBuilder


def _training_trace() -> TraceBuilder:
    trace = TraceBuilder(rank=1, world_size=2)
    trace.step(6, 0.0, 1000.0)
    trace.host("aten::linear", 10.0, 50.0)
    trace.host("aten::addmm", 12.0, 40.0, **{
        "Input Dims": [[2304], [8192, 768], [768, 2304]],
        "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"],
        "Concrete Inputs": ["", "", "", "1", "1"]})
    trace.kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 20.0, 100.0, 80.0)
    # a wrapper range around the backward launch is not an op
    trace.host("autograd::engine::evaluate_function: MmBackward0", 300.0, 65.0, tid=99)
    trace.host("aten::mm", 310.0, 50.0, tid=99, **{"Input Dims": [[8192, 2304], [2304, 768]]})
    trace.kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 320.0, 400.0, 60.0, tid=99)
    trace.host("autograd::engine::evaluate_function: AddBackward0", 370.0, 20.0, tid=99)
    trace.kernel("void at::native::vectorized_elementwise_kernel", 375.0, 470.0, 5.0, tid=99)
    # an NCCL all-reduce launched by the driver inside record_param_comms
    trace.host("nccl:all_reduce", 500.0, 30.0, cat="user_annotation")
    trace.host("record_param_comms", 501.0, 28.0, **{
        "Collective name": "allreduce", "dtype": "BFloat16", "In msg nelems": 1_000_000,
        "Out msg nelems": 1_000_000, "Group size": 2})
    trace.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                 510.0, 520.0, 300.0, stream=20, launch="cuLaunchKernelEx")
    trace.host("aten::copy_", 600.0, 10.0)
    trace.kernel("Memcpy DtoD (Device -> Device)", 602.0, 830.0, 4.0, cat="gpu_memcpy",
                 launch="cudaMemcpyAsync")
    trace.step(7, 1000.0, 900.0)
    # a kernel with the collective's args on itself, an all-gather sized by its output
    trace.kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 1010.0,
                 1020.0, 50.0, stream=20, **{"Collective name": "_allgather_base",
                                             "dtype": "Float", "In msg nelems": 100,
                                             "Out msg nelems": 200, "Group size": 2})
    return trace


def test_kernels_get_their_launching_op_shapes_and_collective(tmp_path: Path) -> None:
    rank = read_trace(_training_trace().write(tmp_path / "rank1.json.gz"))
    assert (rank.rank, rank.world_size, rank.device_name) == (1, 2, "NVIDIA H200")
    assert rank.steps == [(0, 1_000_000), (1_000_000, 1_900_000)]
    assert rank.step_numbers == [6, 7]
    assert [k.start_ns for k in rank.kernels] == sorted(k.start_ns for k in rank.kernels)
    gemm, backward, elementwise, nccl, copy, gather = rank.kernels
    assert gemm.op == OpCall("aten::addmm", ((2304,), (8192, 768), (768, 2304)),
                             ("c10::BFloat16",) * 3, ("", "", "", "1", "1"))
    assert gemm.enclosing_ops == ("aten::addmm", "aten::linear")
    assert (gemm.stream, gemm.start_ns, gemm.duration_ns, gemm.launch_ns) == (7, 100_000, 80_000,
                                                                              20_000)
    assert backward.op is not None and backward.op.input_dims == ((8192, 2304), (2304, 768))
    # the autograd wrapper around it encloses no aten op: no op, not the wrapper
    assert elementwise.op is None and elementwise.enclosing_ops == ()
    assert nccl.collective is not None and nccl.op is None
    assert (nccl.collective.op, nccl.collective.bytes, nccl.collective.group_size) == (
        "all_reduce", 2_000_000, 2)
    assert copy.name == "Memcpy DtoD" and copy.op is not None and copy.op.name == "aten::copy_"
    assert gather.collective is not None
    assert (gather.collective.op, gather.collective.bytes) == ("all_gather", 800)
    assert [op.name for op in rank.ops] == [
        "aten::linear", "autograd::engine::evaluate_function: MmBackward0",
        "autograd::engine::evaluate_function: AddBackward0", "record_param_comms", "aten::copy_"]


def _whole_run(optimizer_steps: int) -> TraceBuilder:
    """A profiler around the whole loop, never stepped: each 100 us step launches a kernel under
    an aten op, zeroes the gradients and ends in an optimizer step of 10 us."""
    trace = TraceBuilder()
    for step in range(optimizer_steps):
        start = step * 100.0
        trace.host("Optimizer.zero_grad#AdamW.zero_grad", start + 5.0, 2.0, cat="user_annotation")
        trace.host("aten::mul", start + 10.0, 5.0)
        trace.kernel("elementwise", start + 11.0, start + 12.0, 1.0)
        trace.optimizer_step(start + 90.0, 10.0)
        # the GPU's copy of the range is no host range
        trace.host("Optimizer.step#AdamW.step", start + 91.0, 3.0, cat="gpu_user_annotation")
    return trace


def test_a_whole_run_trace_is_cut_at_its_optimizer_steps(tmp_path: Path) -> None:
    """Step N + 1 runs from the end of the trace's N-th optimizer step to the end of its
    N + 1-th, as the simulator's step ends at the optimizer step's hooks; before the first
    optimizer step there is no whole step."""
    rank = read_trace(_whole_run(3).write(tmp_path / "whole.json"))
    assert rank.step_cut == "Optimizer.step#AdamW.step"
    assert rank.steps == [(100_000, 200_000), (200_000, 300_000)]
    assert rank.step_numbers == [1, 2]
    # aten::mul and the launch of step 2; the user annotations are no CPU ops
    assert rank.host_events(*rank.steps[0]) == (1, 1)


def test_profiler_steps_come_first_and_one_optimizer_step_is_no_step(tmp_path: Path) -> None:
    stepped = _whole_run(3)
    stepped.step(4, 0.0, 150.0)
    rank = read_trace(stepped.write(tmp_path / "stepped.json"))
    assert (rank.step_cut, rank.steps, rank.step_numbers) == (PROFILER_STEPS, [(0, 150_000)], [4])
    single = read_trace(_whole_run(1).write(tmp_path / "single.json"))
    assert (single.step_cut, single.steps, single.step_numbers) == ("", [], [])


def test_several_optimizers_each_end_a_step_as_their_hooks_do_in_the_simulator(
        tmp_path: Path) -> None:
    trace = _whole_run(2)
    trace.optimizer_step(250.0, 10.0, optimizer="SGD")
    rank = read_trace(trace.write(tmp_path / "two.json"))
    assert rank.step_cut == "Optimizer.step#AdamW.step, Optimizer.step#SGD.step"
    assert rank.steps == [(100_000, 200_000), (200_000, 260_000)]


def test_collective_names_of_pytorch_and_nccl_map_to_the_simulators_ops() -> None:
    assert collective_op("_reduce_scatter_base") == "reduce_scatter"
    assert collective_op("allgather_into_tensor_coalesced") == "all_gather"
    assert collective_op("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL") == "reduce_scatter"
    assert collective_op("ncclKernel_Broadcast_RING_LL_Sum_int8_t") == "broadcast"
    assert collective_op("reduce") == "reduce"
    assert collective_op("barrier") == "all_reduce"
    assert collective_op("ncclDevKernel_SendRecv") is None


def test_an_uneven_all_to_all_is_an_all_to_allv(tmp_path: Path) -> None:
    trace = TraceBuilder()
    trace.host("record_param_comms", 0.0, 10.0, **{
        "Collective name": "all_to_all", "dtype": "BFloat16", "In msg nelems": 30,
        "Out msg nelems": 40, "In split size": "[10, 20]", "Group size": 2})
    trace.kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 1.0, 5.0, 10.0)
    trace.kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 20.0, 25.0, 10.0)
    first, lone = read_trace(trace.write(tmp_path / "t.json")).kernels
    assert first.collective is not None and lone.collective is not None
    assert (first.collective.op, first.collective.bytes) == ("all_to_allv", 80)
    assert (lone.collective.op, lone.collective.bytes) == ("send_recv", None)


def test_a_coalesced_send_or_recv_is_named_by_its_own_record(tmp_path: Path) -> None:
    """Pipeline p2p (batch_isend_irecv): each send or recv records its sizes, then the group
    launches one SendRecv kernel; a group of one names it, a send and a recv together do not."""
    trace = TraceBuilder(rank=0, world_size=2)
    send = {"Collective name": "send", "dtype": "BFloat16", "In msg nelems": 1024,
            "Out msg nelems": 1024, "Group size": 2}
    trace.host("record_param_comms", 0.0, 5.0, **send)
    trace.host("nccl:coalesced", 10.0, 10.0, cat="user_annotation")
    trace.kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 12.0, 30.0, 5.0)
    trace.host("record_param_comms", 40.0, 5.0, **send)
    trace.host("record_param_comms", 46.0, 5.0, **{**send, "Collective name": "recv"})
    trace.host("nccl:coalesced", 60.0, 10.0, cat="user_annotation")
    trace.kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 62.0, 80.0, 5.0)
    alone, pair = read_trace(trace.write(tmp_path / "p2p.json")).kernels
    assert alone.collective is not None and pair.collective is not None
    assert (alone.collective.op, alone.collective.bytes) == ("send", 2048)
    assert (pair.collective.op, pair.collective.bytes) == ("send_recv", None)


def test_what_is_not_a_usable_trace_is_refused_with_how_to_record_one(tmp_path: Path) -> None:
    not_json = tmp_path / "notes.json"
    not_json.write_text("step 1 | loss 3.2")
    with pytest.raises(ValueError, match="notes.json: not a readable Kineto trace.*"
                                         "ProfilerActivity.CUDA.*record_shapes=True"):
        read_trace(not_json)
    other = tmp_path / "other.json"
    other.write_text('{"rows": []}')
    with pytest.raises(ProfileError, match="other.json: not a Kineto trace"):
        read_trace(other)
    cpu_only = TraceBuilder()
    cpu_only.host("aten::mm", 0.0, 5.0)
    with pytest.raises(ProfileError, match="cpu.json: the trace holds no GPU kernels"):
        read_trace(cpu_only.write(tmp_path / "cpu.json"))


def test_a_large_trace_matches_every_kernel_to_its_launching_op(tmp_path: Path) -> None:
    """100k host and kernel events (plus their launches): every kernel finds its own op. The
    reader's speed is not timed here (a timed unit test fails on a loaded machine)."""
    trace = TraceBuilder()
    for i in range(50_000):
        trace.host("aten::mul", i * 10.0, 5.0, **{"Input Dims": [[i % 7 + 1]]})
        trace.kernel("elementwise", i * 10.0 + 1, i * 10.0 + 3, 1.0)
    path = trace.write(tmp_path / "big.json")
    kernels = read_trace(path).kernels
    assert len(kernels) == 50_000
    assert all(k.op is not None and k.op.input_dims == ((i % 7 + 1,),)
               for i, k in enumerate(kernels))
