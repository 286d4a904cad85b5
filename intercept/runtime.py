"""The seam between the fake device and the distributed side inside one rank process.

The fake CUDA device (``intercept.fake_mode`` and friends) reports what the script does on the
GPU through :class:`RankRuntime`: kernels, events, stream waits, host syncs. The process-group
backend (``intercept.process_group``) reports collectives. The runtime stamps each with the
rank's :class:`~intercept.clock.VirtualClock`, charges the modelled CPU launch cost, and hands it
to the :class:`~intercept.client.CoordinatorClient`.

Collectives run on the process group's own stream, as ProcessGroupNCCL does: that stream first
waits for the caller's current stream, runs the collective, and records an event that the
caller's ``work.wait()`` later makes its stream wait for. Those communication streams get
negative ids (``-1, -2, ...`` in order of first use) so they can never collide with the
device's own stream ids (0 = default stream, then 1, 2, ...): one per process group for
collectives, and one per ordered ``(src, dst)`` pair for point-to-point, which is how NCCL
keeps sends and receives from blocking each other or the group's collectives.
"""

import itertools
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import ClassVar

import numpy as np

from intercept.client import CoordinatorClient, ValueSink
from intercept.clock import VirtualClock
from intercept.protocol import (Collective, EventRecord, Exit, Kernel, RankStats, StreamWait,
                                ValuePayload)
from phantora.cluster.catalogue import GpuSpec
from phantora.compute.model import KernelCost
from phantora.compute.spec import KernelSpec

KernelCostModel = Callable[[KernelSpec], KernelCost]
"""The compute model of the rank's GPU (``phantora.compute.ComputeModel.cost``)."""

KERNEL_LAUNCH_OVERHEAD_NS = 5_000
"""CPU time a real host spends on one kernel or collective beyond the script's Python call of
it: the binding and dispatcher (the fake device's own version of those is kept out of virtual
time, see ``intercept.clock``), PyTorch's CUDA-side bookkeeping and ``cudaLaunchKernel``.
Measured with torch 2.11 as host CPU per ``x.add_(y)`` on 16 floats (``scripts/
measure_host_ops.py``, ``scripts/data/host_ops/``) on four lent host instances: 9.6 us (an H100
host), 6.0 and 5.5 us (2xH200 hosts), 5.7 us (an H100 host); the median, 5.9 us, less the
~0.7-1.3 us the fake device still counts as the script's Python call. NB: one figure for every
op (a small ``torch.mm`` costs 13-18 us there); a per-op host model is the compute model's
job."""

COLLECTIVE_LAUNCH_OVERHEAD_NS = 20_000
"""The same for issuing a collective (ProcessGroupNCCL's work object, its CUDA events and
stream waits, NCCL's enqueue): measured on the lent 2xH200 host with torch 2.11, async
``all_reduce`` / ``reduce_scatter_tensor`` / ``all_gather_into_tensor`` took 26.7-28.3 us of
host time per call against 6.0 us for ``x.add_(y)`` (``scripts/measure_host_ops.py``, data in
``scripts/data/host_ops/``); of that, c10d's Python wrapper (~6-8 us) runs for real in a
simulated rank and is counted as the script's."""

_P2P_OPS = frozenset({"send", "recv"})
_CommKey = str | tuple[str, int, int]
"""A group's collectives, or one ordered (src, dst) pair of its point-to-point messages."""


class RankRuntime:
    """Everything one rank process reports to the coordinator; one per rank, see the module doc."""

    _current: ClassVar["RankRuntime | None"] = None

    def __init__(self, *, rank: int, world_size: int, local_rank: int, local_world_size: int,
                 gpu: GpuSpec, clock: VirtualClock, client: CoordinatorClient,
                 kernel_cost: KernelCostModel,
                 launch_overhead_ns: int = KERNEL_LAUNCH_OVERHEAD_NS) -> None:
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.local_world_size = local_world_size
        self.gpu = gpu
        self.clock = clock
        self._client = client
        self._kernel_cost = kernel_cost
        self._launch_overhead_ns = launch_overhead_ns
        self._events = itertools.count(1)
        self._comm_lock = threading.Lock()
        self._comm_streams: dict[_CommKey, int] = {}
        """Group (collectives) or (group, src, dst) (p2p) -> its stream id."""
        self._seqs: dict[_CommKey, int] = {}

    def set_value_sink(self, sink: ValueSink) -> None:
        """Where the values of this rank's collectives go (the fake mode's value store)."""
        self._client.set_value_sink(sink)

    def send_values(self, value_id: int, data: np.ndarray | None) -> None:
        """Final input values of a collective whose payload was sent as pending."""
        self._client.send_values(value_id, data)

    @staticmethod
    def current() -> "RankRuntime | None":
        """The runtime of this rank process, or ``None`` outside a simulated rank."""
        return RankRuntime._current

    def make_current(self) -> None:
        """Make this the runtime :meth:`current` returns (done once by ``rank_main``)."""
        RankRuntime._current = self

    def excluded(self) -> AbstractContextManager[None]:
        """CPU time spent inside is the simulator's, not the script's (not in virtual time)."""
        return self.clock.excluded()

    def kernel(self, spec: KernelSpec, stream: int) -> None:
        """Record a kernel launch at the current clock; charges the modelled launch overhead
        to the clock and the compute model's duration to the GPU stream."""
        with self.clock.excluded():
            cost = self._kernel_cost(spec)
            self._launch()
            self._client.add(Kernel, stream=stream, duration_ns=cost.duration_ns, name=spec.name,
                             flops=spec.flops, bytes=spec.bytes, source=cost.source.value)

    def new_event(self) -> int:
        """A fresh event id of this rank."""
        return next(self._events)

    def record_event(self, event: int, stream: int) -> None:
        """``event`` completes when everything queued on ``stream`` so far has."""
        self.clock.tick()
        self._client.add(EventRecord, event=event, stream=stream)

    def wait_event(self, stream: int, event: int) -> None:
        """Later work on ``stream`` starts after ``event`` completes (the CPU does not block)."""
        self.clock.tick()
        self._client.add(StreamWait, stream=stream, event=event)

    def sync(self, kind: str, target: int = 0) -> int:
        """Block until done on the GPU (``"device" | "stream" | "event" | "query"``); returns the
        completion time (or 0/1 for query) and moves the clock."""
        self.clock.tick()
        reply = self._client.sync(kind, target)
        return reply.value if kind == "query" else reply.time_ns

    def collective(self, *, group: str, ranks: tuple[int, ...], op: str, nbytes: int,
                   dtype_bytes: int, stream: int, root: int = 0,
                   splits: tuple[int, ...] | None = None,
                   values: ValuePayload | None = None) -> int:
        """Issue a collective on the group's stream (which first waits for `stream`, the
        caller's current stream); returns an event id that completes with it.

        ``seq`` counts per group; for ``send``/``recv`` (``ranks`` = ``(src, dst)``) per group and
        ordered pair, so the two sides of each message get the same number (NCCL matches p2p
        within a communicator, in order).
        """
        key: _CommKey = (group, ranks[0], ranks[1]) if op in _P2P_OPS else group
        with self.clock.excluded(), self._comm_lock:  # DDP hooks issue from autograd threads
            seq = self._seqs.get(key, 0)
            self._seqs[key] = seq + 1
            comm_stream = self._comm_streams.get(key)
            if comm_stream is None:
                comm_stream = self._comm_streams[key] = -1 - len(self._comm_streams)
            ready = self.new_event()
            done = self.new_event()
            self._launch(COLLECTIVE_LAUNCH_OVERHEAD_NS)
            add = self._client.add
            add(EventRecord, event=ready, stream=stream)
            add(StreamWait, stream=comm_stream, event=ready)
            add(Collective, stream=comm_stream, group=group, ranks=ranks, seq=seq, op=op,
                nbytes=nbytes, dtype_bytes=dtype_bytes, root=root, splits=splits, values=values)
            add(EventRecord, event=done, stream=comm_stream)
            # Out at once: the other ranks' matching of this collective must not wait on us.
            self._client.flush()
            return done

    def finish(self, status: int, traceback: str = "", peak_memory_bytes: int = 0,
               peak_reserved_bytes: int = 0) -> None:
        """Send the last ops and the :class:`~intercept.protocol.Exit` with the rank's own
        measurements; nothing may follow."""
        script_ns, simulator_ns = self.clock.cpu_split_ns()
        self._client.close(Exit(status, traceback, RankStats(
            script_ns, simulator_ns, peak_memory_bytes, peak_reserved_bytes,
            round(self.clock.speed_ratio.factor, 4))))

    def _launch(self, overhead_ns: int | None = None) -> None:
        """A launch's CPU side: the modelled overhead (a kernel's unless ``overhead_ns`` is
        given), plus the op's fixed reproducible cost."""
        self.clock.tick()
        self.clock.charge(self._launch_overhead_ns if overhead_ns is None else overhead_ns)
