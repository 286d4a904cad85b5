"""Replays a recorded execution graph on another cluster or network, without the script.

Each recorded rank becomes a driver thread that speaks the rank side of
:mod:`wire` over a ``Pipe`` to an unmodified
:class:`~phantora.engine.live.LiveEngine`: it re-issues the rank's ops in program order, each
``cpu_ns`` of host time after the previous host event, and blocks in each sync until the engine
answers. So a sync waits for its target on the *new* network, and the recorded CPU gap follows;
kernels keep their recorded durations (same GPU), collectives are planned again by the NCCL
model for the new fabric and NCCL settings.

What a replay cannot capture (also in the README and every replay's ``summary.json``): a script
that reacts to timing (polls ``event.query()``, sizes work by elapsed time) takes the live run's
decisions; data-dependent work (MoE routing, token counts) is the recorded one; host CPU time is
the live run's measurement, not re-measured; tensor values are not carried.
"""

import threading
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any

from hwmodel.compute import Coverage
from phantora.cluster.topology import Topology
from phantora.collectives import NcclConfig, SystemInfo
from phantora.engine.live import LiveEngine
from phantora.engine.overlap import OverlapModel
from phantora.engine.results import LiveResult
from phantora.network.base import NetworkBackend
from phantora.record.graph import GPU_OPS, Recording, RecordingError, collective_key, record_op
from wire.messages import Batch, Exit, Op, RankStats, Reply, Sync

LIMITS = (
    "host CPU gaps are the live run's (script CPU time is not re-measured)",
    "a script reacting to timing (event.query() polling, time-based loops) takes the live "
    "run's decisions",
    "data-dependent work (MoE routing, token counts, shapes) is the recorded one",
    "tensor values are not carried (collective outputs are not recomputed)",
)
_JOIN_S = 5.0


class _RankDriver(threading.Thread):
    """Replays one rank's records against the engine (the rank side of the protocol)."""

    def __init__(self, rank: int, records: list[dict[str, Any]], conn: Connection,
                 stats: RankStats, live_optimizer_ns: Sequence[int] = ()) -> None:
        super().__init__(name=f"replay-rank{rank}", daemon=True)
        self.rank = rank
        self._records = records
        self._conn = conn
        self._stats = stats
        self._live_optimizer_ns = live_optimizer_ns
        self.queries_differing = 0
        """``event.query()`` answers that differ from the live run's."""
        self.optimizer_ns: list[int] = []
        """The live run's optimizer steps moved onto the replay's clock (:meth:`_moved`)."""

    def run(self) -> None:
        try:
            self._replay()
        except (EOFError, OSError):
            pass  # the engine stopped (it raised, and says why)
        except Exception as error:  # noqa: BLE001 - the engine reports it as a crashed rank
            try:
                self._conn.send(Batch(0, exit=Exit(1, f"replay driver: {error!r}")))
            except OSError:
                pass

    def _replay(self) -> None:
        host_ns = live_ns = 0
        clocks: list[tuple[int, int]] = []  # (live, replay) clock after each host event
        ops: list[Op] = []
        for record in self._records:
            host_ns += record["cpu_ns"]
            live_ns += record["cpu_ns"]
            kind = record["op"]
            if kind in GPU_OPS:
                ops.append(record_op(record, host_ns))
            elif kind in ("sync", "query"):
                sync = Sync(record.get("kind", "query"), record["target"], host_ns)
                self._conn.send(Batch(host_ns, ops, sync=sync))
                ops = []
                reply = self._await_reply()
                if kind == "query":
                    self.queries_differing += int(reply.value != record["value"])
                else:
                    host_ns = max(host_ns, reply.time_ns)
                    live_ns = max(live_ns, record.get("reply_ns", live_ns))
            elif kind == "exit":
                self.optimizer_ns = self._moved(clocks + [(live_ns, host_ns)])
                self._conn.send(Batch(host_ns, ops, exit=Exit(0, stats=self._stats)))
                return
            else:
                raise RecordingError(f"unknown record op {kind!r}")
            clocks.append((live_ns, host_ns))
        raise RecordingError("a rank's records end without an 'exit' record; the recording "
                             "is incomplete, record the run again")

    def _moved(self, clocks: list[tuple[int, int]]) -> list[int]:
        """Each live optimizer step as the same CPU time after the same host event on the
        replay's clock (it runs on the CPU, never inside a sync's wait)."""
        lives = [live for live, _ in clocks]
        moved = []
        for step_ns in self._live_optimizer_ns:
            index = bisect_right(lives, step_ns) - 1
            live, replayed = clocks[index] if index >= 0 else (0, 0)
            moved.append(replayed + step_ns - live)
        return moved

    def _await_reply(self) -> Reply:
        while True:
            message = self._conn.recv()
            if isinstance(message, Reply):
                return message  # value deliveries (none are asked for) are skipped


@dataclass(frozen=True)
class ReplayResult:
    result: LiveResult
    queries_differing: int = 0
    optimizer_ns: dict[int, list[int]] | None = None
    """Each live rank's optimizer steps on the replay's clock (``None``: the recording has
    none)."""


def replay(recording: Recording, topology: Topology, system: SystemInfo, nccl: NcclConfig,
           backend: NetworkBackend, gpus_of_rank: Sequence[int], *, coverage: Coverage | None,
           overlap: OverlapModel | None,
           kernel_scale: Mapping[int, float] | None = None) -> ReplayResult:
    """Run the recorded graph through a live engine on ``backend`` (``kernel_scale``: rank ->
    factor on its recorded kernels' durations, as the engine takes it); raises what the
    engine raises (a deadlock, say, if the recording was edited into an inconsistent one)."""
    classes = recording.classes
    pipes = {rank: Pipe() for rank in classes.live_ranks()}
    live_optimizer = recording.meta.get("optimizer_steps_ns")
    drivers = [_RankDriver(rank, recording.ranks[rank], child, recording.stats(rank),
                           live_optimizer[rank] if live_optimizer else ())
               for rank, (_, child) in pipes.items()]
    engine = LiveEngine(topology, system, nccl, backend,
                        {rank: parent for rank, (parent, _) in pipes.items()}, gpus_of_rank,
                        coverage=coverage, overlap=overlap, record_flows=True, classes=classes,
                        kernel_scale=kernel_scale)
    for driver in drivers:
        driver.start()
    try:
        result = engine.run()
    finally:
        for parent, child in pipes.values():
            parent.close()
        for driver in drivers:
            driver.join(_JOIN_S)
        for _, child in pipes.values():
            child.close()
    return ReplayResult(result, sum(d.queries_differing for d in drivers),
                        {d.rank: d.optimizer_ns for d in drivers} if live_optimizer else None)


def comparison(recording: Recording, replayed: ReplayResult) -> dict[str, Any]:
    """``summary.json``'s ``replay`` section: where the replay differs from the live run."""
    result = replayed.result
    live_ns = int(recording.meta["simulated_ns"])
    ran = {r.key: r for r in result.collectives}
    rechosen = 0
    for records in recording.ranks:
        for record in records:
            if record["op"] == "collective" and "algorithm" in record:
                now = ran.get(collective_key(record))
                if now is not None and (now.algorithm, now.protocol, now.channels) != (
                        record["algorithm"], record["protocol"], record["channels"]):
                    rechosen += 1
    blocked_live = sum(r.get("blocked_ns", 0) for records in recording.ranks for r in records)
    return {
        "recording": str(recording.path),
        "live_simulated_ns": live_ns,
        "replay_simulated_ns": result.simulated_ns,
        "difference_pct": round(100.0 * (result.simulated_ns - live_ns) / live_ns, 3)
        if live_ns else None,
        "rank_clock_ns": {"live": recording.meta["rank_clock_ns"],
                          "replay": [rank.clock_ns for rank in result.ranks]},
        "blocked_ns": {"live": blocked_live,
                       "replay": sum(rank.blocked_ns for rank in result.ranks)},
        "collective_members_with_other_choice": rechosen,
        "queries_answered_differently": replayed.queries_differing,
        "not_replayed": list(LIMITS),
    }
