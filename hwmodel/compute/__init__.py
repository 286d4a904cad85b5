"""The kernel-time model: how long a GPU kernel runs on the scenario's GPU.

Measured tables of the H100 and H200 (:mod:`.table`), interpolated between measured shapes;
a roofline with efficiency curves fitted from those tables for everything else
(:mod:`.fitted`); :mod:`.model` picks between them per launch (:mod:`.spec` describes one) and
says which it used, and :mod:`.coverage` sums that up for ``summary.json``.
"""

from hwmodel.compute.coverage import Coverage
from hwmodel.compute.model import ComputeModel, CostSource, KernelCost
from hwmodel.compute.spec import KernelSpec

__all__ = ["ComputeModel", "CostSource", "Coverage", "KernelCost", "KernelSpec"]
