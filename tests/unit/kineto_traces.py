"""Small synthetic Kineto traces in the format ``torch.profiler`` exports, for the tests of
:mod:`phantora.profiles`: one host thread launching kernels under aten ops, one GPU stream."""

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PID, TID, DEVICE = 4242, 4242, 0


@dataclass
class TraceBuilder:
    """Appends events in microseconds, as Kineto writes them; :meth:`write` saves the file."""

    rank: int | None = 0
    world_size: int | None = 1
    device_name: str = "NVIDIA H200"
    events: list[dict[str, Any]] = field(default_factory=list)
    _correlation: int = 0

    def host(self, name: str, ts: float, dur: float, cat: str = "cpu_op",
             tid: int = TID, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid,
                            "ts": ts, "dur": dur, "args": args})

    def step(self, number: int, ts: float, dur: float) -> None:
        self.host(f"ProfilerStep#{number}", ts, dur, cat="user_annotation")

    def optimizer_step(self, ts: float, dur: float, optimizer: str = "AdamW") -> None:
        """The range ``torch.optim`` records around ``optimizer.step()``."""
        self.host(f"Optimizer.step#{optimizer}.step", ts, dur, cat="user_annotation")

    def kernel(self, name: str, launch_ts: float, start: float, dur: float, stream: int = 7,
               cat: str = "kernel", tid: int = TID, launch: str = "cudaLaunchKernel",
               **args: Any) -> int:
        """A launch call on the host at ``launch_ts`` and its GPU activity; the correlation."""
        self._correlation += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": launch, "pid": PID,
                            "tid": tid, "ts": launch_ts, "dur": 2.0,
                            "args": {"correlation": self._correlation, "cbid": 211}})
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": DEVICE, "tid": stream,
                            "ts": start, "dur": dur,
                            "args": {"device": DEVICE, "stream": stream,
                                     "correlation": self._correlation, **args}})
        return self._correlation

    def document(self) -> dict[str, Any]:
        info = ({} if self.rank is None else
                {"distributedInfo": {"backend": "nccl", "rank": self.rank,
                                     "world_size": self.world_size}})
        return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": self.device_name}],
                **info, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
                "traceEvents": self.events}

    def write(self, path: Path) -> Path:
        text = json.dumps(self.document())
        if path.name.endswith(".gz"):
            with gzip.open(path, "wt") as handle:
                handle.write(text)
        else:
            path.write_text(text)
        return path
