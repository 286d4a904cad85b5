"""A recorded run as Chakra execution traces for ASTRA-sim (:func:`export_run`); the format is
:mod:`phantora.study.chakra.export`'s. (A folder of Chakra traces is replayed by
:mod:`.replay`.)"""

from pathlib import Path

from phantora.record.graph import load_recording
from phantora.study.chakra.export import export_chakra


def export_run(run_dir: Path, out_dir: Path, prefix: str) -> list[Path]:
    """Write the run recorded in ``run_dir`` as ``out_dir/<prefix>.<rank>.et`` and
    ``comm_group.json``; the files written, ``comm_group.json`` last. Raises RecordingError for
    a folder that holds no readable recording."""
    return export_chakra(load_recording(run_dir), out_dir, prefix)
