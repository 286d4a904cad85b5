"""Packet-level network backend on ns-3 (RoCE with PFC + DCQCN, or DCTCP), inter-host flows only.

ns-3 is loaded on first use of :class:`Ns3Backend`; importing this package does not load it.
"""

from phantora.network.ns3.backend import Ns3Backend
from phantora.network.ns3.config import Ns3Config

__all__ = ["Ns3Backend", "Ns3Config"]
