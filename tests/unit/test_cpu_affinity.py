import os
import subprocess
import sys

import pytest

from phantora.cpu_affinity import pinned, usable_cpus


def test_pinned_narrows_this_process_and_its_children_then_restores() -> None:
    before = usable_cpus()
    with pinned(1):
        assert usable_cpus() == before[:1]
        count = "import os; print(len(os.sched_getaffinity(0)))"
        child = subprocess.run([sys.executable, "-c", count], capture_output=True, text=True,
                               check=True)
        assert child.stdout.strip() == "1"
    assert usable_cpus() == before


def test_pinned_to_more_cpus_than_usable_is_refused() -> None:
    with pytest.raises(ValueError, match="may use"):
        with pinned(len(os.sched_getaffinity(0)) + 1):
            pass
