"""Run a snippet on the fake GPU in a fresh interpreter, with a stand-in runtime.

The shim must be loaded before torch is imported, and pytest may already have imported torch,
so every device test runs its code in a process of its own, as ``python -c`` would (forked from
one that imported torch after the shim once: :mod:`.snippet_zygote`), and gets back JSON: what
the snippet put in ``result``, what the stand-in runtime recorded, and what it printed.
"""

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from hwmodel.compute.spec import KernelSpec
from intercept.host_time.host_cost import load_table

REPO = Path(__file__).resolve().parents[2]
LAUNCH_OVERHEAD_NS = 5_000
"""Stand-in clock advance per kernel launch."""
KERNEL_NS = 10_000
"""Stand-in duration of every kernel."""

_BOOTSTRAP = """
import json, sys
sys.path.insert(0, {repo!r})
from intercept.dispatch import device
from hwmodel.catalogue import lookup_gpu
from tests.intercept.device_harness import StandInRuntime
device.prepare(lookup_gpu({gpu!r}), {device_count})
runtime = StandInRuntime()
mode = device.enter_fake_mode(runtime=runtime)
import torch
result = {{}}
exec(compile({snippet!r}, "<snippet>", "exec"))
with open({out!r}, "w") as f:
    json.dump({{"result": result, "runtime": runtime.summary()}}, f)
"""


class StandInRuntime:
    """Deterministic stand-in for ``intercept.runtime.RankRuntime`` that records every call.

    Its clock moves only by :data:`LAUNCH_OVERHEAD_NS` per kernel and by syncs; every kernel
    runs :data:`KERNEL_NS` on its stream. It refuses runtime calls made inside ``excluded()``
    (the device code promises not to nest them).
    """

    def __init__(self) -> None:
        self.clock_ns = 0
        self.kernels: list[tuple[str, int, int, int]] = []
        self.calls: list[tuple[Any, ...]] = []
        self.excluded_cpu_ns = 0
        self.excluded_entries = 0
        self._excluded_depth = 0
        self._stream_free_ns: dict[int, int] = {}
        self._event_ns: dict[int, int] = {}
        self.host_ops: list[str] = []
        """Ops that launched nothing, in order (their host cost only)."""
        self.foreach_tensors: list[int] = []
        """Per kernel, the list length passed for its host cost (1 unless foreach)."""
        self.host_keys: list[str | None] = []
        """Per kernel, the host-cost key passed where it is not the op's name."""
        self.host_costs = load_table()
        """The shipped host-cost table (a compiled graph reads its call costs there)."""
        self.host_charges: list[int] = []
        """Every :meth:`charge_host`, in order."""

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        self._excluded_depth += 1
        self.excluded_entries += 1
        start = time.thread_time_ns()
        try:
            yield
        finally:
            self.excluded_cpu_ns += time.thread_time_ns() - start
            self._excluded_depth -= 1

    def _check(self, call: str) -> None:
        if self._excluded_depth:
            raise AssertionError(f"runtime.{call} called inside excluded()")

    def kernel(self, spec: KernelSpec, stream: int, tensors: int = 1,
               launch_overhead_ns: int | None = None, host_key: str | None = None) -> None:
        self._check("kernel")
        self.host_keys.append(host_key)
        self.kernels.append((spec.name, spec.flops, spec.bytes, stream))
        self.foreach_tensors.append(tensors)
        self.clock_ns += LAUNCH_OVERHEAD_NS if launch_overhead_ns is None else launch_overhead_ns
        start = max(self.clock_ns, self._stream_free_ns.get(stream, 0))
        self._stream_free_ns[stream] = start + KERNEL_NS

    def charge_host(self, duration_ns: int) -> None:
        self._check("charge_host")
        self.clock_ns += duration_ns
        self.host_charges.append(duration_ns)

    counts_work = False
    """Python work is not counted here: :meth:`autograd` is never called."""

    def autograd(self, *, recorded: bool, node: object | None) -> None:
        raise AssertionError("autograd() is only called in counted mode")

    def tensor_subclass(self) -> None:
        raise AssertionError("tensor_subclass() is only called in counted mode")

    def host_op(self, name: str) -> None:
        self._check("host_op")
        self.host_ops.append(name)

    def new_event(self) -> int:
        self._check("new_event")
        event = len(self._event_ns)
        self._event_ns[event] = 0
        self.calls.append(("new_event", event))
        return event

    def record_event(self, event: int, stream: int) -> None:
        self._check("record_event")
        self.calls.append(("record_event", event, stream))
        self._event_ns[event] = max(self.clock_ns, self._stream_free_ns.get(stream, 0))

    def wait_event(self, stream: int, event: int) -> None:
        self._check("wait_event")
        self.calls.append(("wait_event", stream, event))
        ready = self._event_ns[event]
        self._stream_free_ns[stream] = max(self._stream_free_ns.get(stream, 0), ready)

    def sync(self, kind: str, target: int = 0) -> int:
        self._check("sync")
        self.calls.append(("sync", kind, target))
        if kind == "query":
            return int(self._event_ns[target] <= self.clock_ns)
        if kind == "device":
            done = max([self.clock_ns, *self._stream_free_ns.values()])
        elif kind == "stream":
            done = max(self.clock_ns, self._stream_free_ns.get(target, 0))
        else:
            done = self._event_ns[target]
        self.clock_ns = max(self.clock_ns, done)
        return done

    def summary(self) -> dict[str, Any]:
        return {"kernels": self.kernels, "calls": self.calls, "clock_ns": self.clock_ns,
                "excluded_cpu_ns": self.excluded_cpu_ns,
                "excluded_entries": self.excluded_entries}


def run_snippet(snippet: str, *, gpu: str = "h100", device_count: int = 8,
                timeout_s: float = 120) -> dict[str, Any]:
    """Run ``snippet`` on ``device_count`` fake GPUs of kind ``gpu``; it fills ``result``.

    The snippet sees ``torch``, ``mode`` (the SimFakeMode) and ``runtime`` (the stand-in).
    Returns ``{"result", "runtime", "stdout", "stderr"}``; raises with the child's stderr if
    it failed.
    """
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "out.json")
        code = _BOOTSTRAP.format(repo=str(REPO), gpu=gpu, device_count=device_count,
                                 snippet=textwrap.dedent(snippet), out=out)
        status, stdout, stderr = _run_forked(code, Path(folder), timeout_s)
        if status != 0:
            raise AssertionError(f"snippet failed (exit {status}):\n{stderr[-6000:]}")
        with open(out) as f:
            data = json.load(f)
    data["stdout"], data["stderr"] = stdout, stderr
    return data


_zygote: "subprocess.Popen[str] | None" = None


def _run_forked(code: str, folder: Path, timeout_s: float) -> tuple[int, str, str]:
    """``python -c code`` as a fresh child of the snippet zygote (:mod:`.snippet_zygote`,
    started at first use, for the rest of the session): its exit status, stdout and stderr."""
    global _zygote
    if _zygote is None or _zygote.poll() is not None:
        _zygote = subprocess.Popen([sys.executable, "-m", "tests.intercept.snippet_zygote"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                   cwd=REPO)
        atexit.register(_stop_zygote, _zygote)
    assert _zygote.stdin is not None and _zygote.stdout is not None
    stdout, stderr = folder / "stdout", folder / "stderr"
    _zygote.stdin.write(json.dumps({"code": code, "stdout": str(stdout),
                                    "stderr": str(stderr)}) + "\n")
    _zygote.stdin.flush()
    pid = _zygote_answer(_zygote.stdout)["pid"]
    start = time.monotonic()
    killer = threading.Timer(timeout_s, os.kill, (pid, signal.SIGKILL))
    killer.start()
    try:
        status = _zygote_answer(_zygote.stdout)["exit"]
    finally:
        killer.cancel()
    if status == -signal.SIGKILL and time.monotonic() - start >= timeout_s:
        raise subprocess.TimeoutExpired(["python", "-c", "<snippet>"], timeout_s)
    return status, stdout.read_text(), stderr.read_text()


def _stop_zygote(zygote: "subprocess.Popen[str]") -> None:
    """At exit: the zygote ends with its stdin, and is reaped (its CPU time counts as ours)."""
    assert zygote.stdin is not None
    zygote.stdin.close()
    zygote.wait()


def _zygote_answer(answers: IO[str]) -> dict[str, int]:
    """The zygote's next answer line (a child's pid, then its exit status)."""
    line = answers.readline()
    if not line:
        raise AssertionError("the snippet zygote exited (tests/intercept/snippet_zygote.py)")
    return json.loads(line)
