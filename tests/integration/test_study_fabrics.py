"""The bundled study where the fabric decides the step
(``scenarios/studies/gpt2-124m-fsdp2-128xh100-fabrics.yaml``, docs/studies.md): it loads as
a sweep with the intended points, every point a replay of one recording on the packet-level
fabric, and every fault names a part of the topology (resolving a point checks it). The study
itself takes minutes and is not run here."""

from pathlib import Path

from phantora.scenario import ScriptWorkload
from phantora.scenario.model import (FatTreeFabric, LeafSpineFabric, LinkDownFault,
                                     NicDegradeFault, RailOptimizedFabric)
from phantora.study.sweep import load_sweep

STUDY = (Path(__file__).resolve().parents[2] / "scenarios" / "studies"
         / "gpt2-124m-fsdp2-128xh100-fabrics.yaml")

FABRIC_KIND = {RailOptimizedFabric: "rail", LeafSpineFabric: "leaf-spine",
               FatTreeFabric: "fat-tree"}

INTENDED = [  # (fabric, oversubscription, transport, fault)
    ("rail", 1.0, "roce", None),
    ("rail", 2.0, "roce", None),
    ("rail", 4.0, "roce", None),
    ("leaf-spine", 1.0, "roce", None),
    ("leaf-spine", 2.0, "roce", None),
    ("leaf-spine", 4.0, "roce", None),
    ("fat-tree", None, "roce", None),
    ("rail", 1.0, "dctcp", None),
    ("leaf-spine", 4.0, "dctcp", None),
    ("rail", 1.0, "roce", "nic_degrade"),
    ("rail", 1.0, "roce", "link_down"),
    ("leaf-spine", 1.0, "roce", "nic_degrade"),
    ("leaf-spine", 1.0, "roce", "link_down"),
]


def test_the_fabrics_study_is_a_sweep_of_replays_over_the_intended_fabrics() -> None:
    sweep = load_sweep(STUDY)
    assert sweep is not None and sweep.spec.mode == "zip"
    assert [point.error for point in sweep.points if point.error] == []
    assert all(point.replayable for point in sweep.points) and sweep.needs_recording
    assert sweep.base["simulation"] == {"reproducible": True}

    found = []
    for point in sweep.points:
        scenario = point.scenario
        assert scenario is not None
        assert isinstance(scenario.workload, ScriptWorkload)
        assert scenario.workload.world_size == scenario.cluster.num_gpus == 128
        network = scenario.cluster.network
        assert network is not None and network.backend == "ns3"  # packet level everywhere
        assert network.nic_gbps == 100.0
        fabric = network.topology
        if isinstance(fabric, LeafSpineFabric):
            assert fabric.hosts_per_leaf == 2 and fabric.leaves == 8  # rings cross spines
        over = None if isinstance(fabric, FatTreeFabric) else fabric.oversubscription
        assert len(scenario.faults) <= 1
        fault = scenario.faults[0].kind if scenario.faults else None
        found.append((FABRIC_KIND[type(fabric)], over, network.transport, fault))

        for item in scenario.faults:
            if isinstance(item, NicDegradeFault):
                assert item.hosts == (3,) and item.nic_gbps_after == 50.0
            else:
                assert isinstance(item, LinkDownFault) and item.at_ns == 0
                assert "spine" in item.link
    assert found == INTENDED
