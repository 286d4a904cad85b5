"""The simulator's own CPU time stays out of a rank's virtual time; the script's own stays in.

Each measurement runs in a fresh interpreter (the shim must be loaded before torch) with the
real :class:`~intercept.runtime.RankRuntime` and a measured
:class:`~intercept.host_time.clock.VirtualClock` (the fake device's measured deductions in force),
the stand-in coordinator in a forked process so that its CPU time is not the rank's. Bounds are
ratios or generous multiples of the table's charge for a small ``add_`` (``launch_ns``): the machine
may be loaded, which inflates every CPU time measured.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from typing import Any

import pytest

from tests.intercept.device_harness import REPO

_BOOTSTRAP = """
import json, os, sys, time
sys.path.insert(0, {repo!r})
from multiprocessing import Pipe
from intercept.dispatch import device
from intercept.process import shim
from hwmodel.catalogue import lookup_gpu
device.prepare(lookup_gpu("h100"), 1)
from intercept.host_time.clock import VirtualClock
from intercept.process.client import CoordinatorClient
from intercept.runtime import RankRuntime
from tests.intercept.dist_coordinator import FakeCoordinator, kernel_cost
ours, theirs = Pipe()
if os.fork() == 0:  # the stand-in coordinator: its CPU time must not be the rank's
    ours.close()
    FakeCoordinator(theirs, reply_delay_ns=0).join(timeout_s=600)
    os._exit(0)
theirs.close()
clock = VirtualClock(epoch_ns=0)
runtime = RankRuntime(rank=0, world_size=1, local_rank=0, local_world_size=1,
                      gpu=lookup_gpu("h100"), clock=clock, client=CoordinatorClient(ours, clock),
                      kernel_cost=kernel_cost)
runtime.make_current()
device.enter_fake_mode(runtime=runtime)
import torch
result = {{"launch_ns": runtime.host_costs.op_ns("add_", launches=True),
          "deductions": list(shim.deductions())}}
exec(compile({snippet!r}, "<snippet>", "exec"))
with open({out!r}, "w") as f:
    json.dump(result, f)
os._exit(0)  # not interpreter teardown: torch's autograd thread may race it
"""

MEASURE = """
launches = [0]
launch = runtime.kernel
def counted_launch(*args, **kwargs):
    launches[0] += 1
    return launch(*args, **kwargs)
runtime.kernel = counted_launch

def measure(fn, n, rounds=5):
    '''Per call of fn: medians over rounds of virtual and process CPU ns, kernels launched.'''
    for _ in range(n // 4):
        fn()
    samples = []
    launches[0] = 0
    for _ in range(rounds):
        v0, c0, t0 = clock.now_ns(), time.process_time_ns(), clock.host_split().table_ns
        for _ in range(n):
            fn()
        samples.append(((clock.now_ns() - v0) / n, (time.process_time_ns() - c0) / n,
                        (clock.host_split().table_ns - t0) / n))
    virtual = sorted(s[0] for s in samples)[rounds // 2]
    cpu = sorted(s[1] for s in samples)[rounds // 2]
    return {"virtual_ns": virtual, "cpu_ns": cpu, "kernels": launches[0] // (rounds * n),
            "table_ns": samples[0][2]}

def burn(ns):
    '''Spend at least ns of this thread's CPU time in pure Python; returns how much.'''
    start = now = time.thread_time_ns()
    while now < start + ns:
        now = time.thread_time_ns()
    return now - start

x = torch.empty(16, device="cuda")
y = torch.empty(16, device="cuda")
m = torch.empty(64, 64, device="cuda")
def plain(a, b):
    return a

result["plain"] = measure(lambda: plain(x, y), 2000)
result["add_"] = measure(lambda: x.add_(y), 400)
result["ops"] = {
    "x + y (a new tensor, freed)": measure(lambda: x + y, 200),
    "x.view (no kernel)": measure(lambda: x.view(4, 4), 200),
    "torch.mm": measure(lambda: torch.mm(m, m), 200),
}

v0 = clock.now_ns()
result["burn"] = {"cpu_ns": burn(20_000_000), "virtual_ns": clock.now_ns() - v0}

OPS = 100
burnt_ns = 0
v0, t0 = clock.now_ns(), clock.host_split().table_ns
for _ in range(OPS):
    x.add_(y)
    burnt_ns += burn(200_000)
result["mixed"] = {"virtual_ns": clock.now_ns() - v0, "ops": OPS, "work_ns": burnt_ns,
                   "table_ns": clock.host_split().table_ns - t0}

torch.set_num_threads(1)  # intra-op workers are other threads, never inside a section
real = torch.rand(256, 256)  # 65536 elements: small CPU work runs for real
result["real_cpu"] = measure(lambda: torch.sort(real, 1), 12)

a = torch.nn.Parameter(torch.empty(64, device="cuda"))
result["backward"] = measure(lambda: (a * 2).sum().backward(), 40)

class Wrapped(torch.Tensor):  # a wrapper subclass whose dispatch does Python work, as DTensor's
    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype,
                                                   device=inner.device)
    def __init__(self, inner):
        self.inner = inner
    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        burn(200_000)
        unwrapped = [t.inner if isinstance(t, Wrapped) else t for t in args]
        return Wrapped(func(*unwrapped, **(kwargs or {})))

w = Wrapped(torch.empty(16, device="cuda"))
result["subclass"] = measure(lambda: w.add(w), 20)

from torch.utils._python_dispatch import TorchDispatchMode
class Burning(TorchDispatchMode):  # a mode that does Python work per op, as checkpointing's
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        burn(200_000)
        return func(*args, **(kwargs or {}))

def add_under_mode():
    with Burning():
        x.add_(y)
result["mode"] = measure(add_under_mode, 20)
"""


def run_measurements(snippet: str, timeout_s: float = 300) -> dict[str, Any]:
    """Run ``snippet`` as a rank on one fake H100; returns what it put in ``result``."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "out.json")
        code = _BOOTSTRAP.format(repo=str(REPO), snippet=textwrap.dedent(snippet), out=out)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout_s, cwd=REPO, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"rank failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
        with open(out) as f:
            return json.load(f)


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    return run_measurements(MEASURE)


def extra_ns(entry: dict[str, float], launch_ns: int) -> float:
    """Virtual time per call beyond what the host-cost table charged for its ops
    (``launch_ns``, the table's charge for a small ``add_``, scales the bounds)."""
    return entry["virtual_ns"] - entry["table_ns"]


def test_cheap_op_costs_launch_overhead_plus_a_python_call(measured: dict[str, Any]) -> None:
    """N cheap CUDA ops advance virtual time by N x (launch + a few hundred ns of Python), not
    by N x the fake dispatch (~100 us of CPU, excluded from the rank's time)."""
    add = measured["add_"]
    launch_ns = measured["launch_ns"]
    extra = extra_ns(add, launch_ns)
    assert add["kernels"] == 1
    # Deductions take back at most what was spent: an op is never cheaper than its launch.
    assert extra >= 0
    # About a plain Python call: within one launch overhead (4 us) of it (0.3-1 us on an idle
    # machine).
    assert extra - measured["plain"]["virtual_ns"] < launch_ns, (add, measured["deductions"])
    # And a small share of what the fake dispatch costs the CPU.
    assert extra < 0.05 * add["cpu_ns"], add


@pytest.mark.parametrize("name", ["x + y (a new tensor, freed)", "x.view (no kernel)",
                                  "torch.mm"])
def test_other_ops_cost_less_than_a_launch_beyond_it(measured: dict[str, Any],
                                                     name: str) -> None:
    """Metadata queries (view), FakeTensor teardown (x + y) and bigger ops stay cheap too:
    under two launch overheads beyond their launch (1-2 us on an idle machine)."""
    entry = measured["ops"][name]
    assert entry["kernels"] == (0 if "no kernel" in name else 1)
    assert 0 <= extra_ns(entry, measured["launch_ns"]) < 2 * measured["launch_ns"], \
        (entry, measured["deductions"])


def test_pure_python_cpu_time_still_counts(measured: dict[str, Any]) -> None:
    """20 ms of CPU time in a busy loop: 20 ms of virtual time, no deduction in it."""
    burn = measured["burn"]
    assert 0.9 <= burn["virtual_ns"] / burn["cpu_ns"] <= 1.1, burn


def test_script_work_between_ops_is_not_deducted(measured: dict[str, Any]) -> None:
    """Ops interleaved with Python work: virtual = work + ops x (launch + small), so the per-op
    deductions do not eat into the script's own CPU time.

    "Small" is larger than in a tight loop: the glue around a dispatch runs with cold caches
    after other work (as a real host's dispatch path does), and that part is not deducted
    (~1-3 us). A deduction measured while the machine was busier than now
    exceeds the glue: allowed up to half a launch overhead per op.
    """
    mixed = measured["mixed"]
    launch_ns = measured["launch_ns"]
    ops, work_ns = mixed["ops"], mixed["work_ns"]
    script_ns = mixed["virtual_ns"] - mixed["table_ns"]
    assert work_ns - ops * launch_ns / 2 <= script_ns <= work_ns + ops * 4 * launch_ns, \
        (mixed, measured["deductions"])


def test_real_cpu_work_inside_an_intercepted_op_counts(measured: dict[str, Any]) -> None:
    """A small CPU sort runs for real inside the dispatch: its CPU time is the script's."""
    real = measured["real_cpu"]
    assert real["virtual_ns"] > 0.5 * real["cpu_ns"], real


def test_backward_on_the_autograd_thread_is_mostly_excluded(measured: dict[str, Any]) -> None:
    """The engine's device thread calls into Python too (ops, queries, teardown)."""
    entry = measured["backward"]
    assert 0 <= extra_ns(entry, measured["launch_ns"]) < 0.2 * entry["cpu_ns"], entry


def test_deductions_are_measured_and_small(measured: dict[str, Any]) -> None:
    section_ns, dispatch_ns = measured["deductions"]
    assert 0 < section_ns < 5_000
    assert 0 < dispatch_ns < 20_000


NATIVE = """
import json, sys, threading, time
sys.path.insert(0, {repo!r})
from intercept.process import shim
shim.load()  # no torch: only the excluded-CPU account is used
from intercept.host_time.clock import VirtualClock

def burn(ns):
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass

def excluded_burn(ns):
    with exclusion:
        burn(ns)

BURN_NS = 20_000_000
exclusion = shim.native_exclusion()
clock = VirtualClock(epoch_ns=0)
result = {{"burn_ns": BURN_NS}}
v0 = clock.now_ns()
excluded_burn(BURN_NS)  # the shim's section, not the clock's: the clock reads the shim
result["shim_section_ns"] = clock.now_ns() - v0
v0 = clock.now_ns()
with clock.excluded():
    burn(BURN_NS)
    excluded_burn(BURN_NS)  # nested: the outer section times both
    result["inside_ns"] = clock.now_ns() - v0
    with shim.script_time():  # a hole: counts although inside
        burn(BURN_NS)
    burn(BURN_NS)
result["nested_and_hole_ns"] = clock.now_ns() - v0
worker = threading.Thread(target=excluded_burn, args=(2 * BURN_NS,))
v0 = clock.now_ns()
worker.start()
burn(BURN_NS)
worker.join()
result["other_thread_excluded_ns"] = clock.now_ns() - v0
print(json.dumps(result))
"""


def test_native_exclusion_nests_per_thread_and_has_holes() -> None:
    """The shim's account: sections nest, belong to their thread, and script_time() is a hole
    in them; a clock in a process with the shim uses it."""
    code = NATIVE.format(repo=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    burn_ns = result["burn_ns"]
    assert result["shim_section_ns"] < 0.1 * burn_ns
    assert result["inside_ns"] < 0.1 * burn_ns
    assert burn_ns <= result["nested_and_hole_ns"] < 1.3 * burn_ns
    assert burn_ns <= result["other_thread_excluded_ns"] < 1.3 * burn_ns


def test_a_tensor_subclass_dispatch_counts(measured: dict[str, Any]) -> None:
    """A subclass's ``__torch_dispatch__`` (DTensor's sharding propagation) runs on a real host
    too: the 200 us it burns per op is the script's time, though torch calls it from inside
    the call into Python that the shim excludes for the fake mode."""
    entry = measured["subclass"]
    assert entry["kernels"] == 1
    assert extra_ns(entry, measured["launch_ns"]) >= 0.8 * 200_000, entry


def test_a_dispatch_mode_counts(measured: dict[str, Any]) -> None:
    """A script's own dispatch mode (selective activation checkpointing caches and replays
    every op through one) runs on a real host too: the 200 us it burns per op is the
    script's time, though torch calls it from inside the call into Python the shim excludes."""
    entry = measured["mode"]
    assert entry["kernels"] == 1
    assert extra_ns(entry, measured["launch_ns"]) >= 0.8 * 200_000, entry
