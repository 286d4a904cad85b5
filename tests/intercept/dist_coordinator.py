"""An in-process stand-in for the coordinator, for the distributed-side tests.

It reads one rank's connection in a thread, keeps every batch, and answers each sync with
``Reply(time_ns=sync.at_ns + reply_delay_ns, value=1)``, so a test knows when the clock lands.
"""

import threading
from multiprocessing import Pipe
from multiprocessing.connection import Connection

from hwmodel.catalogue import lookup_gpu
from hwmodel.compute import CostSource, KernelCost, KernelSpec
from intercept.host_time.clock import VirtualClock
from intercept.process.client import CoordinatorClient
from intercept.runtime import RankRuntime
from wire.messages import Batch, Op, Reply

KERNEL_NS = 10_000
"""Duration the stand-in compute model gives every kernel."""


def kernel_cost(spec: KernelSpec) -> KernelCost:
    return KernelCost(KERNEL_NS, CostSource.MEASURED)


class FakeCoordinator:
    """Answers one rank; ``batches`` and ``ops`` are what it received, in order, and
    ``messages`` everything (batches and value updates)."""

    def __init__(self, conn: Connection, reply_delay_ns: int = 1_000_000) -> None:
        self.conn = conn
        self.reply_delay_ns = reply_delay_ns
        self.batches: list[Batch] = []
        self.messages: list[object] = []
        self.received = threading.Condition()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def ops(self) -> list[Op]:
        with self.received:
            return [op for batch in self.batches for op in batch.ops]

    def wait_for_batches(self, count: int, timeout_s: float = 5.0) -> None:
        with self.received:
            if not self.received.wait_for(lambda: len(self.batches) >= count, timeout_s):
                raise AssertionError(f"got {len(self.batches)} batches, expected {count}")

    def join(self, timeout_s: float = 5.0) -> None:
        self._thread.join(timeout_s)

    def _serve(self) -> None:
        while True:
            try:
                batch = self.conn.recv()
            except (EOFError, OSError):
                return
            with self.received:
                self.messages.append(batch)
                if isinstance(batch, Batch):
                    self.batches.append(batch)
                self.received.notify_all()
            if not isinstance(batch, Batch):
                continue
            if batch.sync is not None:
                self.conn.send(Reply(batch.sync.at_ns + self.reply_delay_ns, value=1))
            if batch.exit is not None:
                return


def make_runtime(*, rank: int = 0, world_size: int = 1, op_cost_ns: int | None = 1_000,
                 heartbeat: bool = False, **client_kwargs: object,
                 ) -> tuple[RankRuntime, FakeCoordinator]:
    """A runtime wired to a :class:`FakeCoordinator` (reproducible clock by default)."""
    ours, theirs = Pipe()
    clock = VirtualClock(epoch_ns=0, op_cost_ns=op_cost_ns)
    client = CoordinatorClient(ours, clock, **client_kwargs)  # type: ignore[arg-type]
    runtime = RankRuntime(rank=rank, world_size=world_size, local_rank=rank,
                          local_world_size=world_size, gpu=lookup_gpu("h100"), clock=clock,
                          client=client, kernel_cost=kernel_cost)
    if heartbeat:
        client.start()
    return runtime, FakeCoordinator(theirs)
