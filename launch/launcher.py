"""Start the ranks of a live simulation the way ``torchrun`` would, without importing torch or
the rank side here.

The coordinator (which holds ns-3 and never imports torch or ``intercept``) creates a
:class:`Launcher`: :meth:`Launcher.start` starts the *fork server*, a fresh Python child that
runs :data:`FORK_SERVER` by its module path (``intercept.process.fork_server``: it prepares the
fake CUDA device once, installs the phantora process-group backend, and then forks one process
per rank on request; torch imported once: less memory per rank, no per-rank import time). The
launcher sends it a :class:`~launch.spec.LaunchSpec` and the requests of :mod:`wire.control`.

Wiring:

* one socketpair per rank, made here: the coordinator's ends are :attr:`Launcher.connections`
  (``multiprocessing`` Connections carrying :mod:`wire` messages), the other ends are
  inherited by the fork server, which hands each to its rank;
* a control socketpair to the fork server (:mod:`wire.control`): spawn requests go down,
  ``Spawned``/``RankExit`` reports come up (:meth:`Launcher.poll`, :attr:`Launcher.control` for
  ``connection.wait``);
* every rank's stdout and stderr go to ``out_dir/ranks/rank<N>.log`` (:meth:`Launcher.tail`
  follows one), the fork server's own to ``out_dir/ranks/fork_server.log``.

No orphans: the fork server runs in its own POSIX session (Ctrl-C in the terminal reaches only the
coordinator, which then calls :meth:`Launcher.close`), dies with the coordinator
(``PR_SET_PDEATHSIG``, on which it kills its ranks first), and reaps every descendant (it is a
child subreaper). Each rank is its own process group, so killing a rank kills its DataLoader
workers too. :meth:`Launcher.close` asks the fork server to kill and reap everything, and falls
back to ``SIGKILL`` on every process group it knows.
"""
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType

from hwmodel.catalogue import GpuSpec
from hwmodel.errors import SimulationError
from launch.program import Program
from launch.spec import HostChoice, LaunchSpec
from launch.value_policy import ValuePolicy
from wire.control import Failed, RankExit, Ready, Report, Request, Shutdown, Spawn, Spawned

FORK_SERVER = "intercept.process.fork_server"
"""The module the fork server runs (its ``serve(control_fd, coordinator_pid)``): named here,
imported only in the fork server's own interpreter."""
READY_TIMEOUT_S = 300.0
"""How long the fork server may take to import torch and build the shim (first run: g++)."""
SHUTDOWN_TIMEOUT_S = 10.0
"""How long :meth:`Launcher.close` waits for the fork server to reap the ranks."""


class LogTail:
    """Follows a log file that another process writes: each :meth:`read_lines` returns the
    complete lines added since the previous call (the coordinator echoes rank 0's live)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read_lines(self) -> list[str]:
        try:
            with self.path.open("rb") as log:
                log.seek(self._offset)
                data = log.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [line.decode(errors="replace") for line in lines]


class Launcher:
    """Runs ``program`` (a script path or a :class:`~launch.program.Program`) as
    ``world_size`` ranks, ``ranks_per_host`` per simulated host.

    ``env``: the scenario's environment variables (torchrun's own are set on top). ``gpu``:
    the simulated GPU model; ``gpus_per_host`` GPUs are visible per host (default
    ``ranks_per_host``). ``fake_device=False`` skips the fake CUDA device (pure-Python scripts,
    tests). ``epoch_ns`` is what every rank's ``time.time_ns()`` reads at virtual time 0
    (default: now); ``op_cost_ns`` switches on reproducible mode (see
    ``intercept.host_time.clock``); ``host_cpu`` names the reference host whose CPU speed the ranks'
    script CPU time is scaled to (``intercept.host_time.host_speed``; ``None`` or ``"native"``:
    unscaled), or whose costs the script's counted Python work is charged at (``counted``:
    ``intercept.host_time.python_work``, in place of measuring CPU time; not with ``op_cost_ns``);
    ``values`` the value model (``launch.value_policy``); ``ranks`` the ranks to run, each still
    seeing all ``world_size`` (default: all of them; the engine mirrors the others);
    ``calibration`` a kernel calibration file to cost kernels from (default: the packaged tables);
    ``host`` the host profile and speed the ranks' host costs come from.
    """

    def __init__(self, program: str | Path | Program, args: Sequence[str], env: Mapping[str, str],
                 world_size: int, ranks_per_host: int, gpu: GpuSpec, out_dir: str | Path, *,
                 gpus_per_host: int | None = None, fake_device: bool = True,
                 epoch_ns: int | None = None, op_cost_ns: int | None = None,
                 host_cpu: str | None = None, values: ValuePolicy = ValuePolicy(),
                 counted: bool = False, master_addr: str = "127.0.0.1",
                 master_port: int = 29500, ranks: Sequence[int] | None = None,
                 calibration: Path | None = None, host: HostChoice = HostChoice()) -> None:
        if world_size < 1 or ranks_per_host < 1 or world_size % ranks_per_host:
            raise ValueError(f"world_size ({world_size}) must be a positive multiple of "
                             f"ranks_per_host ({ranks_per_host})")
        if gpus_per_host is not None and gpus_per_host < ranks_per_host:
            raise ValueError(f"ranks_per_host ({ranks_per_host}) exceeds gpus_per_host "
                             f"({gpus_per_host}): one rank per GPU")
        self.spec = LaunchSpec(
            program=Program.of(program).check(), args=tuple(args), env=dict(env), world_size=world_size,
            ranks_per_host=ranks_per_host, gpu=gpu,
            gpus_per_host=gpus_per_host or ranks_per_host, out_dir=Path(out_dir).resolve(),
            fake_device=fake_device, epoch_ns=time.time_ns() if epoch_ns is None else epoch_ns,
            op_cost_ns=op_cost_ns, master_addr=master_addr, master_port=master_port,
            run_id=uuid.uuid4().hex[:12], host_cpu=host_cpu, values=values, counted=counted,
            calibration=calibration, host=host)
        self.ranks = list(range(world_size)) if ranks is None else sorted(ranks)
        """The ranks that run (the others of ``world_size`` are mirrored by the engine)."""
        if not self.ranks or not set(self.ranks) <= set(range(world_size)):
            raise ValueError(f"ranks {ranks} must be a non-empty subset of 0..{world_size - 1}")
        self.connections: dict[int, Connection] = {}
        """The coordinator's end of each running rank's connection."""
        self.pids: dict[int, int] = {}
        self.exits: dict[int, RankExit] = {}
        """Ranks whose process has ended, as reported so far by :meth:`poll`."""
        self.control: Connection | None = None
        """The fork server's report channel: include it in ``connection.wait`` sets."""
        self._server: subprocess.Popen[bytes] | None = None

    def log_path(self, rank: int) -> Path:
        return self.spec.log_path(rank)

    def tail(self, rank: int = 0) -> LogTail:
        """A follower of ``rank``'s log (the coordinator echoes rank 0 with a prefix)."""
        return LogTail(self.log_path(rank))

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the fork server, wait until it is ready, fork every rank."""
        if self._server is not None:
            raise RuntimeError("the launcher was already started")
        logs = self.spec.out_dir / "ranks"
        logs.mkdir(parents=True, exist_ok=True)
        for stale in logs.glob("rank*.log"):  # an earlier run's, in the same folder
            stale.unlink()
        rank_fds: dict[int, int] = {}
        child_socks: list[socket.socket] = []
        for rank in self.ranks:
            ours, theirs = socket.socketpair()
            self.connections[rank] = Connection(ours.detach())
            rank_fds[rank] = theirs.fileno()
            child_socks.append(theirs)
        ours, theirs = socket.socketpair()
        self.control = Connection(ours.detach())
        child_socks.append(theirs)
        server_log = (self.spec.out_dir / "ranks" / "fork_server.log").open("wb")
        try:
            self._server = subprocess.Popen(
                [sys.executable, "-c", f"from {FORK_SERVER} import serve; "
                 f"serve({theirs.fileno()}, {os.getpid()})"],
                pass_fds=[s.fileno() for s in child_socks], start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=server_log, stderr=subprocess.STDOUT,
                env=self._server_env())
        finally:
            server_log.close()
            for sock in child_socks:
                sock.close()
        self.control.send(replace(self.spec, rank_fds=rank_fds))
        self._await_ready()
        for rank in self.ranks:
            self._request(Spawn(rank))
        while len(self.pids) < len(self.ranks):
            self._handle(self._recv_control(READY_TIMEOUT_S))

    def poll(self, timeout_s: float = 0.0) -> list[RankExit]:
        """Read the fork server's reports (waiting up to ``timeout_s`` for the first); returns
        the rank exits among them."""
        assert self.control is not None, "start() first"
        exits: list[RankExit] = []
        while self.control.poll(timeout_s):
            timeout_s = 0.0
            try:
                message = self.control.recv()
            except EOFError:
                break
            exit_ = self._handle(message)
            if exit_ is not None:
                exits.append(exit_)
        return exits

    def close(self) -> None:
        """Kill every rank still running, reap all processes, close the connections.

        Safe to call more than once, and after a failed :meth:`start`.
        """
        server = self._server
        if server is not None and server.poll() is None:
            try:
                assert self.control is not None
                self._request(Shutdown())
                server.wait(SHUTDOWN_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                self._kill_groups([server.pid, *self.pids.values()])
                server.wait()
        for conn in [*self.connections.values(), *([self.control] if self.control else [])]:
            conn.close()
        self.connections = {}
        self.control = None

    def __enter__(self) -> "Launcher":
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------
    @staticmethod
    def _server_env() -> dict[str, str]:
        """The coordinator's environment, with this package importable and torch single-threaded
        (fake execution has no use for an OpenMP pool, forking after one starts is unsafe, and
        torchrun defaults to one thread per rank too)."""
        root = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}

    def _await_ready(self) -> None:
        message = self._recv_control(READY_TIMEOUT_S)
        if isinstance(message, Failed):
            self.close()
            if message.error is None:
                raise SimulationError(f"the fork server failed:\n{message.text}")
            message.error.add_note(f"(raised in the fork server)\n{message.text}")
            raise message.error
        if not isinstance(message, Ready):
            raise SimulationError(f"unexpected message from the fork server: {message!r}")

    def _request(self, request: Request) -> None:
        assert self.control is not None
        self.control.send(request)

    def _recv_control(self, timeout_s: float) -> Report:
        assert self.control is not None and self._server is not None
        if not self.control.poll(timeout_s):
            self.close()
            raise SimulationError(f"the fork server did not answer within {timeout_s:.0f} s; "
                                  f"see {self.spec.out_dir / 'ranks' / 'fork_server.log'}")
        try:
            return self.control.recv()
        except EOFError:
            server = self._server
            self.close()
            raise SimulationError(
                f"the fork server exited with status {server.returncode}; "
                f"see {self.spec.out_dir / 'ranks' / 'fork_server.log'}") from None

    def _handle(self, message: Report) -> RankExit | None:
        if isinstance(message, Spawned):
            self.pids[message.rank] = message.pid
            return None
        if isinstance(message, RankExit):
            self.exits[message.rank] = message
            return message
        raise SimulationError(f"unexpected message from the fork server: {message!r}")

    @staticmethod
    def _kill_groups(pgids: Sequence[int]) -> None:
        for pgid in pgids:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
