"""The hardware facts NCCL's topology detection would find, as the collective model needs them."""

from dataclasses import dataclass

from hwmodel.catalogue import GpuSpec
from phantora.cluster.topology import LinkKind, Topology
from phantora.network.base import GpuId


@dataclass(frozen=True, slots=True)
class SystemInfo:
    """Hosts of identical GPUs on one NVSwitch each, one NIC per GPU (a rail) between hosts."""

    hosts: int
    gpus_per_host: int
    gpu: GpuSpec
    nic_gbps: float
    """NIC line rate per GPU and direction; 0 when there is no fabric (one host)."""
    nvlink_gbps: float
    """NVLink line rate per GPU and direction, all links together."""
    nvlink_hop_latency_ns: int = 0
    """Propagation latency of one GPU -> NVSwitch -> GPU hop in the topology."""
    net_hop_latency_ns: int = 0
    """Propagation latency of one GPU -> NIC -> fabric -> NIC -> GPU hop on the same rail."""

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.gpus_per_host < 1:
            raise ValueError(f"SystemInfo: hosts ({self.hosts}) and gpus_per_host "
                             f"({self.gpus_per_host}) must be >= 1")
        if self.nvlink_gbps <= 0 and self.gpus_per_host > 1:
            raise ValueError("SystemInfo: nvlink_gbps must be > 0 when a host has several GPUs")
        if self.nic_gbps <= 0 and self.hosts > 1:
            raise ValueError("SystemInfo: nic_gbps must be > 0 when there are several hosts")

    @classmethod
    def from_topology(cls, topology: Topology, gpu: GpuSpec) -> "SystemInfo":
        """Read link rates and hop latencies off a built topology (GPU 0 is representative;
        the NIC rate is the slowest NIC's, as NCCL's ranks agree on the minimum of their
        graphs' bandwidths)."""
        nvlink = topology.links[topology.nvlink_of(0)]
        nic_gbps, net_latency_ns = 0.0, 0
        if topology.hosts > 1:
            nic_gbps = topology.slowest_nic_gbps()
            # Same rail on the next host: the path NCCL's rail-aligned rings and trees take.
            path = topology.fabric_path(0, topology.gpus_per_host, flow_key=0)
            net_latency_ns = sum(topology.links[link].latency_ns for link in path)
        return cls(hosts=topology.hosts, gpus_per_host=topology.gpus_per_host, gpu=gpu,
                   nic_gbps=nic_gbps, nvlink_gbps=nvlink.gbps,
                   nvlink_hop_latency_ns=2 * nvlink.latency_ns,
                   net_hop_latency_ns=net_latency_ns)

    @property
    def num_gpus(self) -> int:
        return self.hosts * self.gpus_per_host

    def host_of(self, gpu: GpuId) -> int:
        return gpu // self.gpus_per_host

    def local_of(self, gpu: GpuId) -> int:
        """The GPU's index inside its host, which is also its NIC rail."""
        return gpu % self.gpus_per_host

    def hop_latency_ns(self, src: GpuId, dst: GpuId) -> int:
        """Propagation latency the network adds to a flow from ``src`` to ``dst``."""
        if self.host_of(src) == self.host_of(dst):
            return self.nvlink_hop_latency_ns
        return self.net_hop_latency_ns

    def link_kind(self, src: GpuId, dst: GpuId) -> LinkKind:
        """NVLINK for same-host flows, NIC for flows that leave the host."""
        return LinkKind.NVLINK if self.host_of(src) == self.host_of(dst) else LinkKind.NIC
