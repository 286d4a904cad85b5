"""The fork server: the process the coordinator's launcher (:mod:`launch.launcher`) starts by
this module's path, which prepares the fake CUDA device once and forks every rank from it.

``serve(control_fd, coordinator_pid)`` reads the :class:`~launch.spec.LaunchSpec` from the
control channel (:mod:`wire.control`), prepares once for all ranks (the fake device:
``intercept.dispatch.device.prepare``, shim, ``import torch``, patches; the process-group
backend; the compute model and the cuBLAS kernel map), answers ``Ready`` (or ``Failed``), then
forks one rank per ``Spawn`` (each runs :func:`intercept.process.rank_main.run_rank`) and
reports ``Spawned`` and ``RankExit`` until ``Shutdown`` or the coordinator's end closes.

It runs in its own POSIX session, dies with the coordinator (``PR_SET_PDEATHSIG``, killing
its ranks first) and reaps every descendant (a child subreaper), so no rank outlives the coordinator.
"""

import ctypes
import gc
import os
import signal
import sys
import time
import traceback
from contextlib import ExitStack
from multiprocessing.connection import Connection, wait

from intercept.process.rank_main import run_rank
from intercept.runtime import KernelCostModel
from launch.spec import LaunchSpec
from wire.control import Failed, RankExit, Ready, Report, Shutdown, Spawn, Spawned

ORPHAN_REAP_S = 2.0
"""How long the fork server reaps orphans (a rank's killed workers) before it exits."""

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


class _ForkServer:
    """Forks ranks on request, reaps every descendant, reports rank exits."""

    def __init__(self, control: Connection, spec: LaunchSpec) -> None:
        self.control = control
        self.spec = spec
        self.kernel_cost: KernelCostModel | None = None
        self.ranks: dict[int, int] = {}
        """pid -> rank of ranks still running."""
        self.pidfds: dict[int, int] = {}
        """pid -> pidfd, readable once the rank has exited."""
        self.patches = ExitStack()
        """Patches the server installs for its lifetime and its ranks'."""
        self.unspawned = dict(spec.rank_fds)
        """rank -> connection fd, for ranks not forked yet."""

    def prepare(self) -> None:
        """Once for all ranks: the fake device, the process-group backend, the compute model,
        the cuBLAS kernel map."""
        if not self.spec.fake_device:
            return
        from intercept.dispatch import device
        # Imports torch: not before. Only measured host time needs the CPU-time deductions
        # (counted and reproducible host time measure no CPU time: rank_main).
        device.prepare(self.spec.gpu, self.spec.gpus_per_host,
                       measure_deductions=not self.spec.counted and self.spec.op_cost_ns is None)
        # FakeTensorMode() imports torch._dynamo on first use: ~1 s of CPU in every rank if
        # the ranks had to do it after the fork.
        import torch._dynamo  # noqa: F401

        from hwmodel.compute import ComputeModel
        from intercept.distributed import process_group
        from intercept.host_time import c10d_host
        from intercept.host_time.gemm_heuristic import load_kernel_map
        self.patches.enter_context(process_group.installed())  # closed never: for good
        self.patches.enter_context(c10d_host.excluded_calls())
        self.kernel_cost = ComputeModel.for_gpu(self.spec.gpu, self.spec.calibration).cost
        load_kernel_map(self.spec.gpu.name)  # cached: the ranks fork with it parsed
        gc.freeze()  # all the ranks inherit lives as long as they do (device.prepare)

    def spawn(self, rank: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            # The rank keeps only its own connection.
            for fd in [self.control.fileno(), *self.pidfds.values(),
                       *(fd for other, fd in self.unspawned.items() if other != rank)]:
                os.close(fd)
            run_rank(self.spec, rank, self.kernel_cost, server_pid)  # never returns
        # The rank makes itself a process group leader too; doing it here as well means that
        # a kill_all() right after the fork cannot miss a rank that has not run yet.
        os.setpgid(pid, pid)
        os.close(self.unspawned.pop(rank))  # the rank holds it now: its death means EOF
        self.ranks[pid] = rank
        self.pidfds[pid] = os.pidfd_open(pid)
        self._report(Spawned(rank, pid))

    def reap(self, block: bool = False) -> None:
        """Collect ended descendants (orphaned DataLoader workers too) and report ranks; with
        ``block``, until no rank is left."""
        while not block or self.ranks:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            rank = self.ranks.pop(pid, None)
            if rank is not None:
                os.close(self.pidfds.pop(pid))
                self._report(RankExit(rank, pid, os.waitstatus_to_exitcode(status)))

    def kill_all(self) -> None:
        """SIGKILL every rank's process group, reap them, then whatever else they left us."""
        for pid in self.ranks:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.reap(block=True)
        deadline = time.monotonic() + ORPHAN_REAP_S
        while time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                time.sleep(0.01)

    def serve(self) -> None:
        """Answer spawn requests and report exits until told to shut down (or the coordinator
        closes the channel)."""
        while True:
            ready = wait([self.control, *self.pidfds.values()])
            self.reap()
            if self.control not in ready:
                continue
            try:
                message = self.control.recv()
            except EOFError:
                break
            if isinstance(message, Spawn):
                self.spawn(message.rank)
            elif isinstance(message, Shutdown):
                break
        self.kill_all()

    def _report(self, message: Report) -> None:
        try:
            self.control.send(message)
        except OSError:
            pass  # the coordinator is gone; nobody to tell


def serve(control_fd: int, coordinator_pid: int) -> None:
    """Entry point of the fork server process (started by
    :meth:`launch.launcher.Launcher.start`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != coordinator_pid:
        return  # the coordinator died before the prctl took effect
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    control = Connection(control_fd)
    spec: LaunchSpec = control.recv()
    server = _ForkServer(control, spec)

    def on_coordinator_death(signum: int, frame: object) -> None:
        server.kill_all()
        os._exit(1)

    signal.signal(signal.SIGTERM, on_coordinator_death)
    try:
        server.prepare()
    except BaseException as exc:  # noqa: BLE001 - reported to the coordinator, which raises it
        text = traceback.format_exc()
        try:
            control.send(Failed(exc, text))
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            control.send(Failed(None, text))
        return
    control.send(Ready())
    server.serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip the interpreter's teardown of torch: nothing left to clean up
