"""How far a long simulation has got, as it goes (:class:`ProgressBackend`).

A packet-level step of a large fabric can take minutes of wall time between two lines of a
rank's log; this wrapper samples the network's clock and event count every ``every_s`` wall
seconds while the engine advances it and hands the sample to a reporter, :func:`on_console`:
a status line on a terminal, else a line on stderr every half minute (stdout stays what the
run printed, the same from run to run). Sampling only reads: the simulation is unchanged.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console

from phantora.network.base import FlowDone, FlowId, GpuId, NetworkBackend, NetworkStats


@dataclass(frozen=True, slots=True)
class Progress:
    """One sample: simulated time, network events so far and their rate since the last one."""

    simulated_ns: int
    events: int
    events_per_s: float
    flows: int
    wall_s: float

    def line(self) -> str:
        rate = f"{self.events_per_s / 1e6:.2f} M events/s" if self.events else "fluid model"
        return (f"network: {self.simulated_ns / 1e6:,.3f} ms simulated, {self.flows:,} flows, "
                f"{self.events / 1e6:,.1f} M events ({rate}), {self.wall_s:,.0f} s wall")


def network_events(stats: NetworkStats) -> int:
    """Events the backend's parts processed (ns-3 counts them; the fluid model does not)."""
    return sum(int(value) for key, value in stats.extra.items()
               if key.rsplit(".", 1)[-1] == "events" and isinstance(value, int | float))


class ProgressBackend:
    """A :class:`~phantora.network.base.NetworkBackend` passing everything to ``inner`` and
    calling ``report`` with a :class:`Progress` at most every ``every_s`` wall seconds."""

    def __init__(self, inner: NetworkBackend, report: Callable[[Progress], None],
                 every_s: float = 1.0) -> None:
        self._inner = inner
        self._report = report
        self._every_s = every_s
        self._start = self._last = time.monotonic()
        self._last_events = 0

    def add_flow(self, src: GpuId, dst: GpuId, nbytes: int, start_ns: int, tag: int = 0) -> FlowId:
        return self._inner.add_flow(src, dst, nbytes, start_ns, tag)

    def now_ns(self) -> int:
        return self._inner.now_ns()

    def next_event_ns(self) -> int | None:
        return self._inner.next_event_ns()

    def advance_to(self, t_ns: int) -> list[FlowDone]:
        done = self._inner.advance_to(t_ns)
        now = time.monotonic()
        if now - self._last >= self._every_s:
            stats = self._inner.stats()
            events = network_events(stats)
            self._report(Progress(self._inner.now_ns(), events,
                                  (events - self._last_events) / (now - self._last), stats.flows,
                                  now - self._start))
            self._last, self._last_events = now, events
        return done

    def stats(self) -> NetworkStats:
        return self._inner.stats()

    def close(self) -> None:
        self._inner.close()


@contextmanager
def on_console(console: Console, line_every_s: float = 30.0
               ) -> Iterator[Callable[[Progress], None]]:
    """A reporter for :class:`ProgressBackend`: ``console``'s status line while this context
    is open, or when ``console`` is no terminal a line on stderr every ``line_every_s``."""
    if console.is_terminal:
        with console.status("network: starting", spinner="dots") as status:
            yield lambda progress: status.update(progress.line())
        return
    stderr = Console(stderr=True, highlight=False)
    printed = [0.0]

    def report(progress: Progress) -> None:
        if progress.wall_s - printed[0] >= line_every_s:
            stderr.print(progress.line(), soft_wrap=True)
            printed[0] = progress.wall_s

    yield report
