"""Where the simulated GPU time came from, for the ``compute_coverage`` of ``summary.json``.

A simulated step is only as good as its kernel durations; this record says how much of the
GPU time came from measured tables (exact or interpolated) and how much from the fallbacks
(fitted roofline, unknown ops, host copies), and which ops dominate each, so a missing
measurement is visible rather than silently cheap. With a calibration (``cluster.calibration``)
its rows count as tables and its fitted roofline as a fallback.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwmodel.catalogue import GpuSpec
from hwmodel.compute.model import CostSource

FALLBACK_SOURCES = frozenset({CostSource.FITTED, CostSource.UNKNOWN,
                              CostSource.CALIBRATED_ROOFLINE})
"""Kernels costed without a measurement of their op on this GPU (host copies have their own
measured link model and are not counted here)."""
FALLBACK_WARN_SHARE = 0.05
"""Above this share of GPU time costed by fallback, the console warns and ``summary.json``
says so (``fallback_warning``): the estimate then leans on the roofline."""


@dataclass(slots=True)
class _Tally:
    kernels: int = 0
    time_ns: int = 0

    def add(self, duration_ns: int) -> None:
        self.kernels += 1
        self.time_ns += duration_ns


@dataclass
class Coverage:
    """Accumulates kernels (as the ranks costed them) by source and by op name."""

    gpu: GpuSpec
    calibration: Path | None = None
    """The kernel calibration file the ranks costed kernels from, if any."""
    by_source: dict[CostSource, _Tally] = field(default_factory=dict)
    by_op: dict[str, dict[CostSource, _Tally]] = field(default_factory=dict)

    def record(self, name: str, source: str, duration_ns: int) -> None:
        """Count one kernel costed by ``source`` (a :class:`CostSource` value)."""
        cost_source = CostSource(source)
        self.by_source.setdefault(cost_source, _Tally()).add(duration_ns)
        self.by_op.setdefault(name, {}).setdefault(cost_source, _Tally()).add(duration_ns)

    @property
    def kernels(self) -> int:
        return sum(tally.kernels for tally in self.by_source.values())

    @property
    def time_ns(self) -> int:
        return sum(tally.time_ns for tally in self.by_source.values())

    def ops_from(self, source: CostSource) -> list[str]:
        """Names of ops (partly) costed by ``source``, most time first."""
        found = [(sources[source].time_ns, name)
                 for name, sources in self.by_op.items() if source in sources]
        return [name for _, name in sorted(found, key=lambda item: (-item[0], item[1]))]

    def fallback_by_op(self) -> dict[str, float]:
        """Share of all GPU time each op had costed by fallback (fitted roofline, unknown op),
        largest first."""
        total_ns = self.time_ns
        shares = {name: sum(t.time_ns for s, t in sources.items() if s in FALLBACK_SOURCES)
                  for name, sources in self.by_op.items()}
        return {name: round(ns / total_ns, 4) for name, ns in
                sorted(shares.items(), key=lambda item: (-item[1], item[0])) if ns and total_ns}

    def to_dict(self, top: int = 20) -> dict[str, Any]:
        """The JSON form: totals, time by source (with shares), the share costed by fallback
        (fitted roofline and unknown ops: ``fallback_share``, ``fallback_warning`` above
        :data:`FALLBACK_WARN_SHARE`, ``fallback_by_op``), the ``top`` ops by time, the ``top``
        ops by time costed without a table (``fallback_ops``), and unknown ops."""
        total_ns = self.time_ns

        def share(time_ns: int) -> float:
            return round(time_ns / total_ns, 4) if total_ns else 0.0

        def rows(only_fallback: bool) -> list[dict[str, Any]]:
            found = []
            for name, sources in self.by_op.items():
                tallies = {s: t for s, t in sources.items()
                           if not (only_fallback and s.from_table)}
                if not tallies:
                    continue
                main = max(tallies, key=lambda s: (tallies[s].time_ns, s.value))
                found.append((sum(t.time_ns for t in tallies.values()), name,
                              sum(t.kernels for t in tallies.values()), main))
            found.sort(key=lambda row: (-row[0], row[1]))
            return [{"name": name, "source": main.value, "kernels": kernels,
                     "time_ns": time_ns, "share": share(time_ns)}
                    for time_ns, name, kernels, main in found[:top]]

        from_table_ns = sum(t.time_ns for s, t in self.by_source.items() if s.from_table)
        fallback_ns = sum(t.time_ns for s, t in self.by_source.items() if s in FALLBACK_SOURCES)
        return {
            "gpu": self.gpu.name,
            "calibration": None if self.calibration is None else str(self.calibration),
            "kernels": self.kernels,
            "time_ns": total_ns,
            "from_tables_share": share(from_table_ns),
            "fallback_share": share(fallback_ns),
            "fallback_warning": bool(total_ns) and fallback_ns / total_ns > FALLBACK_WARN_SHARE,
            "by_source": {source.value: {"kernels": self.by_source[source].kernels,
                                         "time_ns": self.by_source[source].time_ns,
                                         "share": share(self.by_source[source].time_ns)}
                          for source in CostSource if source in self.by_source},
            "top_ops": rows(only_fallback=False),
            "fallback_ops": rows(only_fallback=True),
            "fallback_by_op": self.fallback_by_op(),
            "unknown_ops": self.ops_from(CostSource.UNKNOWN),
        }
