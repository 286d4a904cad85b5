"""The packet-level network backend: inter-host flows simulated on ns-3.

The transport (``Ns3Config.transport``) builds the fabric and carries each flow as a message
on a connection keyed by ``(src, dst, tag)``, like an NCCL channel's: a TCP connection with
DCTCP (:mod:`phantora.network.ns3.tcp`) or an RDMA queue pair over a lossless RoCE fabric
(:mod:`phantora.network.ns3.roce`). This module keeps the backend contract, the stepping and
the counters common to both. Intra-host flows are refused: NVLink traffic belongs to another
model. A RoCE fabric that drops a packet or stays paused past its watchdog raises
:class:`~hwmodel.errors.BackendError` at once, naming the switch and ports.

Link failures (the ``failures`` argument, checked by
:func:`~phantora.network.failures.check_failures` before ns-3 sees them) are ns-3 events at
their ``at_ns``: the link leaves the routing and ECMP rehashes over the remaining next hops.
RoCE drains what was on the link (lossless); TCP loses it and retransmits (see
:mod:`phantora.network.ns3.roce` and :mod:`phantora.network.ns3.tcp`).

ns-3's simulator is a process-wide singleton, so only one backend may be open at a time;
``close()`` destroys the simulation and a new backend may then be created.
"""

import atexit
import time
import weakref
from collections.abc import Sequence
from typing import Any, Self

from hwmodel.errors import BackendError
from phantora.cluster.topology import Topology
from phantora.network.base import FlowDone, FlowId, GpuId, LinkFailure, NetworkStats
from phantora.network.failures import check_failures
from phantora.network.ns3 import loader
from phantora.network.ns3.config import Ns3Config
from phantora.network.ns3.fabric import Fabric, check_topology
from phantora.network.ns3.roce import RoceTransport
from phantora.network.ns3.tcp import TcpTransport

_MAX_TIME_NS = 2**62
"""Far below ns-3's int64 nanosecond clock limit, far above any simulated run."""

_open_backend: "weakref.ref[Ns3Backend] | None" = None


class Ns3Backend:
    """:class:`~phantora.network.base.NetworkBackend` backed by a packet-level ns-3 fabric."""

    _closed: bool

    def __init__(self, topology: Topology, config: Ns3Config,
                 failures: Sequence[LinkFailure] = ()) -> None:
        """``failures``: fabric or NIC links of ``topology`` that go down mid-run."""
        global _open_backend
        previous = _open_backend() if _open_backend is not None else None
        if previous is not None and not previous._closed:
            raise BackendError("another Ns3Backend is open in this process; close() it first "
                               "(ns-3's simulator is one per process)")
        self._closed = True  # until construction succeeds
        self._failures = check_failures(topology, failures, _MAX_TIME_NS)
        setup_start = time.process_time()
        self._config = config
        self._topology = topology
        lib = loader.load()
        self._ns3 = lib.ns3
        self._ns3.Simulator.Destroy()  # also frees a backend that was dropped without close()
        rng = self._ns3.RngSeedManager
        rng.SetSeed(self._config.seed)
        rng.SetRun(1)
        rng.ResetNextStreamIndex()
        check_topology(topology)
        transport = RoceTransport if self._config.transport == "roce" else TcpTransport
        self._transport: TcpTransport | RoceTransport | None = transport(lib, topology,
                                                                         self._config)
        self._fabric: Fabric | None = self._transport.fabric
        for failure in self._failures:
            self._fabric.helper.ScheduleLinkDown(self._fabric.link_index[failure.link],
                                                 failure.at_ns)
        self._log: Any = self._transport.log
        self._stepper: Any = lib.phantora.SimulationStepper
        self._stepper.Start()
        self._events = int(self._ns3.Simulator.GetEventCount())
        """ns-3 events processed, less the stepping's own Stop events (how often the engine
        stops the fabric depends on how far the ranks' messages have got, not the model)."""
        self._next_flow_id: FlowId = 0
        self._pending = 0
        self._bytes = 0
        self._run_cpu_s = 0.0
        self._setup_cpu_s = time.process_time() - setup_start
        self._final_stats: NetworkStats | None = None
        self._closed = False
        _open_backend = weakref.ref(self)

    # -- NetworkBackend -------------------------------------------------------------------
    def add_flow(self, src: GpuId, dst: GpuId, nbytes: int, start_ns: int, tag: int = 0) -> FlowId:
        fabric = self._require_open()
        now = self.now_ns()
        for name, gpu in (("src", src), ("dst", dst)):
            if gpu not in fabric.gpu_node:
                raise BackendError(f"add_flow: {name}={gpu} is not a GPU with a NIC in topology "
                                   f"{self._topology.name!r} (GPUs 0..{self._topology.num_gpus - 1})")
        if self._topology.same_host(src, dst):
            raise BackendError(f"add_flow: GPUs {src} and {dst} are on the same host; the ns-3 "
                               "backend simulates inter-host flows only")
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
            raise BackendError(f"add_flow: nbytes={nbytes!r}; expected an integer >= 1")
        if isinstance(start_ns, bool) or not isinstance(start_ns, int) or start_ns > _MAX_TIME_NS:
            raise BackendError(f"add_flow: start_ns={start_ns!r}; expected an integer <= "
                               f"{_MAX_TIME_NS}")
        if start_ns < now:
            raise BackendError(f"add_flow: start_ns={start_ns} is before now_ns()={now}; "
                               "flows cannot start in the past")
        flow_id = self._next_flow_id
        self._transport_of().send(src, dst, tag, flow_id, nbytes, start_ns)
        self._next_flow_id += 1
        self._pending += 1
        self._bytes += nbytes
        return flow_id

    def now_ns(self) -> int:
        self._require_open()
        return int(self._ns3.Simulator.Now().GetNanoSeconds())

    def next_event_ns(self) -> int | None:
        """The next ns-3 event's time (a completion cannot come earlier); ``None`` when idle."""
        self._require_open()
        if self._pending == 0:
            return None
        next_ns = int(self._stepper.NextEventNs())
        if next_ns < 0:
            raise self._stuck()
        return next_ns

    def advance_to(self, t_ns: int) -> list[FlowDone]:
        self._require_open()
        now = self.now_ns()
        if isinstance(t_ns, bool) or not isinstance(t_ns, int) or not now <= t_ns <= _MAX_TIME_NS:
            raise BackendError(f"advance_to: t_ns={t_ns!r}; expected an integer in "
                               f"[now_ns()={now}, {_MAX_TIME_NS}]")
        start = time.process_time()
        self._events += int(self._stepper.RunUntil(t_ns, self._log))
        self._run_cpu_s += time.process_time() - start
        if self._stepper.Aborted():
            raise BackendError(f"the {self._config.transport} fabric failed at "
                               f"{self.now_ns()} ns: {self._transport_of().failure()}")
        done = [FlowDone(int(c.id), int(c.endNs)) for c in self._log.GetCompletions()]
        self._log.Clear()
        self._pending -= len(done)
        if self._pending and not done and self._stepper.NextEventNs() < 0:
            raise self._stuck()
        return done

    def rates_gbps(self) -> dict[tuple[GpuId, GpuId, int], float]:
        """RoCE: each queue pair's current DCQCN sending rate by ``(src, dst, tag)``; empty for
        dctcp (TCP's rate is its window over the RTT, not a state)."""
        transport = self._transport_of()
        return transport.rates_gbps() if isinstance(transport, RoceTransport) else {}

    def stats(self) -> NetworkStats:
        if self._final_stats is not None:
            return self._final_stats
        transport = self._transport_of()
        return NetworkStats(
            backend="ns3",
            flows=self._next_flow_id,
            bytes=self._bytes,
            extra={
                "transport": self._config.transport,
                "events": self._events,
                **transport.extra(),
                **(transport.failure_extra() if self._failures else {}),
                "completed_flows": self._next_flow_id - self._pending,
                "simulated_ns": self.now_ns(),
                "setup_cpu_s": round(self._setup_cpu_s, 3),
                "run_cpu_s": round(self._run_cpu_s, 3),
            },
            hot_ports=transport.hot_ports(),
        )

    def close(self) -> None:
        """Destroy the ns-3 simulation; ``stats()`` keeps answering with the final counters."""
        if self._closed:
            return
        self._final_stats = self.stats()
        self._closed = True
        self._ns3.Simulator.Destroy()
        # Drop the C++ helpers now, while ns-3 is alive, not at interpreter teardown.
        self._transport_of().close()
        self._log = self._fabric = self._transport = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------
    def _require_open(self) -> Fabric:
        if self._closed or self._fabric is None:
            raise BackendError("this Ns3Backend is closed")
        return self._fabric

    def _transport_of(self) -> TcpTransport | RoceTransport:
        if self._transport is None:
            raise BackendError("this Ns3Backend is closed")
        return self._transport

    def _stuck(self) -> BackendError:
        return BackendError(f"{self._pending} flow(s) are pending but ns-3 has no events left; "
                            "they can never complete" + self._transport_of().stuck_detail())


@atexit.register
def _close_open_backend() -> None:
    """Tear ns-3 down before the interpreter unloads its libraries."""
    backend = _open_backend() if _open_backend is not None else None
    if backend is not None:
        backend.close()
