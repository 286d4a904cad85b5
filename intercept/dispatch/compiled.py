"""``torch.compile`` on simulated GPUs: the backend that stands in for Inductor, and the runtime
that launches and charges what Inductor would, without Triton or a GPU.

``torch.compile(model)`` (backend ``inductor``, the default) is given this backend instead
(``intercept.dispatch.compile_backend``): Dynamo traces as usual, AOTAutograd splits forward and
backward with Inductor's decompositions and its min-cut partitioner (so the saved activations are
Inductor's), and each resulting ATen graph is planned once into what Inductor makes of it
(``intercept.dispatch.inductor_plan``: extern kernels costed as their eager ops, the rest fused
into generated kernels).

At run time the graph is executed on fake tensors with its own kernels suppressed (outputs,
saved activations and allocator traffic as usual; the values no planned kernel writes take no
memory, :attr:`~intercept.dispatch.inductor_plan.GraphPlan.transient`) and the plan is launched
instead. Host cost: a generated kernel's launch is charged ``compiled_generated_launch`` for one
buffer read and one written, ``compiled_generated_read`` for each further buffer it reads and
``compiled_generated_write`` for each further one it writes
(:class:`~intercept.dispatch.inductor_plan.PlannedKernel`), and the launch loop's Python is
counted, fitted so that the simulated chains of ``scripts/measure/compiled_chains.py`` take what
twelve real records took (a launch 7.8 us on the reference host, a further buffer read 0.43 us,
one written 4.5 us); an extern kernel's launch costs its eager op's.
Each call of a compiled forward graph costs :data:`GRAPH_CALL_OVERHEAD_NS`, of a backward graph
the fitted ``compiled_backward_call``, and a backward run that reaches one
``compiled_backward_run`` once (``intercept.host_time.compiled_call``: hundreds of us);
under ``mode="reduce-overhead"`` (CUDA graphs) a graph replay costs
:data:`GRAPH_REPLAY_OVERHEAD_NS` in all and its kernels nothing on the host.
Compile time is the CPU time Dynamo and AOTAutograd spend here (the script's own) plus
:data:`TRITON_COMPILE_NS` per distinct generated kernel, charged to the first call of a graph:
it shows in the first step, as on a real GPU, not in later ones.
"""

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ContextManager, Protocol, cast

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch._aot_autograd.utils import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table

from hwmodel.compute.inductor import is_generated
from hwmodel.compute.spec import KernelSpec
from intercept.dispatch import fake_mode, op_costs
from intercept.dispatch.inductor_plan import GraphPlan, plan_kernels
from intercept.host_time.host_cost import HostCostTable
from intercept.process import shim

GRAPH_CALL_OVERHEAD_NS = 20_000
"""Host cost of one call of a compiled forward graph beyond its launches and the counted Python
of its call path (AOTAutograd's runtime wrapper): assumed, of the order of a few eager ops. The
counted Python alone already exceeds the real call: simulated, a forward call of the chains of
``scripts/measure/compiled_chains.py`` costs 123 us (inference) and 217 us (a training graph of
four means) on the reference host, real 38-92 us (median 57) and 137-146 us. A backward graph's
call costs the fitted ``compiled_backward_call`` (``intercept.host_time.compiled_call``)."""
GRAPH_REPLAY_OVERHEAD_NS = 10_000
"""Host cost of replaying one CUDA graph (``cudaGraphLaunch`` and cudagraph trees' checks):
assumed."""
TRITON_COMPILE_NS = 300_000_000
"""Compile time of one distinct generated kernel (Triton to PTX to cubin, in Inductor's worker
processes): assumed; real compile times vary with the host's cores."""


class CompiledRuntime(Protocol):
    """What a compiled graph needs of ``intercept.runtime.RankRuntime``."""

    host_costs: HostCostTable

    def excluded(self) -> ContextManager[None]: ...
    def kernel(self, spec: KernelSpec, stream: int,
               launch_overhead_ns: int | None = None) -> None: ...
    def charge_host(self, duration_ns: int) -> None: ...


@functools.cache
def backend(mode: str | None = None) -> Callable[..., Any]:
    """The ``torch.compile`` backend standing in for Inductor under ``mode`` (one object per
    mode: Dynamo recompiles a frame whose backend object changes)."""
    cuda_graphs = mode in ("reduce-overhead", "max-autotune")
    compiler = functools.partial(_compile_graph, cuda_graphs=cuda_graphs)
    bw_compiler = functools.partial(_compile_graph, cuda_graphs=cuda_graphs, backward=True)
    return aot_autograd(fw_compiler=compiler, bw_compiler=bw_compiler,
                        inference_compiler=compiler, decompositions=select_decomp_table(),
                        partition_fn=min_cut_rematerialization_partition,
                        keep_inference_input_mutations=True)


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: Any, *,
                   cuda_graphs: bool, backward: bool = False) -> Callable[..., Any]:
    plan, new = plan_kernels(gm)
    # identical graphs (a model's repeated blocks) hit Inductor's graph cache: compiled once
    generated = len({(k.spec.name, k.spec.bytes) for k in plan.kernels
                     if is_generated(k.spec.name)})
    return make_boxed_func(CompiledGraph(gm, plan, cuda_graphs,
                                         TRITON_COMPILE_NS * generated if new else 0, backward))


@dataclass
class CompiledGraph:
    """One compiled ATen graph: run on fake tensors, launch the plan instead of its ops."""

    gm: torch.fx.GraphModule
    plan: GraphPlan
    cuda_graphs: bool
    compile_ns: int
    """Code generation still to charge (at the first call)."""
    backward: bool = False
    """An AOTAutograd backward graph (its call costs ``compiled_backward_call``)."""

    def __call__(self, *args: Any) -> Any:
        mode = fake_mode.active()
        if mode is None:  # not under the simulator: run the ops as they are
            return self.gm(*args)
        rt = cast(CompiledRuntime, mode.runtime)
        with rt.excluded(), mode.kernels_replaced():
            # the ops of the graph: a real host runs generated code instead of dispatching them
            out = _TransientInterpreter(self.gm, self.plan.transient, mode).run(*args)
        device = next((t.device.index or 0 for t in op_costs.flat_tensors(list(args))
                       if t.device.type == "cuda"), 0)
        rt.charge_host(self.compile_ns + self._call_ns(rt))
        self.compile_ns = 0
        stream = shim.library().fakecuda_current_stream(device)
        layers = rt.host_costs.layers_ns
        for kernel in self.plan.kernels:
            launch_ns: int | None = None  # an extern kernel: its eager op's cost
            if self.cuda_graphs:
                launch_ns = 0
            elif is_generated(kernel.spec.name):  # fitted on kernels of one read and one write
                launch_ns = (layers["compiled_generated_launch"]
                             + layers["compiled_generated_read"] * max(kernel.reads - 1, 0)
                             + layers["compiled_generated_write"] * max(kernel.writes - 1, 0))
            rt.kernel(kernel.spec, stream, launch_overhead_ns=launch_ns)
        return out

    def _call_ns(self, rt: "CompiledRuntime") -> int:
        """The host cost of this call beyond its launches: a backward node's, and its run's
        for the first compiled node of a backward run."""
        global _last_backward_run
        if self.cuda_graphs:
            return GRAPH_REPLAY_OVERHEAD_NS
        if not self.backward:
            return GRAPH_CALL_OVERHEAD_NS
        layers = rt.host_costs.layers_ns
        run = torch._C._current_graph_task_id()
        first = run != _last_backward_run
        _last_backward_run = run
        return layers["compiled_backward_call"] + (layers["compiled_backward_run"] if first else 0)


class _TransientInterpreter(torch.fx.Interpreter):
    """Runs a compiled graph's ops on fake tensors, its transient nodes without device memory
    (``fake_mode``'s ``shapes_only``); every value is dropped after its last use, as the
    graph's own code does."""

    def __init__(self, gm: torch.fx.GraphModule, transient: frozenset[str], mode: Any) -> None:
        super().__init__(gm)
        self.transient = transient
        self.mode = mode

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.name in self.transient:
            with self.mode.shapes_only():
                return super().run_node(n)
        return super().run_node(n)


_last_backward_run: int | None = None
"""The autograd graph task (backward run) that ran the process's last compiled backward node."""
