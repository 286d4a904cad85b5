"""Records a live run's execution graph by tapping each rank's connection to the engine.

:class:`RecordingConnection` stands in for a rank's ``Connection`` in the engine: it passes
every message through unchanged and keeps, per rank, the ops the engine consumed, each with
the host gap before it (script CPU time), and each sync with the reply it got (time blocked).
The engine is not modified: what it reads is, by construction, what is recorded.
"""

from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from phantora.engine.rank_classes import RankClasses
from phantora.engine.results import LiveResult
from phantora.record.graph import GRAPH_DIR, collective_key, op_record, stats_dict, write_graph
from wire.messages import Batch, RankStats, Reply


class RankLog:
    """One rank's records, built from the batches it sent and the replies it got."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.stats = RankStats()
        self._host_ns = 0
        """The rank's clock after its last host event (op, sync answer)."""
        self._sync: dict[str, Any] | None = None

    def batch(self, batch: Batch) -> None:
        for op in batch.ops:
            self.records.append(op_record(op, op.at_ns - self._host_ns))
            self._host_ns = op.at_ns
        if batch.sync is not None:
            sync = batch.sync
            kind = "query" if sync.kind == "query" else "sync"
            self._sync = {"op": kind, "t_ns": sync.at_ns, "cpu_ns": sync.at_ns - self._host_ns,
                          "target": sync.target}
            if kind == "sync":
                self._sync["kind"] = sync.kind
            self._host_ns = sync.at_ns
        if batch.exit is not None:
            self.stats = batch.exit.stats
            self.records.append({"op": "exit", "t_ns": batch.clock_ns,
                                 "cpu_ns": batch.clock_ns - self._host_ns})

    def reply(self, reply: Reply) -> None:
        sync = self._sync
        if sync is None:
            return
        self._sync = None
        if sync["op"] == "query":
            sync["value"] = reply.value
        else:
            sync["reply_ns"] = reply.time_ns
            sync["blocked_ns"] = max(0, reply.time_ns - sync["t_ns"])
            self._host_ns = max(self._host_ns, reply.time_ns)
        self.records.append(sync)


class RecordingConnection:
    """A rank's connection, seen by the engine, that logs what passes through it."""

    def __init__(self, conn: Connection, log: RankLog) -> None:
        self._conn = conn
        self._log = log

    def fileno(self) -> int:
        return self._conn.fileno()

    def poll(self, timeout: float = 0.0) -> bool:
        return self._conn.poll(timeout)

    def recv(self) -> Any:
        message = self._conn.recv()
        if isinstance(message, Batch):
            self._log.batch(message)
        return message

    def send(self, message: Any) -> None:
        if isinstance(message, Reply):
            self._log.reply(message)
        self._conn.send(message)


def tap(connections: Mapping[int, Connection]
        ) -> tuple[dict[int, RecordingConnection], dict[int, RankLog]]:
    """Recording stand-ins for the live ranks' connections, and the logs they fill."""
    logs = {rank: RankLog() for rank in connections}
    return {rank: RecordingConnection(conn, logs[rank]) for rank, conn in connections.items()}, logs


def write_recording(out_dir: Path, logs: Mapping[int, RankLog], result: LiveResult,
                    gpu: str, gpus_of_rank: Sequence[int], classes: RankClasses) -> None:
    """``out_dir/graph``: each live rank's records, collectives annotated with what the NCCL
    model chose for them (algorithm, protocol, channels, flows) and when they ran."""
    chosen = {r.key: r for r in result.collectives}
    for log in logs.values():
        for record in log.records:
            if record["op"] == "collective":
                ran = chosen.get(collective_key(record))
                if ran is not None:
                    record.update(algorithm=ran.algorithm, protocol=ran.protocol,
                                  channels=ran.channels, flows=ran.flows,
                                  start_ns=ran.start_ns, end_ns=ran.end_ns)
    stats = {rank: log.stats for rank, log in logs.items()}
    meta = {"world_size": classes.world, "gpu": gpu, "gpus_of_rank": list(gpus_of_rank),
            "simulated_ns": result.simulated_ns,
            "rank_clock_ns": [rank.clock_ns for rank in result.ranks],
            "rank_stats": [stats_dict(stats[classes.representative(rank)])
                           for rank in range(classes.world)],
            "optimizer_steps_ns": [[step[0] for step in stats[classes.representative(rank)]
                              .host_time.steps] for rank in range(classes.world)],
            "collectives": len(result.collectives)}
    if classes.deduplicated:
        meta["rank_classes"] = classes.grid
    write_graph(out_dir / GRAPH_DIR, meta,
                ((rank, log.records) for rank, log in sorted(logs.items())))
