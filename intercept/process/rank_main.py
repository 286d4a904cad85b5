"""What runs in a forked rank process: the script, the way ``torchrun`` would run it.

The fork server (:mod:`.fork_server`) forks and calls :func:`run_rank`, which never returns:

1. becomes its own process group (so the launcher can kill it with every child it forks, e.g.
   DataLoader workers) and dies with the fork server (``PR_SET_PDEATHSIG``);
2. sends fds 1 and 2 to ``DIR/ranks/rank<N>.log`` (line-buffered, so the log can be tailed);
3. sets the environment as torchrun does, the simulated host's CPU count
   (:mod:`.host_cpus`), then the working folder, ``sys.argv`` and ``sys.path[0]`` as the
   interpreter would for the :class:`~launch.program.Program` (a script or ``-m module``);
4. creates the :class:`~intercept.runtime.RankRuntime` (clock, client, heartbeat), enters the
   fake CUDA mode, patches ``time``;
5. runs the program as ``__main__`` (``runpy``); then, as the interpreter would, joins
   non-daemon threads and runs ``atexit`` handlers;
6. sends the final batch with an :class:`~wire.messages.Exit` (status and, if the script
   raised, the traceback it also prints to stderr) and leaves with ``os._exit``.
"""

import atexit
import ctypes
import os
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType

from intercept.host_time.clock import VirtualClock, patched_time
from intercept.host_time.host_profile_costs import (load_host_profile, table_for_profile,
                                                     weights_for_profile)
from intercept.host_time.host_speed import host_speed_for
from intercept.host_time.python_work import CountedWork
from intercept.host_time.residual import ResidualSmoother
from intercept.process import shim
from intercept.process.host_cpus import simulate_host_cpus
from intercept.process.client import CoordinatorClient
from intercept.runtime import KernelCostModel, RankRuntime
from launch.program import Program
from launch.spec import LaunchSpec
from hwmodel.measured.host_references import reference_host
from hwmodel.compute.model import KernelCost
from hwmodel.compute.spec import KernelSpec

_PR_SET_PDEATHSIG = 1


def _no_compute_model(spec: KernelSpec) -> KernelCost:
    raise RuntimeError(f"kernel {spec.name} launched in a rank started without the fake device")


def run_rank(spec: LaunchSpec, rank: int, kernel_cost: KernelCostModel | None,
             server_pid: int) -> None:
    """Become rank ``rank`` and run the script (see the module docstring); never returns.

    Called right after ``fork()`` in the fork server, whose pid is ``server_pid``.
    """
    status = 1
    try:
        _detach(server_pid)
        _redirect_output(spec.log_path(rank))
        status = _run(spec, rank, kernel_cost or _no_compute_model)
    except BaseException:  # noqa: BLE001 - the rank must never return into the fork server
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)


def _detach(server_pid: int) -> None:
    """Own process group, die with the fork server, default signal handling."""
    os.setpgid(0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:  # the fork server died before the prctl took effect
        os._exit(1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _redirect_output(path: Path) -> None:
    """fd 1 and 2 -> ``path`` (what the script prints, exactly), stdin from /dev/null."""
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.close(null_fd)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]


def _run(spec: LaunchSpec, rank: int, kernel_cost: KernelCostModel) -> int:
    """Set up the rank, run the script, send the Exit; returns the exit status."""
    os.environ.update(spec.env)
    os.environ.update(spec.rank_env(rank))
    if spec.host.cpus is not None:
        simulate_host_cpus(spec.host.cpus)
    spec.program.enter(spec.args)
    atexit._clear()  # the fork server's handlers are not the script's

    counted_work = residual = None
    host = load_host_profile(spec.host.profile or reference_host(spec.host_cpu, spec.gpu.name))
    host = host.at_speed(spec.host.speed)
    if spec.counted and spec.op_cost_ns is None and shim.native_exclusion() is not None:
        counted_work = CountedWork(weights_for_profile(host))
        clock = VirtualClock(epoch_ns=spec.epoch_ns, script_work=counted_work.ns)
    else:
        # Measured before the clock starts: the benchmark's CPU time is not the script's.
        clock = VirtualClock(epoch_ns=spec.epoch_ns, op_cost_ns=spec.op_cost_ns,
                             cpu_scale=host_speed_for(spec.host_cpu))
        if spec.op_cost_ns is None and shim.native_exclusion() is not None:
            residual = ResidualSmoother(shim.thread_counted_ns, clock.to_reference_ns,
                                        clock.quietest_to_reference_ns)
    client = CoordinatorClient(Connection(spec.rank_fds[rank]), clock)
    runtime = RankRuntime(rank=rank, world_size=spec.world_size,
                          local_rank=rank % spec.ranks_per_host,
                          local_world_size=spec.ranks_per_host, gpu=spec.gpu, clock=clock,
                          client=client, kernel_cost=kernel_cost,
                          host_costs=table_for_profile(host), residual=residual,
                          counted_work=counted_work)
    runtime.make_current()
    client.start()
    with patched_time(clock):
        status, trace = _run_guarded(lambda: _enter_and_run(spec))
        for thread in threading.enumerate():
            if not thread.daemon and thread is not threading.current_thread():
                thread.join()
        atexit._run_exitfuncs()
    runtime.finish(status, trace, *_peak_memory_bytes(spec, runtime.local_rank))
    _send_owed_values(spec)
    return status


OWED_VALUES_TIMEOUT_S = 120.0
"""How long an exited rank stays to send values other ranks still wait for (wall time)."""


def _send_owed_values(spec: LaunchSpec) -> None:
    """Values of collectives this rank issued before they were computed go out once their own
    inputs arrive, which may be after the script ended."""
    if not spec.fake_device:
        return
    from intercept.dispatch import fake_mode

    mode = fake_mode.active()
    if mode is not None:
        mode.values.wait_sent(OWED_VALUES_TIMEOUT_S)


def _peak_memory_bytes(spec: LaunchSpec, device: int) -> tuple[int, int]:
    """``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` of the rank's GPU (since
    the script's last reset)."""
    if not spec.fake_device:
        return 0, 0
    import torch

    return (int(torch.cuda.max_memory_allocated(device)),
            int(torch.cuda.max_memory_reserved(device)))


def _enter_and_run(spec: LaunchSpec) -> None:
    if spec.fake_device:
        from intercept.dispatch import device
        from intercept.distributed import process_group
        device.enter_fake_mode(
            on_functional_collective=process_group.handle_functional_collective,
            policy=spec.values, rank=int(os.environ["RANK"]))
        runtime = RankRuntime.current()
        if runtime is not None:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            register_optimizer_step_post_hook(lambda *_: runtime.step_done())
    spec.program.run()


def _run_guarded(main: Callable[[], object]) -> tuple[int, str]:
    """Run ``main`` as the interpreter runs a script: ``(exit status, traceback text or "")``,
    printing what the interpreter would print."""
    try:
        main()
    except SystemExit as exc:
        return _exit_status(exc.code), ""
    except BaseException as exc:  # noqa: BLE001 - every failure of the script is reported
        text = "".join(traceback.format_exception(type(exc), exc, _user_frames(exc.__traceback__)))
        sys.stderr.write(text)
        return 1, text
    return 0, ""


def _exit_status(code: object) -> int:
    """``sys.exit(code)`` as the interpreter maps it: None -> 0, int -> itself, else printed, 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """Drop the leading frames of this module, ``launch.program`` and ``runpy``: the traceback
    starts in the script, as it would under ``python script.py``."""
    ours = {__name__, Program.__module__, runpy.__name__}
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in ours:
        tb = tb.tb_next
    return tb
