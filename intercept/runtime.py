"""The seam between the fake device and the distributed side inside one rank process.

The fake CUDA device (``intercept.dispatch.fake_mode`` and friends) reports what the script does on
the GPU through :class:`RankRuntime`: kernels, events, stream waits, host syncs. The process-group
backend (``intercept.distributed.process_group``) reports collectives. The runtime stamps each with
the rank's :class:`~intercept.host_time.clock.VirtualClock`, charges what the reference host's CPU
pays for the operation (``intercept.host_time.host_cost``: per op family, per collective; in counted
mode the autograd layer's work too), counts the calling thread's Python work (counted mode,
``intercept.host_time.python_work``) or replaces the script's measured CPU since the thread's
previous operation by a robust estimate (``intercept.host_time.residual``), and hands it to the
:class:`~intercept.process.client.CoordinatorClient`.

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
from dataclasses import replace
from typing import ClassVar

import numpy as np

from hwmodel.catalogue import GpuSpec
from hwmodel.compute.model import KernelCost
from hwmodel.compute.spec import Family, KernelSpec
from intercept.host_time.clock import VirtualClock
from intercept.host_time.cudnn_rnn_host import layer_steps
from intercept.host_time.gemm_heuristic import GemmShapeCache, load_kernel_map
from intercept.host_time.host_cost import CUBLAS_GEMMS, HostCostTable, load_table
from intercept.host_time.host_spread import HostSpread, load_host_spread
from intercept.host_time.python_work import CountedWork
from intercept.host_time.residual import ResidualSmoother
from intercept.process.client import CoordinatorClient, ValueSink
from wire.messages import Collective, EventRecord, Exit, Kernel, RankStats, StreamWait, ValuePayload
from wire.ops import P2P_OPS, IssuedOp

KernelCostModel = Callable[[KernelSpec], KernelCost]
"""The compute model of the rank's GPU (``hwmodel.compute.ComputeModel.cost``)."""

_CommKey = str | tuple[str, int, int]
"""A group's collectives, or one ordered (src, dst) pair of its point-to-point messages."""


class RankRuntime:
    """Everything one rank process reports to the coordinator; one per rank, see the module doc."""

    _current: ClassVar["RankRuntime | None"] = None

    def __init__(self, *, rank: int, world_size: int, local_rank: int, local_world_size: int,
                 gpu: GpuSpec, clock: VirtualClock, client: CoordinatorClient,
                 kernel_cost: KernelCostModel, host_costs: HostCostTable | None = None,
                 residual: ResidualSmoother | None = None,
                 counted_work: CountedWork | None = None) -> None:
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.local_world_size = local_world_size
        self.gpu = gpu
        self.clock = clock
        self._client = client
        self._kernel_cost = kernel_cost
        self.host_costs = load_table() if host_costs is None else host_costs
        self._gemm_shapes = GemmShapeCache(self.host_costs.gemm, load_kernel_map(gpu.name))
        self._residual = residual
        self._counted_work = counted_work
        self._autograd_node = threading.local()
        """Per thread, the backward node whose ops it issued last (counted mode)."""
        self._steps: list[tuple[int, int, int, int, int, int, int]] = []
        self._step_mark = (0, 0, 0, 0, 0, 0)
        self._subclass_ns = 0
        """Table-charged ns of tensor-subclass dispatches so far (counted mode)."""
        self._ops_ns = 0
        """Table-charged ns of intercepted ops' own rows and families so far (not cuBLAS's
        heuristic, a compiled launcher's cost, the layers above an op)."""
        self._node_ns = 0
        """Table-charged ns of the autograd engine's nodes so far (counted mode)."""
        self._events = itertools.count(1)
        self._comm_lock = threading.Lock()
        self._comm_streams: dict[_CommKey, int] = {}
        """Group (collectives) or (group, src, dst) (p2p) -> its stream id."""
        self._seqs: dict[_CommKey, int] = {}
        self._host_spread: HostSpread = load_host_spread()
        self._work_at_last_collective_ns: int | None = None
        """The rank's host work (table, Python, fixed) when its previous collective call ended."""
        self._lockstep_ns = 0
        """The expected waits for the slowest host charged so far (``summary.json``)."""

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

    def kernel(self, spec: KernelSpec, stream: int, tensors: int = 1,
               launch_overhead_ns: int | None = None, host_key: str | None = None) -> None:
        """Record a kernel launch at the current clock; charges the op's host cost to the clock
        (a cuBLAS product of a shape new to this process pays cuBLAS's heuristic query too) and
        the compute model's duration to the GPU stream. ``tensors``: a foreach op's list
        length (its host cost grows with it); ``launch_overhead_ns`` replaces the table's cost
        where given (a compiled graph's launcher; 0 for a kernel of a replayed CUDA graph);
        ``host_key`` the host-cost table's key where it is not the op's name. A cuDNN recurrent
        call is charged per time step it enqueues, after its kernel is recorded
        (``intercept.host_time.cudnn_rnn_host``)."""
        with self.clock.excluded():
            cost = self._kernel_cost(spec)
            name = spec.name.removeprefix("aten::")
            recurrent = spec.family is Family.RNN and launch_overhead_ns is None
            if recurrent:
                seq, _batch, _input, _hidden, layers, directions = spec.dims
                host_ns = self.host_costs.cudnn_rnn_ns(
                    backward=name.endswith("_backward"),
                    layer_steps=layer_steps(spec.variant, spec.dtype, seq, layers, directions))
                self._ops_ns += host_ns
            elif launch_overhead_ns is None:
                host_ns = self.host_costs.op_ns(host_key or name, launches=True, tensors=tensors)
                self._ops_ns += host_ns
                if name in CUBLAS_GEMMS and len(spec.dims) == 4:
                    host_ns += self._gemm_shapes.first_seen_ns(
                        (name, spec.dtype, spec.variant, *spec.dims))
            else:
                host_ns = launch_overhead_ns
            self._op_boundary(name)
            if not recurrent:
                self.clock.charge_table(host_ns)
            self._client.add(Kernel, stream=stream, duration_ns=cost.duration_ns, name=spec.name,
                             flops=spec.flops, bytes=spec.bytes, source=cost.source.value)
            if recurrent:
                # cuDNN enqueues the steps while the GPU runs them: the GPU may start on the
                # call's work as soon as the host starts enqueueing it
                self.clock.charge_table(host_ns)

    def charge_host(self, duration_ns: int) -> None:
        """Modelled CPU time of the script's host beyond what it runs here (a compiled graph's
        launcher, its code generation)."""
        self.clock.charge(duration_ns)

    def host_op(self, name: str) -> None:
        """An intercepted op that launches nothing (a view, an allocation): its host cost."""
        with self.clock.excluded():
            name = name.removeprefix("aten::")
            host_ns = self.host_costs.op_ns(name, launches=False)
            self._ops_ns += host_ns
            self._host(name, host_ns)

    @property
    def counts_work(self) -> bool:
        """Counted mode: the script's Python is counted, and C++ work that only measured CPU
        time would see is charged (:meth:`autograd`, real CPU ops)."""
        return self._counted_work is not None

    def autograd(self, *, recorded: bool, node: object | None) -> None:
        """Counted mode: the autograd layer's C++ around an intercepted op, which no count
        sees: recording it for backward (``recorded``), and the engine's work for a backward
        ``node`` (the one running the op on this thread, ``None`` outside backward) the first
        time one of its ops comes. Nothing otherwise (measured CPU time holds that work)."""
        if self._counted_work is None:
            return
        costs = self.host_costs.layers_ns
        cost_ns = costs["autograd_record"] if recorded else 0
        if node is not None and node is not getattr(self._autograd_node, "node", None):
            self._autograd_node.node = node
            cost_ns += costs["autograd_node"]
            self._node_ns += costs["autograd_node"]
        if cost_ns:
            with self.clock.excluded():
                self.clock.charge_table(cost_ns)

    def tensor_subclass(self) -> None:
        """Counted mode: a tensor subclass (DTensor) dispatches an op the fake mode deferred to
        it; its dispatch beyond the op on its local tensors is charged from the table."""
        if self._counted_work is not None:
            with self.clock.excluded():
                cost_ns = self.host_costs.layers_ns["tensor_subclass"]
                self.clock.charge_table(cost_ns)
                self._subclass_ns += cost_ns

    def step_done(self) -> None:
        """An optimizer step ended: remember its host time split (``summary.json``)."""
        with self.clock.excluded():
            split = self.clock.host_split()
            mark = (split.table_ns, split.residual_ns, self._subclass_ns, self._node_ns,
                    self._ops_ns, self._cold_python_ns())
            self._steps.append((self.clock.now_ns(),
                                *(now - then for now, then in zip(mark, self._step_mark))))
            self._step_mark = mark

    def _cold_python_ns(self) -> int:
        """Of the counted Python so far, what was charged at the cold weights (0 unless
        counted mode)."""
        return 0 if self._counted_work is None else self._counted_work.cold_ns()

    def new_event(self) -> int:
        """A fresh event id of this rank."""
        return next(self._events)

    def record_event(self, event: int, stream: int) -> None:
        """``event`` completes when everything queued on ``stream`` so far has."""
        self._sync_call_host("record_event")
        self._client.add(EventRecord, event=event, stream=stream)

    def wait_event(self, stream: int, event: int) -> None:
        """Later work on ``stream`` starts after ``event`` completes (the CPU does not block)."""
        self.clock.tick()
        self._client.add(StreamWait, stream=stream, event=event)

    def sync(self, kind: str, target: int = 0) -> int:
        """Block until done on the GPU (``"device" | "stream" | "event" | "query"``); returns the
        completion time (or 0/1 for query) and moves the clock."""
        if self._residual is not None:
            with self.clock.excluded():
                self.clock.correct(self._residual.boundary(f"sync:{kind}"))
        self._sync_call_host(kind)
        reply = self._client.sync(kind, target)
        return reply.value if kind == "query" else reply.time_ns

    def _sync_call_host(self, call: str) -> None:
        """The host's cost of a call that waits on or marks the GPU (``sync_ns``), before any
        wait, in counted and measured mode alike: the stand-ins' own Python runs in the
        simulator's time in both (reproducible mode charges its fixed cost per op)."""
        self.clock.tick()
        if not self.clock.reproducible:
            with self.clock.excluded():
                if self._counted_work is not None:
                    self._counted_work.count_this_thread()
                self.clock.charge_table(self.host_costs.sync_ns[call])

    def collective(self, *, group: str, ranks: tuple[int, ...], op: IssuedOp, nbytes: int,
                   dtype_bytes: int, stream: int, root: int = 0,
                   splits: tuple[int, ...] | None = None,
                   recv_splits: tuple[int, ...] | None = None,
                   values: ValuePayload | None = None, blocking: bool = False) -> int:
        """Issue a collective on the group's stream (which first waits for `stream`, the
        caller's current stream); returns an event id that completes with it. ``blocking``:
        c10d's ``async_op=False``, which on a one-rank group costs the host less
        (:meth:`HostCostTable.collective_ns`).

        ``seq`` counts per group; for ``send``/``recv`` (``ranks`` = ``(src, dst)``) per group and
        ordered pair, so the two sides of each message get the same number (NCCL matches p2p
        within a communicator, in order).
        """
        key: _CommKey = (group, ranks[0], ranks[1]) if op in P2P_OPS else group
        with self.clock.excluded(), self._comm_lock:  # DDP hooks issue from autograd threads
            seq = self._seqs.get(key, 0)
            self._seqs[key] = seq + 1
            comm_stream = self._comm_streams.get(key)
            if comm_stream is None:
                comm_stream = self._comm_streams[key] = -1 - len(self._comm_streams)
            ready = self.new_event()
            done = self.new_event()
            self._collective_host(op, len(ranks), blocking)
            add = self._client.add
            add(EventRecord, event=ready, stream=stream)
            add(StreamWait, stream=comm_stream, event=ready)
            add(Collective, stream=comm_stream, group=group, ranks=ranks, seq=seq, op=op,
                nbytes=nbytes, dtype_bytes=dtype_bytes, root=root, splits=splits,
                recv_splits=recv_splits, values=values)
            add(EventRecord, event=done, stream=comm_stream)
            # Out at once: the other ranks' matching of this collective must not wait on us.
            self._client.flush()
            return done

    def finish(self, status: int, traceback: str = "", peak_memory_bytes: int = 0,
               peak_reserved_bytes: int = 0) -> None:
        """Send the last ops and the :class:`~wire.messages.Exit` with the rank's own
        measurements; nothing may follow."""
        script_ns, simulator_ns = self.clock.cpu_split_ns()
        split = replace(self.clock.host_split(), steps=tuple(self._steps),
                        subclass_ns=self._subclass_ns, autograd_node_ns=self._node_ns,
                        lockstep_wait_ns=self._lockstep_ns)
        self._client.close(Exit(status, traceback, RankStats(
            script_ns, simulator_ns, peak_memory_bytes, peak_reserved_bytes,
            round(self.clock.speed_ratio.factor, 4), split)))

    def _host(self, op: str, cost_ns: int) -> None:
        """An op's CPU side, in an excluded section: the script's CPU since the thread's last op
        is replaced by its robust estimate (measured mode) or the thread is counted from now on
        if it was not yet (counted mode), then the table's cost and the op's fixed reproducible
        cost are charged."""
        self._op_boundary(op)
        self.clock.charge_table(cost_ns)

    def _op_boundary(self, op: str) -> None:
        """The script's time up to an op's CPU side (see :meth:`_host`)."""
        if self._residual is not None:
            self.clock.correct(self._residual.boundary(op))
        if self._counted_work is not None:
            self._counted_work.count_this_thread()
        self.clock.tick()

    def _collective_host(self, op: str, group_size: int, blocking: bool = False) -> None:
        """A collective call's CPU side: on a group of two or more ranks its cost grows with
        the host work the rank did since its previous collective call ended (any thread, any
        group; time it spent waiting on the GPU does not make the call's code cold), and the
        rank waits the expected time for the group's slowest host after that work
        (``intercept.host_time.host_spread``)."""
        self._op_boundary(f"c10d:{op}")
        work_ns = self._host_work_ns()
        since = self._work_at_last_collective_ns
        work_since_ns = None if since is None else work_ns - since
        cost_ns = self.host_costs.collective_ns(op, group_size, work_since_ns, blocking=blocking)
        self.clock.charge_table(cost_ns)
        if work_since_ns is not None:
            wait_ns = self._host_spread.wait_ns(work_since_ns, group_size)
            self.clock.charge(wait_ns)
            self._lockstep_ns += wait_ns
        self._work_at_last_collective_ns = work_ns + cost_ns

    def _host_work_ns(self) -> int:
        """The rank's host work so far: table-charged, its Python, reproducible mode's fixed
        costs (not its waits)."""
        split = self.clock.host_split()
        return split.table_ns + split.residual_ns + split.fixed_ns
