"""Parsing of human-written quantities in scenario files: sizes, rates and durations.

Each parser accepts a plain number (already in the base unit) or a string with a unit and
raises ``ValueError`` with the accepted forms, which the scenario loader turns into a
``ScenarioError`` that names the key.
"""

import re

_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z/]*)\s*$")

_BYTE_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30,
}
# Rate units in gigabits per second. Byte rates ("GBps", "GB/s") differ from bit rates only by
# case, so they are matched exactly; bit rates case-insensitively.
_BYTE_RATE_UNITS_GBPS = {"GBps": 8.0, "GB/s": 8.0, "TBps": 8000.0, "TB/s": 8000.0, "MBps": 8e-3}
_BIT_RATE_UNITS_GBPS = {"gbps": 1.0, "gbit/s": 1.0, "mbps": 1e-3, "tbps": 1e3, "kbps": 1e-6}
_TIME_UNITS_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9}


def _split(text: str, what: str, examples: str) -> tuple[float, str]:
    match = _NUMBER_UNIT.match(text)
    number = float(match.group(1)) if match else float("nan")
    if not match or number == float("inf"):
        raise ValueError(f"expected {what} such as {examples}")
    return number, match.group(2)


def parse_bytes(value: int | float | str) -> int:
    """Size in bytes from ``1048576``, ``"64KiB"``, ``"1GiB"``, ``"4MB"`` (K/M/G alone are binary)."""
    if isinstance(value, bool):
        raise ValueError("expected a size in bytes such as 65536, \"64KiB\" or \"1GiB\"")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size must be a whole, non-negative number of bytes")
        return value  # exact, however large
    if isinstance(value, float):
        number, unit = value, ""
    else:
        number, unit = _split(value, "a size", '65536, "64KiB", "1GiB"')
    scale = _BYTE_UNITS.get(unit.lower())
    if scale is None:
        raise ValueError(f"unknown size unit {unit!r}; use B, KiB, MiB, GiB, KB, MB or GB")
    result = number * scale
    if result in (float("inf"), float("-inf")) or result != int(result) or result < 0:
        raise ValueError("a size must be a whole, non-negative number of bytes")
    return int(result)


def parse_rate_gbps(value: int | float | str) -> float:
    """Rate in gigabits/s from ``400`` (Gbps), ``"400Gbps"``, ``"100Mbps"`` or ``"50GBps"`` (bytes)."""
    if isinstance(value, bool):
        raise ValueError('expected a rate with a unit, e.g. "400Gbps" or "50GBps"')
    if isinstance(value, (int, float)):
        rate = float(value)
    else:
        number, unit = _split(value, "a rate with a unit", '"400Gbps" or "50GBps"')
        if unit in _BYTE_RATE_UNITS_GBPS:
            rate = number * _BYTE_RATE_UNITS_GBPS[unit]
        elif unit.lower() in _BIT_RATE_UNITS_GBPS:
            rate = number * _BIT_RATE_UNITS_GBPS[unit.lower()]
        else:
            raise ValueError(f'unknown rate unit {unit!r}; expected e.g. "400Gbps", "100Mbps" or "50GBps"')
    if rate <= 0:
        raise ValueError("a rate must be positive")
    return rate


def parse_duration_ns(value: int | float | str) -> int:
    """Duration in integer nanoseconds from ``500`` (ns), ``"1us"``, ``"2.5us"``, ``"1ms"``."""
    if isinstance(value, bool):
        raise ValueError('expected a duration such as "1us" or 500 (ns)')
    if isinstance(value, (int, float)):
        number, unit = float(value), "ns"
    else:
        number, unit = _split(value, "a duration", '"500ns", "1us" or "2ms"')
    scale = _TIME_UNITS_NS.get(unit.lower() if unit else "ns")
    if scale is None:
        raise ValueError(f"unknown time unit {unit!r}; use ns, us, ms or s")
    if number < 0:
        raise ValueError("a duration must not be negative")
    return round(number * scale)


def format_bytes(nbytes: int) -> str:
    """``1073741824`` -> ``"1GiB"``; used in tables and messages."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"
