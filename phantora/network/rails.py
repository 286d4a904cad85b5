"""Which GPUs of a fabric form interchangeable rails (:func:`find_rails`).

A *rail* is one switch that holds exactly one NIC of every host, as on a rail-optimized
fabric: NCCL's rings and trees keep a channel's traffic on one rail, so while every flow
stays on its rail the rails share no port, queue, buffer or link, and rails that carry the
same flows behave the same. Rail ``r`` of host ``h`` is GPU ``gpu_at(h, r)``; swapping two
rails maps every rail-local flow to a flow between the same hosts. What can make two rails
differ although their flows agree is checked here once: a host's NICs must all have the same
rate and latency (a degraded host's NICs are slow on every rail alike).
"""

from dataclasses import dataclass

from phantora.cluster.topology import Topology


@dataclass(frozen=True, slots=True)
class Rails:
    """The rails of a fabric: ``rail_of[g]`` and ``host_of[g]`` for every GPU ``g``."""

    count: int
    rail_of: tuple[int, ...]
    host_of: tuple[int, ...]
    alike_hosts: bool = True
    """Every NIC has the same rate and latency, so hosts too are interchangeable
    (:mod:`phantora.network.host_ring`)."""

    def local(self, src: int, dst: int) -> bool:
        """Whether a flow from GPU ``src`` to GPU ``dst`` stays on one rail."""
        return self.rail_of[src] == self.rail_of[dst]


def find_rails(topology: Topology) -> tuple[Rails | None, str]:
    """The fabric's rails, or ``None`` and why it has none that may be mirrored."""
    if topology.hosts < 2:
        return None, "one host: no fabric"
    switch_of: list[int] = []
    nic: dict[int, tuple[float, int]] = {}
    for gpu in range(topology.num_gpus):
        link = topology.links[topology.nic_of(gpu)]
        switch_of.append(link.b if link.a == topology.gpu_nodes[gpu] else link.a)
        nic[gpu] = (link.gbps, link.latency_ns)
    switches = list(dict.fromkeys(switch_of))
    if len(switches) < 2:
        return None, "every NIC is on one switch: a single rail"
    rail_of = tuple(switches.index(switch) for switch in switch_of)
    host_of = tuple(topology.host_of(gpu) for gpu in range(topology.num_gpus))
    per_rail = [sorted(host_of[g] for g in range(topology.num_gpus) if rail_of[g] == rail)
                for rail in range(len(switches))]
    if any(hosts != list(range(topology.hosts)) for hosts in per_rail):
        return None, (f"{topology.name}: a switch holds several NICs of one host or misses "
                      "a host, so its GPUs' switches are no rails")
    for host in range(topology.hosts):
        rates = {nic[g] for g in range(topology.num_gpus) if host_of[g] == host}
        if len(rates) > 1:
            return None, f"host {host}'s NICs differ in rate or latency from rail to rail"
    return Rails(len(switches), rail_of, host_of, len(set(nic.values())) == 1), ""
