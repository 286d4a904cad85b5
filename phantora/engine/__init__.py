"""The engine: runs GPU work, collectives and the network in virtual time.

* :mod:`.live` - :class:`LiveEngine`, the coordinator of live ranks (conservative sync)
* :mod:`.streams` - one rank's CUDA streams and events; :mod:`.matching` - collectives by
  (group, seq); :mod:`.deadlock` - the report when ranks wait on each other
* :mod:`.dag_runner` - :class:`FlowScheduler`, many collectives' flow DAGs on one backend
* :mod:`.benchmark` - the nccl-tests style workload
"""

from phantora.engine.dag_runner import FlowScheduler, run_dag
from phantora.engine.live import CollectiveRecord, LiveEngine, LiveResult, RankResult

__all__ = ["CollectiveRecord", "FlowScheduler", "LiveEngine", "LiveResult", "RankResult", "run_dag"]
