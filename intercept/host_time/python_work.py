"""The script's own Python between intercepted ops, *counted*: the machine-independent residual of
a rank's host time (``simulation.host_time: counted``, the default).

The fake-CUDA shim counts the lines and calls of Python that the rank's threads run outside the
simulator's excluded sections (``intercept.process.shim.count_thread``, ``work_counts``): the
script, the libraries it calls (``nn.Module``'s call path, hooks, the optimizer's loops), DTensor's
dispatch. A real host runs the same lines, so the count does not depend on this machine, its load or
how many ranks share it. :class:`CountedWork` turns it into the reference host's time with two
weights measured there (``scripts/measure/measure_python_work.py``, ``hwmodel/measured/data/
python_work.json``): ns per line and ns per call of module calls, hooks and optimizer loops run
hot, times the cold-code factor fitted on real steps (``intercept.host_time.host_fit``), scaled to
another reference host by the host-speed benchmark's ``calls`` component.

``nn.Module``'s member walks (``parameters()``, ``named_modules()``, ... : :data:`HOT_WALKS`)
are charged at the hot weights, without the cold-code factor, where their steps follow one
another with no op between them: a real host runs them at about the microbenchmark's speed
(the gradient clipping of ``docs/models/host.md``). The shim counts those steps apart; a step
that follows an op (a consumer launching one per parameter) counts as the script's, cold.

Limits (``docs/models/host.md``): a line's real cost varies with what it does (a tight
arithmetic loop ~20 ns per line, a formatted log line ~600 ns), so Python far from a training
step's mix is over- or under-charged; C work the script calls that is not an intercepted op
(numpy, a tokenizer, real CPU tensors) is not counted; a script's own ``sys.settrace`` (a
debugger) set before the counter is replaced by it (the rank's log says so), one set after
replaces the counter on its thread.
"""

import json
import sys
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import CodeType

from hwmodel.measured.tables import PYTHON_WORK
from intercept.host_time.host_fit import load_fit
from intercept.process import shim


@dataclass(frozen=True)
class WorkWeights:
    """Reference-host ns per counted unit of Python work."""

    line_ns: float
    call_ns: float

    def scaled(self, factor: float) -> "WorkWeights":
        return WorkWeights(self.line_ns * factor, self.call_ns * factor)


@cache
def load_weights(path: Path = PYTHON_WORK.path) -> WorkWeights:
    """The shipped weights as measured, hot (on the ``h100-host`` reference)."""
    data = json.loads(path.read_text())
    return WorkWeights(float(data["line_ns"]), float(data["call_ns"]))


WEIGHTS_REFERENCE = "h100-host"
"""The reference host the shipped weights were measured on."""


@dataclass(frozen=True)
class StepWeights:
    """Reference-host ns per unit of a training step's Python: ``cold`` for the script's code
    between ops, ``hot`` inside the :data:`HOT_WALKS`."""

    cold: WorkWeights
    hot: WorkWeights


def weights_for(reference: str) -> StepWeights:
    """The weights in a training step for ``simulation.host_cpu`` ``reference``: the shipped
    ones (hot), and times the fitted cold-code factor (cold), scaled by the two hosts' ``calls``
    component of the host-speed benchmark (Python function calls and attribute lookups, what a
    module's call path is made of)."""
    fit = load_fit()
    if fit.reference != WEIGHTS_REFERENCE:
        raise ValueError(f"host fit is for {fit.reference}, the Python weights for "
                         f"{WEIGHTS_REFERENCE}: re-fit with scripts/measure/fit_host_time.py")
    hot = load_weights()
    if reference != WEIGHTS_REFERENCE:
        from hwmodel.measured.host_references import references

        hosts = references().hosts
        if reference not in hosts:
            raise ValueError(f"unknown reference host {reference!r}; expected one of "
                             f"{', '.join(sorted(hosts))}")
        hot = hot.scaled(hosts[reference].components_ns["calls"]
                         / hosts[WEIGHTS_REFERENCE].components_ns["calls"])
    return StepWeights(cold=hot.scaled(fit.python_cold_factor), hot=hot)


HOT_WALKS = ("named_modules", "modules", "named_children", "children", "_named_members",
             "named_parameters", "parameters", "named_buffers", "buffers")
"""The ``nn.Module`` generator walks charged hot; what they call (the member lambdas, a
tensor's ``__hash__`` in the walk's memo) is inside them."""


def hot_walk_code() -> tuple[CodeType, ...]:
    """The code objects of :data:`HOT_WALKS` (``nn.Module``'s own, not a subclass's override).
    Imports torch: call after the shim is loaded."""
    from torch import nn

    return tuple(getattr(nn.Module, name).__code__ for name in HOT_WALKS)


class CountedWork:
    """The rank's counted Python work as reference-host ns (:meth:`ns`, monotonic), counting every
    thread that :meth:`count_this_thread` was called on (the main thread from construction),
    :data:`HOT_WALKS` at the hot weights."""

    def __init__(self, weights: StepWeights) -> None:
        self._weights = weights
        self._local = threading.local()
        self._hot_code = hot_walk_code()
        shim.set_hot_code(self._hot_code)
        self.count_this_thread()

    def count_this_thread(self) -> None:
        """Count the calling thread from now on (cheap after the first call on a thread). A
        trace function the script had set on it (a debugger, a coverage tool) stops; the rank's
        log says so."""
        if getattr(self._local, "counted", False):
            return
        self._local.counted = True
        if not shim.count_thread():
            print(f"phantora-ns3: the trace function set on thread "
                  f"{threading.current_thread().name!r} (a debugger or coverage tool) was "
                  "replaced by the host-time counter; set simulation.host_time: measured to "
                  "keep it", file=sys.stderr)

    def ns(self) -> int:
        """Reference-host ns of the Python work counted so far, all counted threads."""
        counts = shim.work_counts()
        cold, hot = self._weights.cold, self._weights.hot
        return round(counts.lines * cold.line_ns + counts.calls * cold.call_ns
                     + counts.hot_lines * hot.line_ns + counts.hot_calls * hot.call_ns)

    def cold_ns(self) -> int:
        """Of :meth:`ns`, the part charged at the cold weights (outside the hot walks)."""
        counts = shim.work_counts()
        cold = self._weights.cold
        return round(counts.lines * cold.line_ns + counts.calls * cold.call_ns)
