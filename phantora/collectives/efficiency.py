"""Every efficiency and latency correction of the collective model, in one place.

The network backends move bytes at the links' line rates. NCCL gets less, and a flow
therefore carries ``payload / efficiency`` wire bytes, where for a link of ``kind``

    efficiency = min(link_efficiency[kind] x model_ratio x correction[(algorithm, protocol)],
                     channels x cta_gbs[protocol] x send_duty / line_gbs)   (NVLink only)
                 x chunk / (chunk + chunk_overhead_bytes[(algorithm, protocol)])

* ``link_efficiency``: what ring/Simple payload reaches on a link that is the bottleneck.
* ``model_ratio``: NCCL's own modeled throughput of the protocol relative to Simple for the
  same algorithm (``tuning.cc``: LL is ``min(llMaxBw, busBw/2)``, LL128 ``0.92 busBw``...),
  or, for NVLS, relative to ring/Simple on the same NVLinks.
* the CTA term: a channel is one CTA doing its steps one after another, and a step that only
  copies out of the FIFO (the last step of a ring loop) sends nothing meanwhile; ``send_duty``
  is the fraction of a loop's steps that send (``planner.send_duty``), ``cta_gbs`` what one CTA
  copies per second. It explains why 2-GPU all_gather/reduce_scatter (1 send in 2 steps) are
  slower per link byte than all_reduce (2 in 3) and broadcast (all sends).
* ``chunk_overhead_bytes``: a fixed cost per pipeline chunk, as bytes of transfer (NVLS
  synchronizes all GPUs on every chunk, and NCCL shrinks NVLS chunks for mid sizes).

Latency: NCCL's modeled latency of the chosen (algorithm, protocol) is scaled by
``latency_scale``.

The measured numbers, each with the measurement it was fitted to, are in
:mod:`hwmodel.measured.collectives`; rerun ``scripts/validate/validate_collectives.py`` after
changing any of them.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from math import ceil
from types import MappingProxyType
from typing import Any, TypeVar

from hwmodel.measured import collectives as measured
from hwmodel.measured.source import Measured
from phantora.cluster.topology import LinkKind
from phantora.collectives.config import Algorithm, Protocol

T = TypeVar("T")


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NcclEfficiency:
    """Efficiency and latency figures; see the module docstring for how they combine."""

    link_efficiency: Mapping[LinkKind, float]
    """Fraction of a bottleneck link's line rate that ring/Simple payload reaches."""
    cta_gbs: Mapping[Protocol, float] = field(default_factory=_empty)
    """Payload one channel (CTA) copies per second, GB/s; missing means no CTA limit."""
    correction: Mapping[tuple[Algorithm, Protocol], float] = field(default_factory=_empty)
    """Measured / NCCL-modeled throughput per (algorithm, protocol); missing means 1.0."""
    chunk_overhead_bytes: Mapping[tuple[Algorithm, Protocol], int] = field(default_factory=_empty)
    """Fixed cost per pipeline chunk, in bytes of transfer; missing means none."""
    latency_scale: Mapping[tuple[Algorithm, Protocol], float] = field(default_factory=_empty)
    """Measured / NCCL-modeled latency per (algorithm, protocol); missing means 1.0."""
    grouped_p2p_duty: float = 1.0
    """Share of a p2p CTA's throughput its send gets when the channel also receives (all_to_all)."""
    use_model_ratios: bool = True
    """``False`` charges payload bytes at ``link_efficiency`` only: for closed-form checks."""

    def __post_init__(self) -> None:
        for kind, value in self.link_efficiency.items():
            if not 0 < value <= 1:
                raise ValueError(f"link_efficiency[{kind.value}] is {value}; expected (0, 1]")
        for table in (self.cta_gbs, self.correction, self.latency_scale):
            for key, value in table.items():
                if value <= 0:
                    raise ValueError(f"efficiency entry {key} is {value}; expected > 0")

    @classmethod
    def payload_only(cls) -> "NcclEfficiency":
        """Wire bytes = payload bytes: every link at line rate, no protocol overhead."""
        return cls(MappingProxyType({kind: 1.0 for kind in LinkKind}), use_model_ratios=False)

    def efficiency(self, kind: LinkKind, algorithm: Algorithm, protocol: Protocol, *,
                   model_ratio: float, line_gbs: float, channels: int = 0,
                   send_duty: float = 1.0, chunk_bytes: int = 0) -> float:
        """Payload bytes per wire byte on a ``kind`` link (``channels = 0``: no CTA limit)."""
        base = self.link_efficiency[kind]
        if not self.use_model_ratios:
            return base
        efficiency = base * model_ratio * self.correction.get((algorithm, protocol), 1.0)
        cta = self.cta_gbs.get(protocol)
        if kind is LinkKind.NVLINK and channels and cta is not None:
            efficiency = min(efficiency, channels * cta * send_duty / line_gbs)
        overhead = self.chunk_overhead_bytes.get((algorithm, protocol), 0)
        if overhead and chunk_bytes:
            efficiency *= chunk_bytes / (chunk_bytes + overhead)
        return min(1.0, efficiency)

    def latency_factor(self, algorithm: Algorithm, protocol: Protocol) -> float:
        return self.latency_scale.get((algorithm, protocol), 1.0)

    @staticmethod
    def wire_bytes(payload: int, efficiency: float) -> int:
        return ceil(payload / efficiency) if payload else 0


def _by_variant(table: Mapping[tuple[str, str], Measured[T]]
                ) -> Mapping[tuple[Algorithm, Protocol], T]:
    """A measured table keyed by (algorithm, protocol) names, as the model's enums."""
    return MappingProxyType({(Algorithm(algorithm), Protocol(protocol)): found.value
                             for (algorithm, protocol), found in table.items()})


DEFAULT_NCCL_EFFICIENCY = NcclEfficiency(
    link_efficiency=MappingProxyType({
        LinkKind.NVLINK: measured.LINK_EFFICIENCY[LinkKind.NVLINK.value].value,
        LinkKind.NIC: measured.LINK_EFFICIENCY[LinkKind.NIC.value].value,
        LinkKind.FABRIC: 1.0,  # not measured: line rate
    }),
    cta_gbs=MappingProxyType({Protocol(protocol): value.value
                              for protocol, value in measured.CTA_GBS.items()}),
    correction=_by_variant(measured.CORRECTION),
    chunk_overhead_bytes=_by_variant(measured.CHUNK_OVERHEAD_BYTES),
    grouped_p2p_duty=measured.GROUPED_P2P_DUTY.value,
    latency_scale=_by_variant(measured.LATENCY_SCALE),
)
"""The NCCL efficiencies phantora uses unless told otherwise: the measured values of
:mod:`hwmodel.measured.collectives`; NVLS's latency stays NCCL's own."""
