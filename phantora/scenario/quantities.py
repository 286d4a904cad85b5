"""The quantity types of scenario keys: rates, durations and sizes, each parsed on the way in
to its base unit (Gbit/s, ns, bytes) and bounded, with its :class:`Unit` for the reference."""

from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from hwmodel.units import parse_bytes, parse_duration_ns, parse_rate_gbps
from phantora.scenario.keys import Unit

MAX_RATE_GBPS = 100_000.0
"""100 Tbit/s: far above any link (NVLink 5 is 7.2 Tbit/s per GPU); catches a stray exponent
before it overflows ns-3's 64-bit bit/s ``DataRate``."""
MAX_DURATION_NS = 10**9
"""1 s per link: datacenter links take ns to µs, so anything longer is a unit slip."""
MAX_INSTANT_NS = 86_400 * 10**9
"""A day of virtual time: far beyond any simulated run (minutes of training)."""
MAX_QUEUE_BYTES = 2**32 - 1
"""ns-3 ``QueueSize`` counts bytes in 32 bits."""
_RATE_HINT = 'expected a rate with a unit, e.g. "400Gbps" or "50GBps"'
_SIZE_HINT = 'expected a size in bytes, e.g. 65536, "64KiB" or "1GiB"'
_DURATION_HINT = 'expected a duration with a unit, e.g. "500ns" or "1us"'


def _quantity(parse: Callable[[str | int | float], int | float], hint: str, value: object,
              *, unit_required: bool) -> int | float:
    """Run a :mod:`hwmodel.units` parser; any failure becomes ``hint`` plus the parser's reason."""
    accepted = (str,) if unit_required else (str, int, float)
    if isinstance(value, bool) or not isinstance(value, accepted):
        raise ValueError(hint)
    try:
        return parse(value)
    except OverflowError:  # the parsers turn "1e400" into inf, then fail converting it
        raise ValueError(f"{hint} (the number is too large)") from None
    except ValueError as err:
        reason = str(err).split(";")[0]
        raise ValueError(hint if reason.startswith("expected") else f"{hint} ({reason})") from None


def _rate_gbps(value: object) -> float:
    gbps = float(_quantity(parse_rate_gbps, _RATE_HINT, value, unit_required=True))
    if gbps > MAX_RATE_GBPS:
        raise ValueError(f"{_RATE_HINT}, at most {MAX_RATE_GBPS / 1000:g}Tbps")
    return gbps


def _duration_at_most(max_ns: int, largest: str) -> Callable[[object], int]:
    """A parser of durations up to ``max_ns`` (``largest`` as a user would write it)."""
    def parse(value: object) -> int:
        ns = int(_quantity(parse_duration_ns, _DURATION_HINT, value, unit_required=True))
        if ns > max_ns:
            raise ValueError(f"{_DURATION_HINT}, at most {largest}")
        return ns
    return parse


def _size_bytes(value: object) -> int:
    return int(_quantity(parse_bytes, _SIZE_HINT, value, unit_required=False))


def _at_least_one_byte(nbytes: int) -> int:
    if nbytes < 1:
        raise ValueError("expected a size of at least 1 byte")
    return nbytes


def _fits_ns3_queue(nbytes: int) -> int:
    if nbytes > MAX_QUEUE_BYTES:
        raise ValueError(f"expected at most {MAX_QUEUE_BYTES} bytes (ns-3 queue sizes are 32-bit)")
    return nbytes


GBPS = Unit("Gbit/s", "gbps", "rate", "400Gbps")
NS = Unit("ns", "ns", "duration", "500ns")
BYTES = Unit("bytes", "bytes", "size", "64KiB")
WHOLE_BYTES = Unit("bytes", "bytes", "integer")
"""Bytes as a plain integer, with no unit accepted (``mtu``)."""

Rate = Annotated[float, BeforeValidator(_rate_gbps), GBPS]
Duration = Annotated[int, BeforeValidator(_duration_at_most(MAX_DURATION_NS, "1s")), NS]
Instant = Annotated[int, BeforeValidator(_duration_at_most(MAX_INSTANT_NS, "86400s")), NS]
"""A moment of virtual time, from the run's start."""
Bytes = Annotated[int, BeforeValidator(_size_bytes), BYTES]
CollectiveBytes = Annotated[Bytes, AfterValidator(_at_least_one_byte)]
QueueBytes = Annotated[Bytes, AfterValidator(_fits_ns3_queue)]
