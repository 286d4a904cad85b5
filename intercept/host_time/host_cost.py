"""What a reference GPU host's CPU pays for each intercepted operation: the table-charged part of
a rank's host time.

A rank's virtual host time has two parts (``intercept.host_time.clock``):

* **table-charged**: per intercepted operation, what the reference host spends on it beyond the
  script's own Python call, from a table measured on H100 cloud VMs
  (``scripts/measure/measure_host_costs.py``; ``hwmodel/measured/data/host_costs.json`` with its
  provenance, ``hwmodel.measured.tables.HOST_COSTS``). It never depends on the machine that
  simulates, its load or the number of ranks on it.
* **residual**: the script's own Python between intercepted operations, counted
  (:mod:`intercept.host_time.python_work`, the default) or measured here
  (:mod:`intercept.host_time.residual`).

Families (:func:`family_of`, by aten name): an op's binding, dispatcher, allocator and CUDA
launch cost on the reference host differ by kind (a view ~2 us, an elementwise op ~9 us, a
matrix product ~20 us, a foreach call ~12 us plus ~0.3 us per tensor), and so does the c10d
collective call path (~30-40 us per call; ~5 us less for a blocking call, ``async_op=False``, which
torch 2.8 on runs on the caller's stream). The simulator's own cost of the same op (FakeTensor
execution, recording, IPC) is kept out of virtual time entirely (``intercept.process.shim``), so the
charge is the table's cost less the plain Python call that the clock still counts as the
script's (``script_call_ns``).

Matrix products whose shape the process has not run before cost more: cuBLAS's heuristic query
(``intercept.host_time.gemm_heuristic``, its own fitted costs, attached to the table as ``gemm``).

The autograd layer's C++ and a tensor subclass's dispatch run for real around each fake op, but
only measured CPU time sees their C++ part. Where the script's time is counted
(``intercept.host_time.python_work``), the table charges them instead (``layers_ns``): recording an
op whose inputs require grad (``autograd_record``), the engine's work per backward node beyond its
ops (``autograd_node``, fitted on real steps, ``intercept.host_time.host_fit``), and DTensor's
dispatch of an op beyond the op on its local tensors (``tensor_subclass``: unwrapping, sharding
propagation, wrapping; fitted likewise; the subclass's Python is then not counted). DDP's
reducer (C++) is not charged in that mode; FSDP2's hooks are Python, counted.

No torch import: the coordinator and tests read the table without it.
"""

import json
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from hwmodel.measured.host_profile import FAMILIES, SYNC_CALLS, family_of
from hwmodel.measured.tables import HOST_COSTS
from intercept.host_time.collective_host import CollectiveCallCost, load_collective_cost
from intercept.host_time.compiled_call import load_compiled_call
from intercept.host_time.cudnn_rnn_host import PASSES, load_cudnn_rnn_host
from intercept.host_time.gemm_heuristic import GemmHeuristic, load_gemm_heuristic
from intercept.host_time.host_fit import load_fit

TABLE_PATH = HOST_COSTS.path
TABLE_VERSION = 6

LAYERS = ("autograd_record",)
"""The keys of ``layers_ns`` in the table's file; :func:`load_table` adds ``autograd_node`` and
``tensor_subclass`` from the constants fitted on real steps (``intercept.host_time.host_fit``)."""
SORT_SMALL = "sort_small"
"""The ``ops_ns`` key of a ``sort`` of at most :data:`SMALL_SORT_MAX` elements along its dim:
ATen sorts those in one kernel, longer ones with a radix sort of tens of kernels."""
SMALL_SORT_MAX = 4096
"""ATen's ``should_use_small_sort`` bound (``aten/src/ATen/native/cuda/Sort.h``)."""
EMBEDDING_BACKWARD_SMALL = "embedding_dense_backward_small"
"""The ``ops_ns`` key of an embedding's backward over at most
:data:`SMALL_EMBEDDING_BACKWARD_MAX` indices: one accumulating kernel, where more indices are
sorted and reduced in segments (``aten/src/ATen/native/cuda/Embedding.cu``)."""
SMALL_EMBEDDING_BACKWARD_MAX = 3072
INDEX_PUT_ACCUMULATE = "index_put_accumulate"
"""The ``ops_ns`` key of an ``index_put`` that accumulates (the backward of indexing): it sorts
the indices first, so it costs several times one that does not."""
CUBLAS_GEMMS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
"""Products that go through cuBLAS's per-shape heuristic
(``intercept.host_time.gemm_heuristic``)."""


@dataclass(frozen=True)
class HostCostTable:
    """Reference-host CPU ns per operation (see the module doc); loaded by :func:`load_table`."""

    reference: str
    """The ``simulation.host_cpu`` reference host the table was measured on."""
    script_call_ns: int
    """A plain Python call of two arguments there: what the clock still counts of an op."""
    families_ns: dict[str, int]
    """Per family, one call of one op (``view`` for ops that launch nothing)."""
    foreach_per_tensor_ns: int
    """A foreach or fused-optimizer call's cost per tensor beyond the first."""
    ops_ns: dict[str, int]
    """Ops whose host path departs from their family's (tens of kernels for a sort, a host
    synchronisation to learn a count), by aten name, in place of the family's cost;
    :data:`INDEX_PUT_ACCUMULATE` for an accumulating ``index_put`` (a sort inside),
    :data:`SORT_SMALL` and :data:`EMBEDDING_BACKWARD_SMALL` where ATen takes a one-kernel path."""
    collectives_ns: dict[str, int]
    """c10d's call path per collective on a one-rank group, issued async (``async_op=True``,
    the GPU busy; ``default`` for ops without a row of their own)."""
    collective_async_extra_ns: int
    """What an async call (``async_op=True``) costs beyond the same call blocking
    (``async_op=False``) on a one-rank group: since torch 2.8 ProcessGroupNCCL runs a blocking
    call on the caller's stream, without the event record and stream wait that order its own
    stream after the caller's, the stash of its tensors and the ``Work`` handed to Python
    (pytorch/pytorch#148590). The one-rank all_reduce's async row less its blocking row."""
    group_collectives: CollectiveCallCost
    """A collective call on a group of two or more ranks, by the time since the rank's
    previous one (``intercept.host_time.collective_host``)."""
    gemm: GemmHeuristic
    """Extra cost of a cuBLAS product whose shape is new to the process."""
    layers_ns: dict[str, int]
    """What layers above an op cost per op (see the module doc): ``autograd_record``,
    ``autograd_node``, ``tensor_subclass``; a compiled graph's generated kernel launch, a further
    buffer it reads and one it writes, backward node and backward run:
    ``compiled_generated_launch``, ``compiled_generated_read``, ``compiled_generated_write``,
    ``compiled_backward_call`` and ``compiled_backward_run``
    (``intercept.host_time.compiled_call``); a cuDNN recurrent call's cost and its cost per
    layer-step, per pass: ``cudnn_rnn_fwd_call``, ``cudnn_rnn_fwd_layer_step``,
    ``cudnn_rnn_bwd_call``, ``cudnn_rnn_bwd_layer_step``
    (``intercept.host_time.cudnn_rnn_host``)."""
    sync_ns: dict[str, int]
    """What the host spends in a call that waits on or marks the GPU's progress, the wait itself
    aside: ``device`` (``torch.cuda.synchronize()``), ``stream`` (``Stream.synchronize()``),
    ``event`` (``Event.synchronize()``), ``query`` (``Event.query()``), ``record_event``
    (``Event.record()``). The simulator's own stand-ins for these calls are not counted as the
    script's Python; these costs replace them."""
    provenance: dict[str, Any]

    def scaled_to(self, reference: str) -> "HostCostTable":
        """The table for another reference host (``simulation.host_cpu``), scaled by the two
        hosts' ``torch_ops`` component of the host-speed benchmark
        (``intercept.host_time.host_benchmark``: torch's CPU op dispatch, what these costs are made
        of)."""
        if reference == self.reference:
            return self
        from hwmodel.measured.host_references import references

        return self.scaled(references().op_factor(self.reference, reference), reference)

    def scaled(self, factor: float, reference: str) -> "HostCostTable":
        """Every cost ``factor`` times as long (a host ``1 / factor`` times as fast), named
        ``reference``."""

        def scale(values: dict[str, int]) -> dict[str, int]:
            return {k: round(v * factor) for k, v in values.items()}

        return HostCostTable(reference, round(self.script_call_ns * factor),
                             scale(self.families_ns), round(self.foreach_per_tensor_ns * factor),
                             scale(self.ops_ns), scale(self.collectives_ns),
                             round(self.collective_async_extra_ns * factor),
                             self.group_collectives.scaled(reference, factor),
                             self.gemm.scaled(reference, factor), scale(self.layers_ns),
                             scale(self.sync_ns),
                             {**self.provenance, "scaled_from": self.reference,
                              "scale_factor": round(factor, 4)})

    def op_ns(self, name: str, *, launches: bool, tensors: int = 1) -> int:
        """The charge for one intercepted aten op (``name`` without namespace and overload):
        its own row of ``ops_ns`` or else its family's reference cost, less the script's Python
        call. ``launches``: whether it launches a kernel (views and metadata ops do not);
        ``tensors``: the length of a foreach op's first list."""
        if launches and name in self.ops_ns:
            return max(0, self.ops_ns[name] - self.script_call_ns)
        family = family_of(name) if launches else "view"
        cost = self.families_ns[family]
        if family == "foreach":
            cost += self.foreach_per_tensor_ns * max(0, tensors - 1)
        return max(0, cost - self.script_call_ns)

    def cudnn_rnn_ns(self, *, backward: bool, layer_steps: int) -> int:
        """The charge for one cuDNN recurrent call (``_cudnn_rnn``, or its backward) that
        enqueues ``layer_steps`` time steps one by one, less the script's Python call."""
        direction = "bwd" if backward else "fwd"
        cost = (self.layers_ns[f"cudnn_rnn_{direction}_call"]
                + self.layers_ns[f"cudnn_rnn_{direction}_layer_step"] * layer_steps)
        return max(0, cost - self.script_call_ns)

    def collective_ns(self, op: str, group_size: int = 1, gap_ns: int | None = None, *,
                      blocking: bool = False) -> int:
        """The charge for issuing one collective through c10d (``all_reduce``, ``send``...) on a
        group of ``group_size`` ranks, after ``gap_ns`` of host work since the rank's previous
        collective call ended (``None``: its first); the gap matters on groups of two or
        more. ``blocking``: issued with ``async_op=False``, which on a one-rank group costs
        :attr:`collective_async_extra_ns` less (NB: on larger groups the model fitted on
        training calls holds both kinds)."""
        if group_size > 1:
            cost = self.group_collectives.call_ns(op, gap_ns)
        else:
            cost = self.collectives_ns.get(op, self.collectives_ns["default"])
            if blocking:
                cost -= self.collective_async_extra_ns
        return max(0, cost - self.script_call_ns)


def table_from_json(data: dict[str, Any], gemm: GemmHeuristic | None = None) -> HostCostTable:
    """A table from its JSON form (with the shipped GEMM heuristic costs unless ``gemm`` is
    given); names the bad key where one is missing."""
    if data.get("version") != TABLE_VERSION:
        raise ValueError(f"host cost table version {data.get('version')!r}; this code reads "
                         f"version {TABLE_VERSION} (re-derive it with scripts/"
                         "measure_host_costs.py --import-raw ... --import-ops ...)")
    families = {k: int(v) for k, v in data["families_ns"].items()}
    missing = set(FAMILIES) - families.keys()
    if missing:
        raise ValueError(f"host cost table: families_ns lacks {sorted(missing)}")
    if "ops_ns" not in data:
        raise ValueError("host cost table: ops_ns missing (re-derive it with "
                         "scripts/measure/measure_host_costs.py --import-raw ... --import-ops ...)")
    ops = {k: int(v) for k, v in data["ops_ns"].items()}
    collectives = {k: int(v) for k, v in data["collectives_ns"].items()}
    if "default" not in collectives:
        raise ValueError("host cost table: collectives_ns lacks 'default'")
    if "collective_async_extra_ns" not in data:
        raise ValueError("host cost table: collective_async_extra_ns missing (the one-rank "
                         "all_reduce's async row less its blocking row: scripts/measure/"
                         "measure_host_costs.py --import-raw ...)")
    sync = {k: int(v) for k, v in data.get("sync_ns", {}).items()}
    if sync.keys() != set(SYNC_CALLS):
        raise ValueError(f"host cost table: sync_ns needs exactly {', '.join(SYNC_CALLS)}, "
                         f"found {', '.join(sorted(sync)) or 'none'}")
    layers = {k: int(v) for k, v in data["layers_ns"].items()}
    if layers.keys() != set(LAYERS):
        raise ValueError(f"host cost table: layers_ns needs exactly {', '.join(LAYERS)}, "
                         f"found {', '.join(sorted(layers))}")
    gemm = load_gemm_heuristic() if gemm is None else gemm
    if gemm.reference != data["reference"]:
        raise ValueError(f"host cost table for {data['reference']!r}, GEMM heuristic costs for "
                         f"{gemm.reference!r}: measure both on one reference host")
    group_collectives = load_collective_cost()
    if group_collectives.reference != data["reference"]:
        raise ValueError(f"host cost table for {data['reference']!r}, collective call costs for "
                         f"{group_collectives.reference!r}: put both on one reference host")
    return HostCostTable(reference=str(data["reference"]),
                         script_call_ns=int(data["script_call_ns"]), families_ns=families,
                         foreach_per_tensor_ns=int(data["foreach_per_tensor_ns"]),
                         ops_ns=ops, collectives_ns=collectives,
                         collective_async_extra_ns=int(data["collective_async_extra_ns"]),
                         group_collectives=group_collectives, gemm=gemm,
                         layers_ns=layers, sync_ns=sync, provenance=dict(data["provenance"]))


@cache
def load_table(path: Path = TABLE_PATH) -> HostCostTable:
    """The shipped table (cached), with the fitted costs of the autograd engine's node, of a
    tensor-subclass dispatch, of compiled graphs' backward and of cuDNN's recurrent calls."""
    table = table_from_json(json.loads(path.read_text()))
    fit, compiled, rnn = load_fit(), load_compiled_call(), load_cudnn_rnn_host()
    for name, reference in (("host fit", fit.reference),
                            ("compiled call cost", compiled.reference),
                            ("cuDNN recurrent host cost", rnn.reference)):
        if reference != table.reference:
            raise ValueError(f"host cost table for {table.reference!r}, {name} for "
                             f"{reference!r}: put both on one reference host")
    return replace(table, layers_ns={**table.layers_ns, "autograd_node": fit.autograd_node_ns,
                                     "tensor_subclass": fit.tensor_subclass_ns,
                                     "compiled_generated_launch": compiled.generated_launch_ns,
                                     "compiled_generated_read": compiled.generated_read_ns,
                                     "compiled_generated_write": compiled.generated_write_ns,
                                     "compiled_backward_call": compiled.backward_call_ns,
                                     "compiled_backward_run": compiled.backward_run_ns,
                                     **{f"cudnn_rnn_{d}_call": rnn.call_ns[d] for d in PASSES},
                                     **{f"cudnn_rnn_{d}_layer_step": rnn.layer_step_ns[d]
                                        for d in PASSES}})
