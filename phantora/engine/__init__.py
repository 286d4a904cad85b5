"""The engine: runs GPU work, collectives and the network in virtual time.

* :mod:`.live` - :class:`LiveEngine`, the coordinator of live ranks (conservative sync)
* :mod:`.results` - what a live run produced (:class:`LiveResult`, one :class:`RankResult` per
  rank, the collectives, spans and flows as they ran)
* :mod:`.streams` - one rank's CUDA streams and events; :mod:`.matching` - collectives by
  (group, seq); :mod:`.deadlock` - the report when ranks wait on each other
* :mod:`.flow_scheduler` - :class:`FlowScheduler`, many collectives' flow DAGs on one backend
* :mod:`.lone_collective` - one collective planned and run on its own (the collectives sweep)
"""

from phantora.engine.flow_scheduler import FlowScheduler, run_dag
from phantora.engine.live import LiveEngine
from phantora.engine.results import CollectiveRecord, LiveResult, RankResult

__all__ = ["CollectiveRecord", "FlowScheduler", "LiveEngine", "LiveResult", "RankResult", "run_dag"]
