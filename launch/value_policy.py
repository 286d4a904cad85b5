"""The scenario's value model as the ranks receive it: routing, seed and what an unknown
data-dependent shape does (``simulation.routing``, ``seed``, ``simulation.unknown_shapes``).

Imports no torch: the launcher builds it before the ranks load the fake CUDA device.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

@dataclass(frozen=True)
class Routing:
    """How rows pick their top-k entries (``simulation.routing``).

    ``uniform``: every k-subset equally likely; ``balanced``: row ``t`` takes entries
    ``t*k ... t*k+k-1`` modulo the row length (every entry chosen equally often);
    ``zipf``: entry popularity falls as ``1/rank^s``, the popular entries shuffled per call
    (trained routers favour a few experts, different ones per layer); ``trace``: each call picks
    every entry exactly as often as the recorded call of a real run (``counts``, cycled in call
    order; scaled where the call routes another number of rows), so expert GEMM shapes repeat
    as often as they did there. A trace recorded on several ranks (``record_routing.py`` under
    torchrun writes ``<stem>.rank<r>.json`` beside ``<stem>.json``) is replayed rank by rank
    (``rank_counts``): each rank's router saw its own tokens, and their sum is what each
    expert's rank receives.
    """

    mode: str = "uniform"
    zipf_s: float = 1.0
    counts: tuple[tuple[int, ...], ...] = ()
    rank_counts: tuple[tuple[tuple[int, ...], ...], ...] = ()

    def calls_for(self, rank: int) -> tuple[tuple[int, ...], ...]:
        """The recorded calls ``rank`` replays: its own where the trace has them, else the
        trace's (rank 0's)."""
        return self.rank_counts[rank] if rank < len(self.rank_counts) else self.counts

    @staticmethod
    def parse(text: str, base: Path | None = None) -> "Routing":
        """``uniform | balanced | zipf:<s> | trace:<file>`` (a trace path relative to ``base``)."""
        mode, _, arg = text.partition(":")
        if mode in ("uniform", "balanced") and not arg:
            return Routing(mode)
        if mode == "zipf":
            try:
                s = float(arg)
            except ValueError:
                s = math.nan
            if not s > 0:
                raise ValueError(f"zipf needs a positive exponent, e.g. zipf:1.2 (got {text!r})")
            return Routing("zipf", zipf_s=s)
        if mode == "trace" and arg:
            path = Path(base or ".") / arg
            return Routing("trace", counts=load_trace(path), rank_counts=load_rank_traces(path))
        raise ValueError(f"routing {text!r}: expected uniform, balanced, zipf:<s> or "
                         "trace:<file>")


def load_trace(path: Path) -> tuple[tuple[int, ...], ...]:
    """Expert counts per router call from ``scripts/measure/record_routing.py``'s JSON
    (``{"experts": E, "top_k": k, "calls": [[count per expert], ...]}``)."""
    try:
        data = json.loads(path.read_text())
        experts = int(data["experts"])
        calls = tuple(tuple(int(c) for c in call) for call in data["calls"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"routing trace {path}: {error}; expected JSON "
                         '{"experts": E, "top_k": k, "calls": [[count per expert], ...]}') \
            from None
    if not calls or any(len(call) != experts or sum(call) <= 0 for call in calls):
        raise ValueError(f"routing trace {path}: every call needs {experts} counts with a "
                         "positive sum")
    return calls


def load_rank_traces(path: Path) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Each rank's calls from ``<stem>.rank<r>.json`` beside ``path``, ranks 0, 1, ... while
    their files exist (none: an empty tuple)."""
    traces = []
    while (rank_path := path.with_name(f"{path.stem}.rank{len(traces)}.json")).exists():
        traces.append(load_trace(rank_path))
    return tuple(traces)


UNKNOWN_SHAPES = ("error", "half")


@dataclass(frozen=True)
class ValuePolicy:
    """The scenario's value model (``seed``, ``simulation.routing``,
    ``simulation.unknown_shapes``: what a data-dependent shape of unknown values does: stop with
    an error naming the op, or keep half of the elements)."""

    routing: Routing = Routing()
    seed: int = 0
    unknown_shapes: str = "error"
