"""NCCL's user-facing knobs (``NCCL_ALGO``, ``NCCL_PROTO``, channel counts, NVLS) as one config.

The defaults mean "let the model choose as NCCL would". :meth:`NcclConfig.from_env` reads the
same environment variables NCCL reads, so a live rank's environment can be passed through.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Algorithm(str, Enum):
    """NCCL algorithms this model plans (CollNet and PAT need hardware or layouts not modeled)."""

    TREE = "tree"
    RING = "ring"
    NVLS = "nvls"
    """NVLink SHARP: in-switch reduction and multicast on one host (all_reduce only;
    NB: NCCL also offers it for all_gather/reduce_scatter, where its model never prefers it
    on the systems here, and NVLSTree across hosts: neither is modeled)."""


class Protocol(str, Enum):
    """NCCL protocols; the line formats differ in how many wire bytes carry one payload byte."""

    LL = "ll"
    """8-byte lines of 4 data bytes + a 4-byte flag: half the wire bytes are payload."""
    LL128 = "ll128"
    """128-byte lines of 120 data bytes + an 8-byte flag."""
    SIMPLE = "simple"
    """Bulk copies with separate flag updates: all wire bytes are payload."""


def _parse_choices(value: str, enum: type[Enum], env_name: str) -> frozenset[Any]:
    """``"ring,tree"`` -> {RING, TREE}; ``"^ll"`` -> everything but LL (NCCL's syntax).

    NB: NCCL also accepts per-function prefixes (``"allreduce:tree"``); only the plain list
    form is supported here.
    """
    text = value.strip()
    if ":" in text or ";" in text:
        raise ValueError(f"{env_name}={value!r}: per-function lists are not supported; give a "
                         "plain list such as \"ring,tree\" or \"^ll\"")
    exclude = text.startswith("^")
    names = [n.strip().lower() for n in text.lstrip("^").split(",") if n.strip()]
    chosen = set()
    for name in names:
        try:
            chosen.add(enum(name))
        except ValueError:
            known = ", ".join(m.value for m in enum)
            raise ValueError(f"{env_name}={value!r}: unknown entry {name!r}; expected some of: "
                             f"{known}") from None
    return frozenset(set(enum) - chosen) if exclude else frozenset(chosen)


@dataclass(frozen=True, slots=True)
class NcclConfig:
    """User overrides of NCCL's choices; ``None`` everywhere means NCCL's own defaults."""

    algorithms: frozenset[Algorithm] | None = None
    """Allowed algorithms (``NCCL_ALGO``); ``None`` allows all."""
    protocols: frozenset[Protocol] | None = None
    """Allowed protocols (``NCCL_PROTO``); ``None`` allows all (LL128 where NCCL enables it)."""
    min_channels: int | None = None
    """``NCCL_MIN_NCHANNELS``: at least this many channels (CTAs) per collective."""
    max_channels: int | None = None
    """``NCCL_MAX_NCHANNELS``: at most this many channels per collective."""
    nvls: bool | None = None
    """``NCCL_NVLS_ENABLE``: ``False`` disables NVLS; ``None`` (and ``True``) use it where
    supported: SM90+ GPUs on an NVSwitch, a one-host group of >= 2 GPUs (NB: NCCL's
    multi-host NVLSTree is not modeled; such groups use ring or tree)."""
    flow_budget: int = 75_000
    """Not an NCCL knob: the most flows one collective may become. Above it, consecutive ring
    steps (or pipeline chunks) are merged into fewer, larger flows. The default keeps the
    64-GPU ring all-reduce (8 rails x 64 ranks x 126 steps + PXN hops = 72.6k) unmerged."""
    stepwise_ring_ranks: int = 64
    """Not an NCCL knob: rings of at most this many ranks are laid out step by step (merged
    only above ``flow_budget``); longer rings as one block of all steps per rank, its data
    delivered no earlier than the steps' chain latency (``ring._emit_ring``): O(ranks) flows,
    within 3.3% of the step-by-step DAG on 64 and 128 H100s
    (scripts/bench/bench_network_scale.py)."""

    def __post_init__(self) -> None:
        for name in ("min_channels", "max_channels"):
            value = getattr(self, name)
            if value is not None and not 1 <= value <= 64:
                raise ValueError(f"NcclConfig.{name} is {value}; NCCL allows 1..64 channels")
        if (self.min_channels is not None and self.max_channels is not None
                and self.min_channels > self.max_channels):
            raise ValueError(f"NcclConfig: min_channels ({self.min_channels}) > max_channels "
                             f"({self.max_channels})")
        if self.algorithms is not None and not self.algorithms:
            raise ValueError("NcclConfig.algorithms is empty; leave it None to allow all")
        if self.protocols is not None and not self.protocols:
            raise ValueError("NcclConfig.protocols is empty; leave it None to allow all")
        if self.flow_budget < 1:
            raise ValueError(f"NcclConfig.flow_budget is {self.flow_budget}; it must be >= 1")
        if self.stepwise_ring_ranks < 2:
            raise ValueError(f"NcclConfig.stepwise_ring_ranks is {self.stepwise_ring_ranks}; "
                             "it must be >= 2")

    @classmethod
    def make(cls, algorithms: Iterable[Algorithm | str] | str | None = None,
             protocols: Iterable[Protocol | str] | str | None = None,
             **kwargs: object) -> "NcclConfig":
        """A config from names: ``NcclConfig.make(algorithms="ring", protocols=["simple"])``."""
        algos = None if algorithms is None else _as_set(algorithms, Algorithm, "NCCL_ALGO")
        protos = None if protocols is None else _as_set(protocols, Protocol, "NCCL_PROTO")
        return cls(algorithms=algos, protocols=protos, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "NcclConfig":
        """Read ``NCCL_ALGO``, ``NCCL_PROTO``, ``NCCL_MIN/MAX_NCHANNELS``, ``NCCL_NVLS_ENABLE``."""
        algos = env.get("NCCL_ALGO")
        protos = env.get("NCCL_PROTO")
        nvls = env.get("NCCL_NVLS_ENABLE")
        return cls(
            algorithms=None if algos is None else _parse_choices(algos, Algorithm, "NCCL_ALGO"),
            protocols=None if protos is None else _parse_choices(protos, Protocol, "NCCL_PROTO"),
            min_channels=_env_int(env, "NCCL_MIN_NCHANNELS"),
            max_channels=_env_int(env, "NCCL_MAX_NCHANNELS"),
            nvls=None if nvls in (None, "2") else nvls != "0",
        )

    def allows(self, algorithm: Algorithm, protocol: Protocol) -> bool:
        return ((self.algorithms is None or algorithm in self.algorithms)
                and (self.protocols is None or protocol in self.protocols))


def _as_set(values: Iterable[Enum | str] | str, enum: type[Enum], env_name: str
            ) -> frozenset[Any]:
    if isinstance(values, str):
        return _parse_choices(values, enum, env_name)
    return frozenset(_parse_choices(",".join(str(getattr(v, "value", v)) for v in values),
                                    enum, env_name))


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected an integer") from None
