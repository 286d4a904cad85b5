"""How kernel time was costed, for the ``compute`` section of ``summary.json``.

A simulated step is only as good as its kernel durations; this record says how much of the
GPU time came from each cost source (roofline compute, roofline memory, the per-kernel floor,
unknown ops costed by bytes) and which ops dominate, so a missing formula is visible.
"""

from dataclasses import dataclass, field
from typing import Any

from phantora.cluster.catalogue import GpuSpec
from phantora.compute.roofline import CostSource, kernel_cost


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
    by_source: dict[CostSource, _Tally] = field(default_factory=dict)
    by_op: dict[str, dict[CostSource, _Tally]] = field(default_factory=dict)

    def record(self, name: str, flops: int, nbytes: int, duration_ns: int) -> None:
        """Count one kernel; its source is classified from its name, FLOPs and bytes."""
        source = kernel_cost(name, flops, nbytes, self.gpu).source
        self.by_source.setdefault(source, _Tally()).add(duration_ns)
        self.by_op.setdefault(name, {}).setdefault(source, _Tally()).add(duration_ns)

    @property
    def kernels(self) -> int:
        return sum(tally.kernels for tally in self.by_source.values())

    @property
    def time_ns(self) -> int:
        return sum(tally.time_ns for tally in self.by_source.values())

    def unknown_ops(self) -> list[str]:
        """Names of ops costed by the unknown-op fallback, most time first."""
        unknown = [(sources[CostSource.UNKNOWN].time_ns, name)
                   for name, sources in self.by_op.items() if CostSource.UNKNOWN in sources]
        return [name for _, name in sorted(unknown, key=lambda item: (-item[0], item[1]))]

    def to_dict(self, top: int = 20) -> dict[str, Any]:
        """The JSON form: totals, time by source (with shares), the ``top`` ops by time."""
        total_ns = self.time_ns

        def share(time_ns: int) -> float:
            return round(time_ns / total_ns, 4) if total_ns else 0.0

        rows = []
        for name, sources in self.by_op.items():
            main = max(sources, key=lambda s: (sources[s].time_ns, s.value))
            rows.append((sum(t.time_ns for t in sources.values()), name,
                         sum(t.kernels for t in sources.values()), main))
        rows.sort(key=lambda row: (-row[0], row[1]))
        top_ops = [{"name": name, "source": main.value, "kernels": kernels, "time_ns": time_ns,
                    "share": share(time_ns)} for time_ns, name, kernels, main in rows[:top]]
        return {
            "gpu": self.gpu.name,
            "kernels": self.kernels,
            "time_ns": total_ns,
            "by_source": {source.value: {"kernels": self.by_source[source].kernels,
                                         "time_ns": self.by_source[source].time_ns,
                                         "share": share(self.by_source[source].time_ns)}
                          for source in CostSource if source in self.by_source},
            "top_ops": top_ops,
            "unknown_ops": self.unknown_ops(),
        }
