"""A kernel calibration file: kernel times taken from real PyTorch profiler traces of one GPU,
as rows of the measured tables, with the roofline fitted to them (``phantora-ns3 calibrate``;
the format is in ``docs/calibrate.md``).

One JSON document: ``format`` and ``version``, the catalogue ``gpu`` the traces ran on and the
``device_name`` they report, the ``traces`` it was built from (what each contributed), the
fitted ``roofline`` (:meth:`EfficiencyCurves.to_dict`) and the ``kernels``: one object per row
in the columns of ``hwmodel/measured/data/kernels_<gpu>.csv`` (``shape`` an object), so
:class:`~hwmodel.compute.table.KernelTable` reads them as it reads a measured table. Built by
``phantora.profiles.calibrate``; read where kernels are costed (the ranks' compute model) and
where a scenario naming it is checked.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwmodel.catalogue import CATALOGUE
from hwmodel.compute.fitted import EfficiencyCurves
from hwmodel.compute.table import KernelTable, MeasuredRow
from hwmodel.errors import CalibrationError

FORMAT = "phantora-kernel-calibration"
VERSION = 1

COLUMNS: tuple[str, ...] = ("gpu", "section", "op", "dtype", "cache", "shape", "flops", "bytes",
                            "time_us", "time_min_us", "time_max_us", "tflops", "gbs", "repeats",
                            "calls", "sets", "aten_ops")
"""A row's keys: the columns of the measured tables (``hwmodel/measured/data/README.md``)."""


@dataclass(frozen=True)
class Calibration:
    """Kernel rows and the roofline fitted to them, of one catalogue GPU."""

    gpu: str
    """Catalogue key of the GPU the traces ran on (``h100``)."""
    device_name: str
    """What the traces' ``deviceProperties`` name it."""
    kernels: tuple[dict[str, Any], ...]
    """Table rows, keys :data:`COLUMNS`."""
    roofline: EfficiencyCurves
    traces: tuple[dict[str, Any], ...] = ()
    """Per trace: its path and what of it the rows hold."""

    def table(self) -> KernelTable:
        """The rows as a table that estimates only within their reach (``extrapolate=False``):
        a trace's rows of an op may all be small, and its curve says nothing of large ones."""
        return KernelTable([MeasuredRow.parse(row) for row in self.kernels], extrapolate=False)

    def document(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "gpu": self.gpu,
                "device_name": self.device_name, "traces": list(self.traces),
                "roofline": self.roofline.to_dict(), "kernels": list(self.kernels)}

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.document(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> "Calibration":
        """The calibration in ``path``; :class:`CalibrationError` naming the file and what is
        wrong (missing, not a calibration, another version, an unknown GPU, damaged rows)."""
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CalibrationError(f"{path}: no such file; make one with phantora-ns3 "
                                   "calibrate PROFILE... --gpu NAME --out FILE") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CalibrationError(f"{path}: not a readable calibration file ({error})") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise CalibrationError(f"{path}: not a kernel calibration file (no \"format\": "
                                   f"\"{FORMAT}\"); make one with phantora-ns3 calibrate")
        if document.get("version") != VERSION:
            raise CalibrationError(f"{path}: format version {document.get('version')}, this "
                                   f"phantora-ns3 reads version {VERSION}; calibrate again")
        gpu = document.get("gpu")
        if gpu not in CATALOGUE:
            raise CalibrationError(f"{path}: gpu {gpu!r} is not in the catalogue "
                                   f"({', '.join(sorted(CATALOGUE))})")
        try:
            calibration = cls(gpu, str(document["device_name"]),
                              tuple(document["kernels"]),
                              EfficiencyCurves.from_dict(document["roofline"]),
                              tuple(document.get("traces", ())))
            for row in calibration.kernels:
                MeasuredRow.parse(row)  # every row readable now, not in a rank later
        except (KeyError, TypeError, ValueError) as error:
            raise CalibrationError(f"{path}: damaged calibration ({type(error).__name__}: "
                                   f"{error}); calibrate again") from None
        if not calibration.kernels:
            raise CalibrationError(f"{path}: holds no kernels; calibrate again")
        return calibration
