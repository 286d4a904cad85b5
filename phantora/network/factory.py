"""Builds the network backend a scenario asks for.

NVLink traffic inside hosts is always simulated by the fluid model (fast, and NVLink has no
congestion control to model); the fabric between hosts by ns-3 (packet level, default) or by the
same fluid model (``cluster.network.backend: flow``).
"""

from phantora.cluster.topology import Topology
from phantora.network.base import NetworkBackend
from phantora.network.composite import CompositeBackend
from phantora.network.flow import FluidBackend
from phantora.scenario.model import NetworkConfig


def make_backend(topology: Topology, network: NetworkConfig | None, seed: int) -> NetworkBackend:
    """The composite backend for ``topology``; ``network`` is ``None`` for a single host."""
    intra = FluidBackend(topology, scope="intra")
    if network is None:
        return CompositeBackend(topology, intra, None)
    if network.backend == "flow":
        return CompositeBackend(topology, intra, FluidBackend(topology, scope="inter"))
    from phantora.network.ns3 import Ns3Backend, Ns3Config  # ns-3 loads only when used

    config = Ns3Config(mtu_bytes=network.mtu_bytes,
                       switch_buffer_bytes=network.switch_buffer_bytes,
                       ecn_threshold_bytes=network.ecn_threshold_bytes,
                       transport=network.transport, roce=network.roce, seed=seed + 1)
    return CompositeBackend(topology, intra, Ns3Backend(topology, config))
