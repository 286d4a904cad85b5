"""The host-cost table (``intercept.host_time.host_cost``) and the robust residual
(``intercept.host_time.residual``)."""

import json

import pytest

from intercept.host_time.clock import VirtualClock
from intercept.host_time.host_cost import (INDEX_PUT_ACCUMULATE, SORT_SMALL, TABLE_PATH, family_of,
                                           load_table, table_from_json)
from intercept.host_time.host_profile_costs import table_for_profile
from hwmodel.measured.host_profile import bundled
from intercept.host_time.residual import ResidualSmoother
from hwmodel.measured.host_references import references


def test_ops_fall_in_the_family_their_host_cost_was_measured_for() -> None:
    assert [family_of(n) for n in ("mm", "addmm", "_foreach_add_", "_fused_adamw_",
                                   "_scaled_dot_product_flash_attention_backward",
                                   "native_layer_norm", "sum", "add_", "gelu", "zeros")] == [
        "matmul", "matmul_bias", "foreach", "foreach", "attention", "norm", "reduction",
        "elementwise_inplace", "elementwise", "factory"]


def test_the_shipped_table_has_provenance_and_orders_costs_as_measured() -> None:
    table = load_table()
    for key in ("date", "gpu", "host_cpu", "torch", "script"):
        assert table.provenance[key]
    families = table.families_ns
    assert families["view"] < families["elementwise_inplace"] < families["matmul"]
    assert table.op_ns("t", launches=False) == families["view"] - table.script_call_ns
    assert table.op_ns("mm", launches=False) == table.op_ns("view", launches=False)
    assert table.op_ns("_foreach_mul_", launches=True, tensors=101) == (
        families["foreach"] + 100 * table.foreach_per_tensor_ns - table.script_call_ns)
    assert table.collective_ns("send") == (table.collectives_ns["default"]
                                           - table.script_call_ns)


def test_a_blocking_one_rank_collective_costs_less_than_an_async_one() -> None:
    table = load_table()
    # torch >= 2.8 runs async_op=False on the caller's stream: no stream sync, stash or Work
    assert 0 < table.collective_async_extra_ns < table.collectives_ns["all_reduce"] / 2
    for op in ("all_reduce", "all_gather", "all_to_all", "send"):
        assert table.collective_ns(op, blocking=True) == (
            table.collective_ns(op) - table.collective_async_extra_ns)
    # all_to_all has a row of its own, above all_reduce's as measured in one process
    assert table.collectives_ns["all_to_all"] > table.collectives_ns["all_reduce"]
    # on larger groups the model fitted on training calls holds both kinds
    assert table.collective_ns("all_reduce", 2, 10_000, blocking=True) == (
        table.collective_ns("all_reduce", 2, 10_000))
    scaled = table.scaled(2.0, "twice as slow")
    assert scaled.collective_async_extra_ns == 2 * table.collective_async_extra_ns


def test_an_op_with_its_own_row_is_charged_that_row_not_its_familys() -> None:
    table = load_table()
    # a radix sort launches tens of kernels; an elementwise op one
    assert table.ops_ns["sort"] > 5 * table.families_ns["elementwise"]
    assert table.ops_ns[SORT_SMALL] < table.ops_ns["sort"]
    assert table.op_ns("sort", launches=True) == table.ops_ns["sort"] - table.script_call_ns
    assert table.op_ns(INDEX_PUT_ACCUMULATE, launches=True) > table.op_ns("index_put_",
                                                                          launches=True)
    assert table.op_ns("sort", launches=False) == table.op_ns("view", launches=False)


def test_another_reference_host_scales_the_table_by_its_op_dispatch_speed() -> None:
    hosts = references().hosts
    base = load_table()
    other = next(name for name in hosts if name != base.reference)
    scaled = table_for_profile(bundled(other))
    factor = hosts[other].components_ns["torch_ops"] / hosts[base.reference].components_ns[
        "torch_ops"]
    assert scaled.families_ns["matmul"] == round(base.families_ns["matmul"] * factor)
    assert scaled.ops_ns["sort"] == round(base.ops_ns["sort"] * factor)
    assert scaled.gemm.base_ns == round(base.gemm.base_ns * factor)
    assert scaled.gemm.reference == other


def test_a_table_of_another_version_or_without_a_family_is_refused() -> None:
    data = json.loads(TABLE_PATH.read_text())
    with pytest.raises(ValueError, match="version"):
        table_from_json({**data, "version": 99})
    families = dict(data["families_ns"])
    del families["matmul"]
    with pytest.raises(ValueError, match="matmul"):
        table_from_json({**data, "families_ns": families})
    with pytest.raises(ValueError, match="one reference host"):
        table_from_json({**data, "reference": "h200-host"})
    with pytest.raises(ValueError, match="ops_ns missing"):
        table_from_json({k: v for k, v in data.items() if k != "ops_ns"})
    with pytest.raises(ValueError, match="collective_async_extra_ns missing"):
        table_from_json({k: v for k, v in data.items() if k != "collective_async_extra_ns"})


def test_a_segment_charges_its_quietest_recent_reading() -> None:
    counted = [0]
    quiet_factor = [0.5]  # the fastest host-speed measurement so far: local ns count half
    smoother = ResidualSmoother(lambda: counted[0], lambda ns: ns,
                                lambda ns: round(ns * quiet_factor[0]), window=3)

    def segment(cpu_ns: int) -> int:
        counted[0] += cpu_ns
        return cpu_ns + smoother.boundary("mm")  # what the clock keeps of it

    assert smoother.boundary("mm") == 0  # the thread's first op starts its first segment
    # a busy moment (300) is charged as the quietest reading so far; a quieter one lowers it
    assert [segment(ns) for ns in (200, 300, 100, 200, 200, 200)] == [100, 100, 50, 50, 50, 100]


def test_a_negative_correction_never_moves_a_reading_back() -> None:
    clock = VirtualClock(epoch_ns=0, op_cost_ns=None)
    clock.charge(1_000_000)
    first = clock.now_ns()
    clock.correct(-500_000)
    assert clock.now_ns() >= first
    clock.charge_table(2_000)
    split = clock.host_split()
    assert split.table_ns == 2_000 and split.fixed_ns == 0


def test_c10d_collective_functions_run_in_the_simulators_time_while_installed() -> None:
    """Their whole call is the table's collective cost: the wrapper must not count twice."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from intercept.host_time.c10d_host import excluded_calls

    original = dist.all_reduce
    with excluded_calls():
        assert dist.all_reduce is c10d.all_reduce is not original
        assert dist.all_reduce.__wrapped__ is original  # type: ignore[attr-defined]
        assert dist.all_gather_object is c10d.all_gather_object  # pickles for real: left alone
    assert dist.all_reduce is c10d.all_reduce is original


def test_the_layers_above_an_op_are_charged_from_the_table_and_the_fit() -> None:
    from intercept.host_time.host_fit import load_fit

    from intercept.host_time.compiled_call import load_compiled_call

    table = load_table()
    compiled = load_compiled_call()
    assert set(table.layers_ns) == {"autograd_record", "autograd_node", "tensor_subclass",
                                    "compiled_generated_launch", "compiled_generated_read",
                                    "compiled_generated_write", "compiled_backward_call",
                                    "compiled_backward_run", "cudnn_rnn_fwd_call",
                                    "cudnn_rnn_fwd_layer_step", "cudnn_rnn_bwd_call",
                                    "cudnn_rnn_bwd_layer_step"}
    assert 0 < table.layers_ns["autograd_record"] < table.layers_ns["autograd_node"]
    assert table.layers_ns["tensor_subclass"] == load_fit().tensor_subclass_ns
    assert table.layers_ns["autograd_node"] == load_fit().autograd_node_ns
    assert table.layers_ns["compiled_generated_launch"] == compiled.generated_launch_ns
    assert table.layers_ns["compiled_generated_write"] == compiled.generated_write_ns
    assert table.layers_ns["compiled_backward_call"] == compiled.backward_call_ns
    assert table.layers_ns["compiled_backward_run"] == compiled.backward_run_ns
    h200 = table.scaled_to("h200-host")  # scaled with the table's other costs
    assert h200.layers_ns["compiled_backward_run"] < compiled.backward_run_ns
    data = json.loads(TABLE_PATH.read_text())
    with pytest.raises(ValueError, match="layers_ns needs exactly autograd_record, found "
                                         "autograd_node"):
        table_from_json({**data, "layers_ns": {"autograd_node": 1}})


def test_compiled_call_costs_name_a_missing_or_negative_key() -> None:
    from intercept.host_time.compiled_call import COMPILED_CALL, cost_from_json

    data = json.loads(COMPILED_CALL.path.read_text())
    assert cost_from_json(data).backward_run_ns == data["backward_run_ns"]
    with pytest.raises(ValueError, match="'backward_run_ns' is missing"):
        cost_from_json({k: v for k, v in data.items() if k != "backward_run_ns"})
    with pytest.raises(ValueError, match="generated_launch_ns is -1"):
        cost_from_json({**data, "generated_launch_ns": -1})


def test_a_cudnn_recurrent_call_costs_the_host_per_time_step_it_enqueues() -> None:
    from intercept.host_time.cudnn_rnn_host import cost_from_json, layer_steps, load_cudnn_rnn_host

    table, rnn = load_table(), load_cudnn_rnn_host()
    steps = layer_steps("lstm", "fp16", 128, 2, 1)
    assert steps == 256
    assert table.cudnn_rnn_ns(backward=False, layer_steps=steps) == (
        rnn.call_ns["fwd"] + 256 * rnn.layer_step_ns["fwd"] - table.script_call_ns)
    assert table.cudnn_rnn_ns(backward=True, layer_steps=0) == (
        rnn.call_ns["bwd"] - table.script_call_ns)
    # measured flat in sequence length: cuDNN runs the whole sequence without per-step work
    assert layer_steps("lstm", "fp16", 128, 1, 1) == 0
    assert layer_steps("lstm", "fp32", 128, 1, 1) == 128
    assert layer_steps("gru", "fp16", 128, 1, 2) == 256
    with pytest.raises(ValueError, match="layer_step_ns needs a cost >= 0 ns for bwd"):
        cost_from_json({"reference": "h100-host", "call_ns": {"fwd": 1, "bwd": 1},
                        "layer_step_ns": {"fwd": 1}, "provenance": {}})
