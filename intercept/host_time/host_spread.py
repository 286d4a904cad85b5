"""What a collective's ranks wait for their slowest host.

The hosts of a job's ranks do not run the same code at the same speed: in real training steps
(``scripts/measure/time_host_calls.py``, unprofiled, its waits on the GPU left out), the host
work between two collective calls differs across the ranks of one step by a coefficient of
variation of about 0.26 over windows under a millisecond, 0.16-0.20 over 1-10 ms and 0.08-0.13
over 20-250 ms (4 x H200, three of its ranks: rank 0 also logs). A collective starts when its
last rank issues it, so where the hosts bound a step (the GPU idles between launches) each
rank's GPU waits there for the slowest host; where the GPU has work queued the wait is hidden.
The simulator's ranks all run at the reference host's mean speed, so it charges each call the
expected wait instead, deterministically:

    wait(window, n) = E[max of n standard normals] * sigma(window) * window
    sigma(window)^2 = sigma_persistent^2 + sigma_short^2 * tau / (tau + window)

with ``window`` the rank's host work (table-charged and Python, not its waits) since its previous
collective call and ``n`` the group's size: nothing on one rank, 0.56 sigma on two, 1.03 sigma on
four, 1.42 sigma on eight. A persistent part (a rank slower for the whole run) and a short-lived
part that averages out over windows longer than ``tau``. Fitted by ``time_host_calls.py spread``.
No torch import.
"""

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from hwmodel.measured.tables import HOST_SPREAD

INTEGRATION_STEPS = 4000
"""Steps of the midpoint rule over [-8, 8] for the expected maximum (exact to 1e-6)."""


@cache
def expected_max_of_normals(n: int) -> float:
    """E[max of ``n`` independent standard normals]: 0 for one, 0.5642 for two, 1.0294 for four."""
    if n < 1:
        raise ValueError(f"a group has at least one rank, not {n}")
    if n == 1:
        return 0.0
    low, high = -8.0, 8.0
    step = (high - low) / INTEGRATION_STEPS
    total = 0.0
    for i in range(INTEGRATION_STEPS):
        x = low + (i + 0.5) * step
        density = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        below = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        total += x * n * density * below ** (n - 1) * step
    return total


@dataclass(frozen=True)
class HostSpread:
    """The model of the module doc."""

    sigma_persistent: float
    sigma_short: float
    tau_ns: int
    provenance: dict[str, Any] = field(default_factory=dict)

    def sigma(self, window_ns: int) -> float:
        """The ranks' coefficient of variation of ``window_ns`` of host work."""
        short = self.sigma_short ** 2 * self.tau_ns / (self.tau_ns + max(window_ns, 0))
        return math.sqrt(self.sigma_persistent ** 2 + short)

    def wait_ns(self, window_ns: int, group_size: int) -> int:
        """A call's expected wait for the slowest of ``group_size`` hosts after ``window_ns`` of
        host work since the rank's previous collective call."""
        if group_size < 2 or window_ns <= 0:
            return 0
        return round(expected_max_of_normals(group_size) * self.sigma(window_ns) * window_ns)


def spread_from_json(data: dict[str, Any]) -> HostSpread:
    """The model from its JSON form; names the bad key."""
    for key in ("sigma_persistent", "sigma_short", "tau_ns"):
        if key not in data:
            raise ValueError(f"host spread: {key!r} is missing (re-fit with "
                             "scripts/measure/time_host_calls.py spread)")
    persistent, short, tau = (float(data["sigma_persistent"]), float(data["sigma_short"]),
                              int(data["tau_ns"]))
    if not (0 <= persistent < 1 and 0 <= short < 1) or tau <= 0:
        raise ValueError(f"host spread: sigma_persistent ({persistent}) and sigma_short "
                         f"({short}) must be in [0, 1), tau_ns ({tau}) > 0")
    return HostSpread(persistent, short, tau, dict(data.get("provenance", {})))


@cache
def load_host_spread(path: Path = HOST_SPREAD.path) -> HostSpread:
    """The shipped model (cached)."""
    return spread_from_json(json.loads(path.read_text()))
