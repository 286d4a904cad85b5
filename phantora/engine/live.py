"""The live coordinator: every rank's GPU work, its collectives and the network, kept in step.

Ranks talk to the engine only through :mod:`wire` messages over one
``multiprocessing`` Connection each. The loop (``docs/live-simulation.md``):

1. Receive batches. Each op goes on its rank's stream (:mod:`.streams`): kernel times follow at
   once from stream order; a collective waits until every member's stream reaches it
   (:mod:`.matching`), then is planned by the NCCL model and submitted to the shared
   :class:`~phantora.engine.flow_scheduler.FlowScheduler` at its start time.
2. Settle: simulate one instant at a time, but only strictly below the *safe horizon* = min
   over running ranks of their clock promise (a querying rank counts with its query time;
   blocked and finished ranks promise nothing). At each instant the ranks' GPU work that
   starts then is applied first (kernels placed, collectives reached, events recorded: the
   devices wait for the engine's clock, :class:`~phantora.engine.streams.DeviceClock`), then
   the scheduler (and with it the network backend) runs it. A collective's end releases the
   work queued behind it; a rank blocked in a sync is answered as soon as the completion it
   waits for is known (:class:`~wire.messages.Reply`), and counts as running again from that
   time on.
3. If no rank is running and nothing is left to simulate while some rank is still blocked, that
   is a deadlock: :class:`DeadlockError` with a report, at once, never a hang. A rank that
   exits with a traceback raises :class:`RankCrashed`.

Why the horizon is strict: a rank whose clock is ``t`` may still send an op at ``t``. Keeping
the instant ``t`` unprocessed until then makes every run process the same instants with the
same inputs, whatever the wall-clock interleaving of the ranks' messages (reproducible mode).
That holds for the GPUs too: a kernel's end is fixed at its start from what the simulation
knows at that instant (the overlap model reads which collectives are in flight, and since
when every member reached them), never from whatever had arrived or completed when its op
came in; so two runs of a scenario give the same numbers, bit for bit.
The engine also rejects a rank that breaks its promise (an op earlier than its last clock), and
the scheduler refuses to inject anything before the backend's clock: both raise
:class:`SimulationError` instead of simulating a wrong past.

With rank deduplication (``classes``, :mod:`.rank_classes`), only live ranks have a connection
and count in the horizon; each mirror's share of a collective is issued with its
representative's and is ready when that is (:mod:`.mirrors`).
"""

import heapq
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from enum import Enum
from multiprocessing.connection import Connection, wait

import numpy as np

from hwmodel.measured.gpu import KERNEL_GAP_NS
from phantora.cluster.topology import Topology
from phantora.collectives import (
    DEFAULT_NCCL_EFFICIENCY,
    CollectiveRequest,
    FlowDag,
    NcclConfig,
    NcclEfficiency,
    SystemInfo,
    plan_collective,
)
from hwmodel.compute import Coverage
from phantora.engine.flow_scheduler import FOREVER_NS, DagDone, FlowScheduler
from phantora.engine.deadlock import deadlock_report
from phantora.engine.matching import CollectiveKey, Matcher, Member, PendingCollective
from phantora.engine.mirrors import Mirror, WitnessCheck
from phantora.engine.overlap import MEASURED_OVERLAP, OverlapModel
from phantora.engine.rank_classes import RankClasses
from phantora.engine.results import (
    BlockedSpan,
    CollectiveRecord,
    CollectiveSpan,
    LiveResult,
    NetworkFlow,
    RankResult,
)
from phantora.engine.streams import Completion, RankDevice
from hwmodel.errors import DeadlockError, RankCrashed, RegroupRanks, SimulationError
from phantora.network.base import GpuId, NetworkBackend
from wire.messages import (
    Batch,
    Collective,
    EventRecord,
    Kernel,
    RankStats,
    Reply,
    StreamWait,
    Sync,
    ValueDelivery,
    ValueUpdate,
)


_BATCHES_PER_ROUND = 64
"""Batches read from one rank before the engine simulates and answers the others."""

_PLAN_CACHE_SIZE = 256
"""Distinct collectives whose plans are kept (a DDP step has ~15, FSDP a few dozen)."""


class _State(Enum):
    RUNNING = "running"
    BLOCKED = "blocked"
    QUERYING = "querying"
    FINISHED = "finished"


class _Rank:
    __slots__ = (
        "blocked_ns",
        "collectives",
        "conn",
        "device",
        "mirror",
        "mirrors",
        "gpu",
        "promise_ns",
        "rank",
        "scaled_extra_ns",
        "state",
        "stats",
        "sync",
        "token",
    )

    def __init__(self, rank: int, gpu: GpuId, conn: Connection | None, device: RankDevice,
                 mirror: Mirror | None = None) -> None:
        self.rank = rank
        self.gpu = gpu
        self.conn = conn
        """``None`` for a mirror, which follows its representative (``mirror``)."""
        self.device = device
        self.mirror = mirror
        self.mirrors: list["_Rank"] = []
        """The mirrors following this rank."""
        self.state = _State.RUNNING
        self.promise_ns = 0
        """Running: nothing it sends later is earlier. Finished: its clock at exit."""
        self.sync: Sync | None = None
        """The sync it is blocked (or querying) in."""
        self.token = 0
        """Counts syncs, so a completion that fires after its sync was answered is ignored."""
        self.blocked_ns = 0
        self.collectives = 0
        self.scaled_extra_ns = 0
        """GPU time its ``kernel_scale`` factor added to its kernels (negative: took off)."""
        self.stats = RankStats()
        """What the rank reported about itself when it exited."""


class _Clock:
    """The engine's :class:`~phantora.engine.streams.DeviceClock`: the instant the simulation
    has settled up to, and the devices waiting for later instants (earliest first, then by
    rank)."""

    __slots__ = ("_due", "_order", "_waiting", "settled")

    def __init__(self) -> None:
        self.settled = 0
        """Every instant before it is simulated."""
        self._waiting: list[tuple[int, int, int, RankDevice]] = []
        self._due: dict[int, int] = {}
        """Rank -> the instant its device waits for (other entries of ``_waiting`` are stale)."""
        self._order = itertools.count()

    def settled_ns(self) -> int:
        return self.settled

    def wake_at(self, device: RankDevice, ready_ns: int) -> None:
        if self._due.get(device.rank) != ready_ns:
            self._due[device.rank] = ready_ns
            heapq.heappush(self._waiting, (ready_ns, device.rank, next(self._order), device))

    def next_ns(self) -> int | None:
        """The earliest instant a device waits for (``None``: none waits)."""
        waiting = self._waiting
        while waiting and self._due.get(waiting[0][1]) != waiting[0][0]:
            heapq.heappop(waiting)
        return waiting[0][0] if waiting else None

    def wake_next(self) -> None:
        """Settle up to the earliest instant a device waits for and resume that device."""
        ready_ns, rank, _, device = heapq.heappop(self._waiting)
        del self._due[rank]
        self.settled = ready_ns + 1
        device.resume()


class LiveEngine:
    """Coordinates live ranks with the GPU model, the NCCL model and a network backend."""

    def __init__(self, topology: Topology, system: SystemInfo, nccl: NcclConfig,
                 backend: NetworkBackend, connections: Mapping[int, Connection],
                 gpus_of_rank: Sequence[GpuId], *,
                 nccl_efficiency: NcclEfficiency = DEFAULT_NCCL_EFFICIENCY,
                 coverage: Coverage | None = None, record_flows: bool = False,
                 overlap: OverlapModel | None = MEASURED_OVERLAP,
                 kernel_gap_ns: int = KERNEL_GAP_NS.value,
                 classes: RankClasses | None = None,
                 kernel_scale: Mapping[int, float] | None = None) -> None:
        """``connections[rank]`` is the coordinator's end of each live rank's pipe (every
        rank's, unless ``classes`` deduplicates ranks: then the others mirror theirs);
        ``gpus_of_rank[rank]`` the global GPU the rank drives; ``coverage`` (if given)
        accumulates every kernel's cost source; ``overlap`` how collectives in flight slow a
        GPU's kernels (``None``: not at all); ``kernel_gap_ns`` the GPU's idle time between
        back-to-back kernels (``hwmodel.measured.gpu.KERNEL_GAP_NS``);
        ``kernel_scale[rank]`` multiplies the durations of the rank's kernels as they arrive
        (a ``slow_gpu`` fault), which needs a timeline of its own: a scaled rank may neither
        mirror another nor be mirrored (:class:`SimulationError` otherwise)."""
        world = len(gpus_of_rank)
        self._classes = classes or RankClasses.all_live(world)
        if self._classes.world != world:
            raise SimulationError(f"rank classes {self._classes} are for "
                                  f"{self._classes.world} ranks, but gpus_of_rank names {world}")
        self._kernel_scale = dict(kernel_scale or {})
        _check_scaled_ranks(self._kernel_scale, self._classes)
        if sorted(connections) != self._classes.live_ranks():
            raise SimulationError(f"connections are for ranks {sorted(connections)}, but "
                                  f"{self._classes.describe()} are "
                                  f"{self._classes.live_ranks()}")
        bad = [gpu for gpu in gpus_of_rank if not 0 <= gpu < topology.num_gpus]
        if bad or len(set(gpus_of_rank)) != world:
            raise SimulationError(f"gpus_of_rank {list(gpus_of_rank)} must name distinct GPUs "
                                  f"of the topology's {topology.num_gpus}")
        self._system = system
        self._nccl = nccl
        self._nccl_efficiency = nccl_efficiency
        self._backend = backend
        self._coverage = coverage
        self._gpus = list(gpus_of_rank)
        self._matcher = Matcher(self._start_collective, self._values_ready)
        self._scheduler = FlowScheduler(backend, record_flows=record_flows)
        self._clock = _Clock()
        self._released = False
        """A rank was answered since the horizon was last taken (it may have lowered)."""
        mirrors = self._classes.mirrors()
        self._ranks = [
            _Rank(rank, self._gpus[rank], connections.get(rank),
                  RankDevice(rank, self._issue, overlap, kernel_gap_ns, self._clock),
                  None if rank not in mirrors else Mirror(self._classes, rank, mirrors[rank]))
            for rank in range(world)]
        for mirror, representative in mirrors.items():
            self._ranks[representative].mirrors.append(self._ranks[mirror])
        self._live = [rank for rank in self._ranks if rank.conn is not None]
        self._by_conn = {rank.conn: rank for rank in self._live}
        self._witness_checks: dict[int, WitnessCheck] = {}
        if self._classes.deduplicated:
            for rank in self._live:
                if self._classes.replica(rank.rank) == 0:
                    check = WitnessCheck(self._classes, rank.rank,
                                         self._classes.witness(rank.rank))
                    self._witness_checks[check.representative] = check
                    self._witness_checks[check.witness] = check
        self._groups: set[tuple[int, ...]] = set()
        """Every group (sorted ranks) a live rank issued a collective on."""
        self._running: dict[int, tuple[PendingCollective, FlowDag]] = {}
        self._plans: dict[CollectiveRequest, FlowDag] = {}
        self._records: list[CollectiveRecord] = []
        self._member_spans: list[CollectiveSpan] = []
        self._blocked: list[BlockedSpan] = []
        self._labels: dict[int, tuple[str, CollectiveKey]] = {}
        self._counts: Counter[str] = Counter()

    def run(self) -> LiveResult:
        """Serve the ranks until every one has exited; raises DeadlockError, RankCrashed."""
        self._settle()
        while any(rank.state is not _State.FINISHED for rank in self._live):
            if not any(rank.state in (_State.RUNNING, _State.QUERYING) for rank in self._live):
                raise DeadlockError(self._report("deadlock: every rank is blocked or has exited "
                                                 "and nothing is left to simulate"))
            self._receive()
            self._settle()
        for check in set(self._witness_checks.values()):
            problem = check.ended()
            if problem is not None:
                raise RegroupRanks(problem, frozenset(self._groups), wrong=self._classes)
        if self._matcher.incomplete():
            raise DeadlockError(self._report("every rank exited, but some collectives never "
                                             "completed"))
        return self._result()

    # -- messages ---------------------------------------------------------------------------

    def _receive(self) -> None:
        """Ingest the batches that have arrived (a bounded number per rank, so a chatty rank
        cannot hold up the others' replies), waiting for at least one."""
        listening = [rank.conn for rank in self._live if rank.state is not _State.FINISHED
                     or self._matcher.owes_values(rank.rank)]
        for conn in wait(listening):
            rank = self._by_conn[conn]  # type: ignore[index]
            if rank.state is _State.FINISHED:
                self._receive_owed_values(rank)
                continue
            for _ in range(_BATCHES_PER_ROUND):
                if rank.state is _State.FINISHED or not rank.conn.poll():
                    break
                try:
                    message = rank.conn.recv()
                except (EOFError, OSError):
                    raise RankCrashed(rank.rank, "the rank's process ended without an exit "
                                                 "message (killed, or crashed in native code)"
                                      ) from None
                if isinstance(message, ValueUpdate):
                    self._update_values(rank, message)
                    continue
                if not isinstance(message, Batch):
                    raise SimulationError(f"rank {rank.rank} sent {type(message).__name__}; "
                                          "expected a Batch or ValueUpdate")
                self._ingest(rank, message)

    def _receive_owed_values(self, rank: _Rank) -> None:
        """A rank that exited still sends the values of collectives it issued as pending."""
        assert rank.conn is not None
        try:
            message = rank.conn.recv()
        except (EOFError, OSError):
            for gone in (rank, *rank.mirrors):  # its members read unknown values
                self._matcher.forget_values_of(gone.rank)
            return
        if not isinstance(message, ValueUpdate):
            raise SimulationError(f"rank {rank.rank} sent {type(message).__name__} after its "
                                  "exit; only values may follow it")
        self._update_values(rank, message)

    def _ingest(self, rank: _Rank, batch: Batch) -> None:
        counts = self._counts
        counts["batches"] += 1
        if not batch.ops and batch.sync is None and batch.exit is None:
            counts["heartbeats"] += 1
        if batch.exit is not None and (batch.exit.status != 0 or batch.exit.traceback):
            raise RankCrashed(rank.rank, batch.exit.traceback
                              or f"the script exited with status {batch.exit.status}")
        if rank.state is not _State.RUNNING:
            if batch.ops or batch.sync is not None or batch.exit is not None:
                raise SimulationError(f"rank {rank.rank} sent ops while {rank.state.value} in "
                                      f"{rank.sync}; a blocked rank may only send heartbeats")
            return
        if batch.clock_ns < rank.promise_ns:
            raise SimulationError(f"rank {rank.rank}'s clock went back from {rank.promise_ns} ns "
                                  f"to {batch.clock_ns} ns")
        floor_ns = rank.promise_ns
        if self._classes.deduplicated:
            self._check_classes(rank, batch)
        scale = self._kernel_scale.get(rank.rank)
        for op in batch.ops:
            if op.at_ns < floor_ns:
                raise SimulationError(f"rank {rank.rank} sent {op} at {op.at_ns} ns, earlier than "
                                      f"its clock had promised ({floor_ns} ns)")
            floor_ns = op.at_ns
            if scale is not None and isinstance(op, Kernel):
                scaled = replace(op, duration_ns=round(op.duration_ns * scale))
                rank.scaled_extra_ns += scaled.duration_ns - op.duration_ns
                op = scaled
            self._count_op(rank, op)
            rank.device.apply(op)
        rank.promise_ns = batch.clock_ns
        if batch.exit is not None:
            rank.state = _State.FINISHED
            rank.stats = batch.exit.stats
        elif batch.sync is not None:
            if batch.sync.at_ns < floor_ns:
                raise SimulationError(f"rank {rank.rank} synced at {batch.sync.at_ns} ns, earlier "
                                      f"than its clock had promised ({floor_ns} ns)")
            self._sync(rank, batch.sync)

    # -- mirrored ranks ------------------------------------------------------------------------

    def _check_classes(self, rank: _Rank, batch: Batch) -> None:
        """A live rank's groups must fit the grid, and a witness's GPU work must match its
        representative's; else the run starts again with what was learned
        (:class:`RegroupRanks`)."""
        classes = self._classes
        for op in batch.ops:
            if isinstance(op, Collective):
                group = tuple(sorted(op.ranks))
                if group not in self._groups:
                    self._groups.add(group)
                    if not classes.fits(group):
                        raise RegroupRanks(f"rank {rank.rank} issued {op.op} on ranks "
                                           f"{list(op.ranks)}, a group the grid "
                                           f"{classes.outer} x {classes.replicas} x "
                                           f"{classes.inner} does not fit",
                                           frozenset(self._groups))
        check = self._witness_checks.get(rank.rank)
        if check is None:
            return
        problem = check.ops(rank.rank, batch.ops)
        if problem is not None:
            raise RegroupRanks(problem, frozenset(self._groups), wrong=classes)

    def _issue(self, rank: int, op: Collective) -> Member:
        """A rank's stream has the collective queued: its share, and its mirrors' shares,
        which are ready when its own is."""
        member = self._matcher.issue(rank, op)
        for mirror in self._ranks[rank].mirrors:
            assert mirror.mirror is not None
            member.followers.append(self._matcher.issue(mirror.rank,
                                                        mirror.mirror.collective(op)))
            mirror.collectives += 1
            self._counts["mirrored_collectives"] += 1
        return member

    def _update_values(self, rank: _Rank, update: ValueUpdate) -> None:
        """A live rank's late input values, also its mirrors'."""
        self._matcher.update_values(rank.rank, update.value_id, update.data)
        for mirror in rank.mirrors:
            assert mirror.mirror is not None
            self._matcher.update_values(mirror.rank, update.value_id,
                                        mirror.mirror.late_values(update))

    def _count_op(self, rank: _Rank, op: Kernel | EventRecord | StreamWait | Collective) -> None:
        counts = self._counts
        counts["ops"] += 1
        if isinstance(op, Kernel):
            counts["kernels"] += 1
            if self._coverage is not None:
                self._coverage.record(op.name, op.source, op.duration_ns)
        elif isinstance(op, EventRecord):
            counts["event_records"] += 1
        elif isinstance(op, StreamWait):
            counts["stream_waits"] += 1
        else:
            counts["collective_ops"] += 1
            rank.collectives += 1

    def _values_ready(self, rank: int, value_id: int, values: "np.ndarray | None") -> None:
        """A collective's output values for ``rank``: sent at once (outside virtual time)."""
        self._counts["value_deliveries"] += 1
        self._send(self._ranks[rank], ValueDelivery(((value_id, values),)))

    def _send(self, rank: _Rank, message: Reply | ValueDelivery) -> None:
        if rank.conn is None:  # a mirror wants no values
            return
        if rank.state is _State.FINISHED:
            try:  # a rank that exited may still wait for values it owes others
                rank.conn.send(message)
            except OSError:
                pass
            return
        try:
            rank.conn.send(message)
        except OSError:
            raise RankCrashed(rank.rank, "the rank's process went away while it waited for a "
                                         "reply") from None

    # -- host syncs ---------------------------------------------------------------------------

    def _sync(self, rank: _Rank, sync: Sync) -> None:
        rank.token += 1
        token = rank.token
        device = rank.device
        if sync.kind == "query":
            self._counts["queries"] += 1
            event = device.event(sync.target)
            if event is None or event.time_ns is not None:
                self._send(rank, Reply(sync.at_ns, int(event is None
                                                        or (event.time_ns or 0) <= sync.at_ns)))
                return
            rank.state, rank.sync = _State.QUERYING, sync
            event.then(lambda time_ns: self._query_known(rank, token, time_ns))
            return
        self._counts["syncs"] += 1
        if sync.kind == "device":
            target = device.device_done()
        elif sync.kind == "stream":
            target = device.stream_done(sync.target)
        elif sync.kind == "event":
            target = device.event(sync.target) or Completion(sync.at_ns)
        else:
            raise SimulationError(f"rank {rank.rank} sent a sync of unknown kind {sync.kind!r}; "
                                  "expected device, stream, event or query")
        rank.sync = sync
        if target.time_ns is not None:
            self._answer(rank, target.time_ns)
        else:
            rank.state = _State.BLOCKED
            target.then(lambda time_ns: self._wake(rank, token, time_ns))

    def _wake(self, rank: _Rank, token: int, time_ns: int) -> None:
        if rank.token == token and rank.state is _State.BLOCKED:
            rank.state = _State.RUNNING
            self._answer(rank, time_ns)

    def _answer(self, rank: _Rank, time_ns: int) -> None:
        """Release a sync: the rank's clock moves to ``max(clock, time_ns)``."""
        sync = rank.sync
        assert sync is not None
        rank.promise_ns = max(rank.promise_ns, time_ns)
        self._released = True
        if time_ns > sync.at_ns:
            rank.blocked_ns += time_ns - sync.at_ns
            self._blocked.append(BlockedSpan(rank.rank, sync.kind, sync.target, sync.at_ns,
                                             time_ns))
        self._send(rank, Reply(time_ns))

    def _query_known(self, rank: _Rank, token: int, time_ns: int) -> None:
        if rank.token == token and rank.state is _State.QUERYING:
            assert rank.sync is not None
            self._answer_query(rank, time_ns <= rank.sync.at_ns)

    def _answer_query(self, rank: _Rank, completed: bool) -> None:
        assert rank.sync is not None
        rank.state = _State.RUNNING
        self._released = True
        self._send(rank, Reply(rank.sync.at_ns, int(completed)))

    def _answer_due_queries(self) -> bool:
        """Queries whose time the simulation has reached without the event completing read 0
        (NB: an event completing exactly at the query instant also reads as pending)."""
        horizon_ns = self._horizon()
        due = [rank for rank in self._live if rank.state is _State.QUERYING
               and rank.sync is not None and rank.sync.at_ns <= horizon_ns]
        for rank in due:
            self._answer_query(rank, False)
        return bool(due)

    # -- simulation ---------------------------------------------------------------------------

    def _horizon(self) -> int:
        """Min over running ranks' promises (querying ranks at their query time)."""
        horizon_ns = FOREVER_NS
        for rank in self._live:
            if rank.state is _State.RUNNING:
                horizon_ns = min(horizon_ns, rank.promise_ns)
            elif rank.state is _State.QUERYING and rank.sync is not None:
                horizon_ns = min(horizon_ns, rank.sync.at_ns)
        return horizon_ns

    def _settle(self) -> None:
        """Simulate everything below the horizon, answering syncs and queries on the way."""
        while True:
            self._process()
            if not self._answer_due_queries():
                return

    def _process(self) -> None:
        """Simulate the instants below the horizon in time order: at each, the devices' items
        that start then (lower rank first), then the network's events."""
        scheduler = self._scheduler
        clock = self._clock
        self._released = False
        horizon_ns = self._horizon()
        while True:
            if self._released:  # a sync answered on the way: the horizon may have come down
                self._released = False
                horizon_ns = self._horizon()
            device_ns = clock.next_ns()
            network_ns = scheduler.next_ns()
            if device_ns is not None and device_ns < horizon_ns and (
                    network_ns is None or device_ns <= network_ns):
                clock.wake_next()
                continue
            if network_ns is None or network_ns >= horizon_ns:
                break
            limit_ns = min(horizon_ns, FOREVER_NS if device_ns is None else device_ns) - 1
            finished = scheduler.step(limit_ns)
            if finished is None:  # nothing happens in the network up to the limit
                if device_ns is None or device_ns >= horizon_ns:
                    if horizon_ns >= FOREVER_NS:
                        raise SimulationError("the network backend stalled: flows are pending "
                                              "but none ever completes")
                    break
                clock.wake_next()  # the devices' instant comes first
                continue
            clock.settled = scheduler.now_ns + 1
            for done in finished:
                self._finish_collective(done)
        if horizon_ns < FOREVER_NS:
            clock.settled = horizon_ns  # a rank answered at an instant may still send ops then

    def _start_collective(self, collective: PendingCollective) -> None:
        """Every member is ready: plan it and hand it to the scheduler at its start time."""
        request = collective.request(self._gpus)
        dag = FlowDag(algorithm="local") if request is None else self._plan(request, collective)
        ticket = self._scheduler.submit(dag, collective.start_ns, collective.key)
        self._running[ticket] = (collective, dag)
        self._labels[ticket] = (collective.describe(), collective.key)

    def _plan(self, request: CollectiveRequest, collective: PendingCollective) -> FlowDag:
        """The NCCL model's DAG, cached: a training step repeats the same collectives (the
        scheduler only reads a DAG, so one can run many times, even concurrently)."""
        dag = self._plans.get(request)
        if dag is None:
            try:
                dag = plan_collective(request, self._system, self._nccl,
                                      nccl_efficiency=self._nccl_efficiency)
            except ValueError as error:
                raise SimulationError(f"{collective.describe()}: {error}") from None
            if len(self._plans) >= _PLAN_CACHE_SIZE:
                del self._plans[next(iter(self._plans))]  # the oldest
            self._plans[request] = dag
        return dag

    def _finish_collective(self, done: DagDone) -> None:
        collective, dag = self._running.pop(done.ticket)
        self._matcher.finish(collective)
        self._counts["collectives"] += 1
        # Its steps couple the members: it ends when the one slowed most by its GPU's kernels does.
        end_ns = max(self._timed(member.rank).device.collective_end_ns(collective.start_ns,
                                                                       done.end_ns)
                     for member in collective.members.values())
        record = CollectiveRecord(op=collective.op_name, group=collective.group,
                                  seq=collective.seq, bytes=collective.nbytes,
                                  ranks=collective.ranks, start_ns=collective.start_ns,
                                  end_ns=end_ns, algorithm=dag.algorithm, protocol=dag.protocol,
                                  channels=dag.channels, flows=len(dag.flows))
        self._records.append(record)
        for key in sorted(collective.members):
            member = collective.members[key]
            assert member.ready_ns is not None
            if self._ranks[member.rank].conn is not None:  # mirrors' spans are their reps'
                self._member_spans.append(CollectiveSpan(
                    member.rank, member.op.stream, member.op.op, member.ready_ns, end_ns, record))
            member.done.resolve(end_ns)

    def _timed(self, rank: int) -> _Rank:
        """The rank whose GPU timeline ``rank`` has: its own, or a mirror's representative's
        (whose kernels it runs at the same times, slowing its collectives alike)."""
        mirror = self._ranks[rank].mirror
        return self._ranks[rank if mirror is None else mirror.representative]

    # -- reports ----------------------------------------------------------------------------

    def _report(self, headline: str) -> str:
        lines = []
        for rank in self._live:
            if rank.state is _State.FINISHED:
                line = f"rank {rank.rank}: exited at {rank.promise_ns} ns"
            elif rank.state is _State.RUNNING:
                line = f"rank {rank.rank}: running at {rank.promise_ns} ns"
            else:
                sync = rank.sync
                assert sync is not None
                what = "device" if sync.kind == "device" else f"{sync.kind} {sync.target}"
                line = f"rank {rank.rank}: blocked since {sync.at_ns} ns in sync({what})"
            blockers = rank.device.blockers()
            if blockers:
                line += "; " + "; ".join(blockers)
            lines.append(line)
        mirrored = len(self._ranks) - len(self._live)
        if mirrored:
            lines.append(f"{mirrored} more ranks mirror theirs ({self._classes.describe()})")
        return deadlock_report(headline, lines, self._matcher.incomplete())

    def _result(self) -> LiveResult:
        ranks = []
        for rank in self._ranks:
            timed = self._timed(rank.rank)
            ranks.append(RankResult(
                rank=rank.rank, gpu=rank.gpu, clock_ns=timed.promise_ns,
                gpu_end_ns=timed.device.gpu_end_ns, blocked_ns=timed.blocked_ns,
                kernels=timed.device.kernels, collectives=rank.collectives,
                script_cpu_ns=timed.stats.script_cpu_ns,
                simulator_cpu_ns=timed.stats.simulator_cpu_ns,
                peak_memory_bytes=timed.stats.peak_memory_bytes,
                peak_reserved_bytes=timed.stats.peak_reserved_bytes,
                overlap_slowed_kernels=timed.device.slowed_kernels,
                overlap_extra_ns=timed.device.overlap_extra_ns,
                host_speed_factor=timed.stats.host_speed_factor,
                host_time=timed.stats.host_time))
        kernels = sorted((span for rank in self._ranks for span in rank.device.spans),
                         key=lambda s: (s.rank, s.stream, s.start_ns, s.end_ns, s.name))
        flows = [NetworkFlow(f.src, f.dst, f.nbytes, f.start_ns, f.end_ns, *self._labels[f.ticket])
                 for f in self._scheduler.flows]
        counts = dict(sorted(self._counts.items()))
        counts["flows"] = sum(record.flows for record in self._records)
        return LiveResult(
            ranks=ranks,
            collectives=sorted(self._records, key=lambda r: (r.start_ns, r.end_ns, r.group,
                                                             r.seq, r.ranks)),
            kernels=kernels,
            collective_spans=sorted(self._member_spans,
                                    key=lambda s: (s.rank, s.stream, s.ready_ns, s.end_ns)),
            blocked=sorted(self._blocked, key=lambda s: (s.rank, s.start_ns)),
            flows=sorted(flows, key=lambda f: (f.start_ns, f.end_ns, f.src, f.dst, f.nbytes)),
            counts=counts,
            network=self._backend.stats(),
            classes=self._classes if self._classes.deduplicated else None,
            scaled_kernel_ns={rank: self._ranks[rank].scaled_extra_ns
                              for rank in sorted(self._kernel_scale)},
        )


def _check_scaled_ranks(kernel_scale: Mapping[int, float], classes: RankClasses) -> None:
    """A rank whose kernels are scaled runs on its own timeline: it may not be a mirror (which
    takes its representative's) nor a representative others mirror."""
    mirrors = classes.mirrors()
    followed = Counter(mirrors.values())
    for rank in sorted(kernel_scale):
        if not 0 <= rank < classes.world:
            raise SimulationError(f"kernel_scale names rank {rank}, but there are ranks 0 to "
                                  f"{classes.world - 1}")
        if rank in mirrors:
            role = f"mirrors rank {mirrors[rank]}'s timeline"
        elif followed[rank]:
            role = f"lends its timeline to {followed[rank]} mirrored ranks"
        else:
            continue
        raise SimulationError(
            f"slow_gpu slows rank {rank}, which {role} under rank deduplication "
            f"({classes.describe()}); a slowed rank needs a GPU timeline of its own: record "
            "the run with simulation.dedup: off, then replay it")
