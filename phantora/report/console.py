"""Rich console output: the results table and progress over long runs."""

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from hwmodel.units import format_bytes
from phantora.engine.results import RankResult
from phantora.report.summary import CollectiveResult

T = TypeVar("T")


def collectives_table(results: list[CollectiveResult], title: str) -> Table:
    table = Table(title=title)
    counted = any(r.count > 1 for r in results)
    names = ["op", "bytes", "ranks", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algo/proto",
             "channels"] + (["count"] if counted else [])
    for name in names:
        table.add_column(name, justify="left" if name in ("op", "algo/proto") else "right")
    for r in results:
        table.add_row(r.op, format_bytes(r.bytes), str(r.ranks), f"{r.time_us:.1f}",
                      f"{r.algbw_gbs:.2f}", f"{r.busbw_gbs:.2f}", f"{r.algorithm}/{r.protocol}",
                      str(r.channels), *([str(r.count)] if counted else []))
    return table


def ranks_table(ranks: list[RankResult], title: str) -> Table:
    """Per live rank: where its clock ended, its GPU's last work, time blocked on the GPU."""
    table = Table(title=title)
    for name in ("rank", "GPU", "clock (ms)", "GPU busy until (ms)", "blocked (ms)", "kernels",
                 "collectives", "peak alloc (GiB)", "peak reserved (GiB)"):
        table.add_column(name, justify="right")
    for r in ranks:
        table.add_row(str(r.rank), str(r.gpu), f"{r.clock_ns / 1e6:.3f}",
                      f"{r.gpu_end_ns / 1e6:.3f}", f"{r.blocked_ns / 1e6:.3f}", str(r.kernels),
                      str(r.collectives), f"{r.peak_memory_bytes / 2**30:.3f}",
                      f"{r.peak_reserved_bytes / 2**30:.3f}")
    return table


def host_line(host: dict[str, Any]) -> str:
    """One line saying which host profile charged the host time, at what speed."""
    where = "bundled" if host["bundled"] else f"file {host['path']}"
    line = f"host: profile {host['profile']} ({where}) at {host['speed']:g}x its speed"
    if not host["bundled"]:
        line += f"; costs it did not measure from {host['reference']}, scaled"
    return line


def coverage_line(coverage: dict[str, Any]) -> str:
    """One line saying where the simulated GPU time came from, and what was not measured."""
    if not coverage.get("kernels"):
        return "compute: no kernels"
    parts = ", ".join(f"{source} {tally['share']:.0%}"
                      for source, tally in coverage["by_source"].items())
    tables = (f"the calibration {coverage['calibration']}" if coverage.get("calibration")
              else "measured tables")
    line = (f"compute ({coverage['gpu']}): {coverage['from_tables_share']:.0%} of GPU time from "
            f"{tables} ({parts})")
    fallback = [op for op in coverage["fallback_ops"] if op["share"] >= 0.01][:3]
    if fallback:
        line += "; largest not from tables: " + ", ".join(
            f"{op['name']} {op['share']:.0%} ({op['source']})" for op in fallback)
    if coverage.get("fallback_warning"):
        ops = ", ".join(f"{name} {share:.0%}"
                        for name, share in list(coverage["fallback_by_op"].items())[:5])
        fix = ("add traces that run them to the calibration" if coverage.get("calibration")
               else "measure them with scripts/measure/measure_kernels.py")
        line += (f"\nWARNING: {coverage['fallback_share']:.0%} of GPU time was costed by "
                 f"fallback (no measured rows for: {ops}); {fix}")
    return line


def fabric_line(network: dict[str, Any]) -> str | None:
    """The ns-3 fabric's counters in one line (``None`` without a packet-level fabric)."""
    extra = network.get("extra", {})
    transport = extra.get("inter.transport")
    if transport is None:
        return None
    line = (f"fabric (ns-3 {transport}): {extra['inter.data_packets']:,} data packets, "
            f"{extra['inter.packet_hops']:,} packet-hops, {extra['inter.drops']} drops, "
            f"{extra['inter.ecn_marks']:,} ECN marks")
    if transport == "roce":
        line += (f", {extra['inter.pfc_pause_frames']:,} PFC pauses ("
                 f"{extra['inter.pfc_paused_us_total']:,.1f} us paused on "
                 f"{extra['inter.pfc_paused_ports']} ports), {extra['inter.cnps']:,} CNPs, "
                 f"{extra['inter.rate_cuts']:,} rate cuts on {extra['inter.queue_pairs_rate_cut']}"
                 f" of {extra['inter.queue_pairs']} queue pairs, max queue "
                 f"{format_bytes(extra['inter.max_queue_bytes'])}")
    return line + symmetry_note(extra)


def symmetry_note(extra: dict[str, Any]) -> str:
    """What rail mirroring (``cluster.network.symmetry``) did, after the counters."""
    if "inter.symmetry" not in extra:
        return ""
    if extra["inter.symmetry"] == "full":
        return f"\nrail mirroring: every rail simulated ({extra['inter.symmetry.fallback']})"
    return (f"\nrail mirroring: {extra['inter.symmetry.rails_simulated']} of "
            f"{extra['inter.symmetry.rails']} rails simulated, "
            f"{extra['inter.symmetry.flows_mirrored']:,} flows mirrored, "
            f"{extra['inter.symmetry.flows_solo']:,} solo, "
            f"{extra['inter.symmetry.restarts']} restarts "
            f"({extra['inter.symmetry.restart_cpu_s']} s); counters scaled to every rail")


def hot_ports_table(network: dict[str, Any]) -> Table | None:
    """The fabric ports that were paused longest or queued most (``None`` if none did)."""
    ports = [port for port in network.get("hot_ports", [])
             if port["paused_us"] > 0 or port["ecn_marks"] > 0]
    if not ports:
        return None
    table = Table(title="busiest fabric ports")
    for name in ("port", "paused (us)", "pauses received", "pauses sent", "max queue",
                 "ECN marks"):
        table.add_column(name, justify="left" if name == "port" else "right")
    for port in ports:
        table.add_row(port["port"], f"{port['paused_us']:.1f}",
                      str(port["pause_frames_received"]), str(port["pause_frames_sent"]),
                      format_bytes(port["max_queue_bytes"]), str(port["ecn_marks"]))
    return table


ATTRIBUTION_ROWS = 8
"""Ranks listed in the attribution table (the mean row covers all)."""


def attribution_table(attribution: dict[str, Any], title: str) -> Table | None:
    """The steady step per live rank and on average: its parts in ms and shares
    (``None`` when nothing was attributed)."""
    steady = attribution.get("steady")
    if not steady:
        return None
    parts = attribution["parts"]
    table = Table(title=f"{title}: where the step goes (steps {_spans(steady['steps'])})")
    for name in ("rank", "step (ms)", *(part.replace("_", " ") for part in parts),
                 "exposed comm by tier"):
        table.add_column(name, justify="left" if name.startswith("exposed") else "right")
    by_rank = attribution["steady_by_rank"]
    rows = [(str(row["ranks"][0]), row) for row in by_rank[:ATTRIBUTION_ROWS]]
    if len(by_rank) > 1:
        rows.append(("mean" if len(by_rank) <= ATTRIBUTION_ROWS
                     else f"mean of {len(by_rank)}", steady))
    for label, row in rows:
        tiers = ", ".join(f"{tier} {ns / 1e6:.3f}"
                          for tier, ns in row["communication_by_tier_ns"].items() if ns)
        table.add_row(label, f"{row['step_ns'] / 1e6:.3f}",
                      *(f"{row[f'{part}_ns'] / 1e6:.3f} ({row['share'][part]:.0%})"
                        for part in parts), tiers or "-")
    return table


def _spans(steps: list[int]) -> str:
    return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])


def with_progress(items: Iterable[T], total: int, description: str, console: Console) -> Iterator[T]:
    """Yield ``items`` while showing a progress bar (hidden when the console is not a terminal)."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True,
                  disable=not console.is_terminal) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)
