"""Step attribution: every instant of a step is one part, and the parts sum to the step."""

import pytest

from phantora.cluster.topology import HostSpec, leaf_spine
from phantora.report.attribution import PARTS, StepParts, attribute, collective_tiers
from phantora.report.trace import ATTRIBUTION_TID, trace_events
from tests.unit.test_live_engine import NCCL_STREAM, ScriptedRank, fluid, make_topology, run


def _steps(scripts: list, optimizer_ns: dict[int, list[int]] | None = None,
           **engine: object) -> list[StepParts]:
    result = run(scripts, fluid(len(scripts)), record_flows=True, **engine).result
    steps = attribute(result, make_topology(len(scripts)), optimizer_ns).steps
    for step in steps:
        assert sum(step.parts_ns.values()) == step.duration_ns
        assert sum(step.communication_by_op.values()) == step.parts_ns["communication"]
        assert sum(step.communication_by_tier.values()) == step.parts_ns["communication"]
    return steps


def test_a_straggler_shows_as_waiting_on_the_others_and_exposed_comm_is_charged_once() -> None:
    def script(r: ScriptedRank) -> None:
        r.kernel(2_000 + 1_000 * r.rank)
        r.record(event=1)
        r.wait_event(stream=NCCL_STREAM, event=1)
        r.collective("all_reduce", [0, 1], 1 << 20)
        r.record(event=2, stream=NCCL_STREAM)
        r.wait_event(stream=0, event=2)
        r.kernel(500)
        r.sync()

    fast, slow = _steps([script, script])  # no optimizer steps: the whole run is one window
    assert fast.parts_ns["compute"] == 2_500 and slow.parts_ns["compute"] == 3_500
    assert fast.parts_ns["waiting"] == 1_000 and slow.parts_ns["waiting"] == 0
    assert fast.parts_ns["communication"] == slow.parts_ns["communication"] > 0
    assert fast.communication_by_op == {"all_reduce": fast.parts_ns["communication"]}
    assert fast.communication_by_tier == {"nvlink": fast.parts_ns["communication"]}
    assert fast.parts_ns["host_bound"] == slow.parts_ns["host_bound"] == 0


def test_communication_under_a_kernel_is_hidden() -> None:
    def script(r: ScriptedRank) -> None:
        r.collective("all_reduce", [0, 1], 1 << 20)
        r.kernel(1_000_000)  # on stream 0, alongside the collective
        r.sync()

    for step in _steps([script, script], overlap=None):  # the kernel does not slow it
        assert step.parts_ns["compute"] == step.duration_ns
        assert step.parts_ns["communication"] == 0


def test_a_recv_waiting_for_its_sender_is_a_pipeline_bubble() -> None:
    def first(r: ScriptedRank) -> None:
        r.kernel(5_000)
        r.record(event=1)
        r.wait_event(stream=NCCL_STREAM, event=1)
        r.p2p("send", 0, 1, 4096)
        r.sync()

    def second(r: ScriptedRank) -> None:
        r.p2p("recv", 0, 1, 4096)
        r.sync()

    _, receiver = _steps([first, second])
    assert receiver.parts_ns["pipeline_bubble"] == 5_000
    assert receiver.parts_ns["waiting"] == 0
    assert receiver.parts_ns["communication"] > 0


def test_an_idle_gpu_behind_the_cpu_is_host_bound_and_a_step_ends_at_its_first_wait() -> None:
    def script(r: ScriptedRank) -> None:
        r.kernel(1_000)
        r.cpu(10_000)
        r.kernel(2_000)
        r.sync()  # waits from 10 to 12 us
        r.cpu(4_000)

    # the first optimizer step (5 us) ends where the CPU next waited for the GPU (12 us); the
    # second (17 us) has no wait after it
    (step1, step2) = _steps([script], optimizer_ns={0: [5_000, 17_000]})
    assert (step1.start_ns, step1.end_ns, step2.start_ns, step2.end_ns) == (0, 12_000, 12_000,
                                                                             17_000)
    assert step1.parts_ns["compute"] == 3_000 and step1.parts_ns["host_bound"] == 9_000
    assert step2.parts_ns["host_bound"] == 5_000


def test_the_tier_is_the_highest_level_a_collectives_flows_cross() -> None:
    host = HostSpec(gpus_per_host=2, nvlink_gbps=3600.0, nvlink_latency_ns=300, nic_gbps=400.0)
    topology = leaf_spine(host, hosts=4, hosts_per_leaf=2, spines=2, link_gbps=400.0,
                          latency_ns=500)
    from phantora.engine.results import NetworkFlow
    from phantora.engine.matching import CollectiveKey

    def flow(src: int, dst: int, seq: int) -> NetworkFlow:
        return NetworkFlow(src, dst, 1, 0, 1, "", CollectiveKey("world", "", seq, 0, 0))

    class Result:
        flows = [flow(0, 1, 0), flow(0, 1, 1), flow(0, 2, 1), flow(0, 1, 2), flow(1, 6, 2)]

    tiers = collective_tiers(Result(), topology)  # type: ignore[arg-type]
    assert [tiers[f.key] for f in Result.flows[::2]] == ["nvlink", "nic", "fabric"]


def test_the_trace_has_an_attribution_track_per_rank() -> None:
    def script(r: ScriptedRank) -> None:
        r.kernel(1_000)
        r.cpu(2_000)
        r.kernel(1_000)
        r.sync()

    result = run([script, script], fluid(2), record_flows=True).result
    attribution = attribute(result, make_topology(2))
    slices = [e for e in trace_events(result, attribution=attribution)
              if e.get("tid") == ATTRIBUTION_TID and e["ph"] == "X"]
    assert {e["pid"] for e in slices} == {0, 1}
    parts = [e["name"] for e in slices if e["pid"] == 0 and e["cat"] == "attribution"]
    assert parts == ["compute", "host_bound", "compute"]
    summary = attribution.to_dict()
    assert summary["parts"] == list(PARTS)
    assert summary["steady"]["step_ns"] == pytest.approx(3_000, abs=1)
    assert summary["steady"]["share"]["compute"] == pytest.approx(2 / 3, abs=1e-3)
