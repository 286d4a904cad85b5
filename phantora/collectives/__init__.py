"""The NCCL model: how NCCL runs one collective, as a DAG of flows between GPUs.

``plan_collective(request, system, config)`` sees the group as a communicator, emulates
NCCL's topology search and tuning model to pick algorithm (ring, tree, NVLS), protocol
(LL, LL128, Simple) and channel count, and lays the choice out as a :class:`FlowDag`.
Modules, in the order a plan uses them:

* :mod:`.request`, :mod:`.config`, :mod:`.system` - inputs; :mod:`.comm` - the group's shape
* :mod:`.search` - NCCL's ring/tree/NVLS graphs; :mod:`.tuning` - NCCL's cost model
* :mod:`.efficiency` - payload-to-wire efficiencies; :mod:`.chunking` - chunks and slots
* :mod:`.ring`, :mod:`.tree`, :mod:`.nvls`, :mod:`.p2p` - the algorithms' flows
* :mod:`.writer` - wire bytes and hop delays of every flow; :mod:`.planner` - the entry point
"""

from phantora.collectives.efficiency import DEFAULT_NCCL_EFFICIENCY, NcclEfficiency
from phantora.collectives.config import Algorithm, NcclConfig, Protocol
from phantora.collectives.dag import FlowDag, FlowSpec
from phantora.collectives.planner import plan_collective, select
from phantora.collectives.request import CollectiveOp, CollectiveRequest
from phantora.collectives.system import SystemInfo
from phantora.collectives.tuning import Choice

__all__ = [
    "DEFAULT_NCCL_EFFICIENCY",
    "Algorithm",
    "Choice",
    "CollectiveOp",
    "CollectiveRequest",
    "FlowDag",
    "FlowSpec",
    "NcclConfig",
    "NcclEfficiency",
    "Protocol",
    "SystemInfo",
    "plan_collective",
    "select",
]
