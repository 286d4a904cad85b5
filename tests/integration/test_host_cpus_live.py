"""The simulated host is the one the script sees: ``os.cpu_count()``, the affinity mask and
``multiprocessing.cpu_count()`` report ``cluster.cpus_per_host`` (by default the GPU's reference
server, 28 CPUs per H100), in the rank and in its DataLoader workers; a DataLoader with more
workers than this machine's CPUs does not warn; the simulator's own pinning still reads this
machine's mask (``intercept/process/host_cpus.py``)."""

import json
from pathlib import Path

import pytest

from phantora.cli import main

SCRIPT = """\
import errno, json, multiprocessing, os, warnings
import torch
from torch.utils.data import DataLoader, Dataset
from phantora.cpu_affinity import usable_cpus

class CpuCounts(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, index):
        return torch.tensor([os.cpu_count(), len(os.sched_getaffinity(0))])

out = {"cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
       "multiprocessing": multiprocessing.cpu_count(), "real": len(usable_cpus())}
out["workers"] = len(usable_cpus()) + 2
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loader = DataLoader(CpuCounts(), num_workers=out["workers"])
    out["workers_saw"] = sorted({tuple(row.tolist()) for batch in loader for row in batch})
out["warnings"] = [str(warning.message) for warning in caught]
os.sched_setaffinity(0, {2, 3, 5000})
out["narrowed"] = sorted(os.sched_getaffinity(0))
try:
    os.sched_setaffinity(0, {5000})
except OSError as error:
    out["outside"] = errno.errorcode[error.errno]
print("CPUS", json.dumps(out), flush=True)
"""


def seen(tmp: Path, cluster: str) -> dict:
    (tmp / "train.py").write_text(SCRIPT)
    (tmp / "s.yaml").write_text(f"cluster: {cluster}\nworkload: {{script: train.py}}\n")
    assert main([str(tmp / "s.yaml"), "--out", str(tmp / "out")]) == 0
    log = (tmp / "out" / "ranks" / "rank0.log").read_text()
    return json.loads(next(line for line in log.splitlines()
                           if line.startswith("CPUS"))[len("CPUS "):])


@pytest.mark.slow
def test_the_script_sees_the_simulated_hosts_cpus(tmp_path: Path) -> None:
    found = seen(tmp_path, "{gpu: h100, gpus_per_host: 1}")
    assert found["cpu_count"] == found["affinity"] == found["multiprocessing"] == 28
    assert found["real"] < found["workers"] <= 28  # more workers than this machine has
    assert found["workers_saw"] == [[28, 28]]  # forked workers see the same host
    assert not [w for w in found["warnings"] if "worker" in w], found["warnings"]
    # a script's own pinning narrows what it sees, checked as Linux checks it, pins nothing
    assert found["narrowed"] == [2, 3] and found["outside"] == "EINVAL"


@pytest.mark.slow
def test_cpus_per_host_sets_the_count(tmp_path: Path) -> None:
    found = seen(tmp_path, "{gpu: a100-80g, gpus_per_host: 1, cpus_per_host: 6}")
    assert found["cpu_count"] == found["affinity"] == 6
    assert found["workers_saw"] == [[6, 6]]
