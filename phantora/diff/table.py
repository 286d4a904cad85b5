"""The comparison on the console: steps, GPU time by family, collectives and the largest
divergences, real beside simulated (the means over every compared step; ``diff.json`` holds
each step)."""

from collections import Counter

from rich.table import Table

from hwmodel.units import format_bytes
from phantora.diff.compare import (HOST_BOUND_IDLE_SHARE, PROFILER_NS_PER_EVENT, Diff,
                                   ProfilerCost, collective_rows, divergences, family_rows)
from phantora.profiles.kineto import PROFILER_STEPS

STEP_ROWS = 16
"""Compared (rank, step) rows listed before the mean."""


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def _size(nbytes: int | None) -> str:
    """Exact where it is a whole GiB, MiB or KiB (or under 1 KiB), else in MiB or KiB to a few
    digits (diff.json holds the exact size)."""
    if nbytes is None:
        return "?"
    exact = format_bytes(nbytes)
    if exact.endswith(("GiB", "MiB")) or nbytes < 1024:
        return exact
    if nbytes >= 1 << 20:
        return f"{nbytes / 2**20:.2f}MiB"
    return exact if exact.endswith("KiB") else f"{nbytes / 1024:.1f}KiB"


def _pair_us(real: float | None, sim: float | None) -> str:
    return " / ".join("-" if ns is None else f"{ns / 1e3:.1f}" for ns in (real, sim))


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title)
    for index, name in enumerate(columns):
        table.add_column(name, justify="left" if index == 0 else "right")
    return table


def _steps(steps: list[int]) -> str:
    return str(steps[0]) if len(steps) == 1 else f"mean {steps[0]}-{steps[-1]}"


def _profiler(cost: ProfilerCost) -> str:
    """The estimate to 0.1 ms (it is good to a factor of 2 to 3), flagged where host-bound."""
    return f"~{cost.inflation_ns / 1e6:.1f}" + (" host-bound" if cost.host_bound else "")


def diff_notes(diff: Diff) -> list[str]:
    """Lines printed after the tables: what the traces' steps were cut at, and what a step
    host-bound under the profiler means."""
    cuts = Counter(t.step_cut for t in diff.traces)
    lines = [f"steps cut at {cut}" + ("" if cut == PROFILER_STEPS else " (no ProfilerStep ranges)")
             + ("" if count == len(diff.traces) else f" in {count} of {len(diff.traces)} traces")
             for cut, count in cuts.items()]
    if any(c.profiler.host_bound for c in diff.steps):
        lines.append(
            "host-bound under the profiler (real GPU idle >= "
            f"{HOST_BOUND_IDLE_SHARE:.0%} of the step): the profiled step includes the "
            "profiler's own per-op cost; 'profiler' estimates it at "
            f"{PROFILER_NS_PER_EVENT / 1e3:g} us per recorded CPU op and CUDA call, good to a "
            "factor of 2 to 3: compare step time with the script's unprofiled log")
    return lines


def diff_tables(diff: Diff, title: str) -> list[Table]:
    """Every table of ``diff``, in print order."""
    real, sim = diff.mean()
    steps = _table(f"{title}: step (ms), real vs simulated", "rank", "training step",
                   "sim step", "real", "sim", "error", "profiler (est.)", "GPU idle real/sim",
                   "exposed comm real/sim")
    rows = [(f"{c.rank}" + (f" (as {c.sim_rank})" if c.sim_rank != c.rank else ""),
             str(c.real_step + 1), _steps(c.sim_steps), c.real, c.sim, c.profiler)
            for c in diff.steps[:STEP_ROWS]]
    if len(diff.steps) > 1:
        rows.append(("mean", "", f"of {len(diff.steps)}", real, sim, diff.mean_profiler_cost()))
    for rank, step, against, r, s, cost in rows:
        steps.add_row(rank, step, against, _ms(r.step_ns), _ms(s.step_ns),
                      f"{100 * (s.step_ns - r.step_ns) / r.step_ns:+.1f}%", _profiler(cost),
                      f"{_ms(r.gpu_idle_ns)} / {_ms(s.gpu_idle_ns)}",
                      f"{_ms(r.exposed_communication_ns)} / {_ms(s.exposed_communication_ns)}")
    families = _table("GPU time launched per step by family (ms)", "family", "real", "sim",
                      "sim - real")
    for row in family_rows(real, sim):
        families.add_row(row["family"], _ms(row["real_ns"]), _ms(row["sim_ns"]),
                         f"{(row['sim_ns'] - row['real_ns']) / 1e6:+.3f}")
    collectives = _table("collectives per step (time: waiting for the other ranks included; "
                         "transfer: without)", "op", "bytes", "count real/sim",
                         "mean us real/sim", "transfer us real/sim", "total ms real/sim")
    for row in collective_rows(real, sim):
        collectives.add_row(
            row["op"], _size(row["bytes"]),
            f"{row['real_count']:g} / {row['sim_count']:g}",
            _pair_us(row["real_mean_ns"], row["sim_mean_ns"]),
            _pair_us(row["real_mean_transfer_ns"], row["sim_mean_transfer_ns"]),
            f"{_ms(row['real_total_ns'])} / {_ms(row['sim_total_ns'])}")
    largest = _table("largest divergences per step (share: of the step's error, sim - real)",
                     "bucket", "family", "real ms", "sim ms", "sim - real", "share")
    for row in divergences(real, sim):
        share = row["share_of_error"]
        largest.add_row(row["bucket"], row["family"], _ms(row["real_ns"]), _ms(row["sim_ns"]),
                        f"{row['divergence_ns'] / 1e6:+.3f}",
                        "-" if share is None else f"{share:+.0%}")
    return [steps, families, collectives, largest]
