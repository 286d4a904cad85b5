"""What Inductor makes of one ATen graph of ``torch.compile``: the kernels it would launch,
planned without Triton or a GPU.

``intercept.dispatch.compiled`` hands each graph AOTAutograd produces to :func:`plan_kernels`
once and launches the plan at run time. The plan:

* **extern kernels** (matrix products, convolutions, attention, grouped GEMMs, and the ops
  Inductor leaves to ATen, its ``fallbacks``) are costed as the eager op, from the tables;
* every other op is **fused**: producers and consumers join one generated Triton kernel where
  Inductor's scheduler would fuse them (same iteration space, or a reduction with its
  element-wise prologue and epilogue, no cycle through another kernel), and a fused kernel moves
  the bytes it reads from outside itself and writes for outside users once. A reduction with
  few outputs and many elements each is **split** in two kernels where Inductor's heuristic
  splits it (:func:`reduction_splits`: a batch norm's statistics over a large batch). Which kind of
  generated kernel that is, and so its time, is the compute model's
  (``hwmodel.compute.inductor``: by bytes from the Triton rows of the tables, measured
  ``torch.compile`` kernels); this module only plans the graph, which needs torch.
"""

import functools
import hashlib
import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch._inductor import lowering
from torch.fx.experimental.symbolic_shapes import optimization_hint

from hwmodel.compute.inductor import generated_kernel
from hwmodel.compute.ops import base_name
from hwmodel.compute.spec import CONV_OPS, GROUPED_MATMUL_OPS, MATMUL_OPS, KernelSpec
from intercept.dispatch import op_costs
from intercept.values.store import VALUED_SMALL_MAX_NUMEL

REDUCTIONS: frozenset[str] = frozenset({
    "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "var_mean", "prod",
    "any", "all", "std", "norm", "linalg_vector_norm", "logsumexp", "cumsum", "cumprod",
    "sort", "topk", "_log_softmax", "_softmax", "native_layer_norm", "native_group_norm",
    "native_batch_norm", "_native_batch_norm_legit_functional", "_fused_rms_norm",
})
"""Ops a generated kernel reduces in (the rest it fuses are element-wise)."""
EXTERN_OPS: frozenset[str] = MATMUL_OPS | CONV_OPS | GROUPED_MATMUL_OPS
"""Always ATen's (cuBLAS, cuDNN, CUTLASS), whatever the lowering table says."""
NO_KERNEL_NAMES: frozenset[str] = frozenset({
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "getitem",
    "_unsafe_view", "alias", "lift_fresh_copy", "detach", "sym_size", "sym_stride",
    "sym_numel", "sym_storage_offset", "_assert_tensor_metadata", "_assert_scalar",
})


@dataclass(frozen=True)
class PlannedKernel:
    """One kernel of a plan: an extern kernel, or a generated one with the buffers it takes."""

    spec: KernelSpec
    reads: int = 0
    """Buffers a generated kernel reads (its launch packs each; 0 for an extern kernel)."""
    writes: int = 0
    """Buffers a generated kernel writes (Inductor's wrapper allocates each)."""


@dataclass(frozen=True)
class GraphPlan:
    """What Inductor makes of one ATen graph."""

    kernels: list[PlannedKernel]
    """The kernels it launches, in launch order."""
    transient: frozenset[str]
    """Nodes (by name) whose values no kernel writes to memory (computed inside a fused
    kernel, or recomputed in each kernel that reads them) and that hold no values the
    simulator keeps: they are derived without device memory, so the graph's peak is
    Inductor's, not that of its ops run one by one."""


@dataclass
class _Group:
    """Fused nodes that become one generated kernel."""

    nodes: list[torch.fx.Node]
    numel: int
    """Elements of the iteration space's outer (non-reduced) part."""
    rnumel: int = 1
    """Elements reduced per output element (1: element-wise)."""
    reduced: tuple[int, ...] | None = None
    """The input dimensions its reductions reduce (None: element-wise, or not known)."""
    inner: bool = True
    """Whether its reduction reads each output's elements contiguously (a reduced dimension of
    stride 1), which decides how Inductor splits it."""


_plans: dict[str, GraphPlan] = {}
"""Plans by graph code and input shapes: identical blocks are planned once."""


def plan_kernels(gm: torch.fx.GraphModule) -> tuple[GraphPlan, bool]:
    """What Inductor would launch for ``gm`` (an ATen graph whose nodes carry fake values in
    ``meta["val"]``); and whether this graph is new (not planned before in this process)."""
    key = hashlib.sha1((gm.code + repr([_shape(n) for n in gm.graph.nodes
                                        if n.op == "placeholder"])).encode()).hexdigest()
    plan = _plans.get(key)
    if plan is not None:
        return plan, False
    planner = _Planner(gm.graph, torch.cuda.get_device_properties())
    plan = _plans[key] = GraphPlan(planner.plan(), planner.transient())
    return plan, True


def _hint(size: int | torch.SymInt) -> int:
    """A size of a graph compiled for dynamic shapes as the example it was traced with (no
    guard added; an unbacked size as Inductor's fallback), so that the plan holds integers."""
    return optimization_hint(size, fallback=torch._inductor.config.unbacked_symint_fallback)


def _shape(node: torch.fx.Node) -> Any:
    value = node.meta.get("val")
    return (tuple(value.shape), value.dtype) if isinstance(value, torch.Tensor) else value


class _Planner:
    def __init__(self, graph: torch.fx.Graph, device: Any) -> None:
        self.device = device
        """The (simulated) GPU's properties: its SM count decides reduction splits."""
        self.nodes = list(graph.nodes)
        self.index = {node: i for i, node in enumerate(self.nodes)}
        self.group_of: dict[torch.fx.Node, _Group] = {}

    def plan(self) -> list[PlannedKernel]:
        for node in self.nodes:
            if self._kind(node) == "fused":
                self._fuse(node)
        self._fuse_siblings()
        plan: list[PlannedKernel] = []
        for unit in self._launch_order():
            if isinstance(unit, torch.fx.Node):
                plan.append(PlannedKernel(self._extern_spec(unit)))
            else:
                plan.extend(self._group_specs(unit))
        return plan

    def _launch_order(self) -> list["torch.fx.Node | _Group"]:
        """Extern nodes and fused groups in an order that launches every kernel after the
        kernels it reads, each as early as the graph has it (a group at its first node)."""
        unit_of: dict[torch.fx.Node, torch.fx.Node | _Group] = {}
        for node in self.nodes:
            kind = self._kind(node)
            if kind == "extern":
                unit_of[node] = node
            elif kind == "fused":
                unit_of[node] = self.group_of[node]
        units = {id(u): u for u in unit_of.values()}
        first = {key: min(self.index[n] for n in (u.nodes if isinstance(u, _Group) else [u]))
                 for key, u in units.items()}
        waits_on: dict[int, set[int]] = {key: set() for key in units}
        feeds: dict[int, list[int]] = {key: [] for key in units}
        inputs_of: dict[torch.fx.Node, set[int]] = {}  # the units a node's value depends on
        for node in self.nodes:
            found: set[int] = set()
            for arg in _flat_nodes((node.args, node.kwargs)):
                found |= {id(unit_of[arg])} if arg in unit_of else inputs_of.get(arg, set())
            unit = unit_of.get(node)
            if unit is None:
                inputs_of[node] = found
                continue
            for other in found - {id(unit)} - waits_on[id(unit)]:
                waits_on[id(unit)].add(other)
                feeds[other].append(id(unit))
        ready = [(first[key], key) for key, deps in waits_on.items() if not deps]
        heapq.heapify(ready)
        order: list[torch.fx.Node | _Group] = []
        while ready:
            _, key = heapq.heappop(ready)
            order.append(units[key])
            for user in feeds[key]:
                waits_on[user].discard(key)
                if not waits_on[user]:
                    heapq.heappush(ready, (first[user], user))
        if len(order) < len(units):
            raise RuntimeError("phantora: the kernels planned for a compiled graph depend on "
                               "each other in a cycle (a planner bug: please report the graph)")
        return order

    def transient(self) -> frozenset[str]:
        """The nodes of :attr:`GraphPlan.transient` (call after :meth:`plan`)."""
        found = set()
        for node in self.nodes:
            if self._kind(node) != "fused" or node.target._schema.is_mutable:
                continue
            if self._written(node, set(self.group_of[node].nodes)):
                continue
            values = op_costs.flat_tensors(node.meta.get("val"))
            if values and all(value.is_floating_point()
                              and _hint(value.numel()) > VALUED_SMALL_MAX_NUMEL
                              for value in values):
                found.add(node.name)
        return frozenset(found)

    # classification

    @functools.cache  # noqa: B019  (one planner per graph)
    def _kind(self, node: torch.fx.Node) -> str:
        """``extern``, ``fused``, or ``free`` (views, allocation, graph plumbing)."""
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            return "free"
        func = node.target
        name = base_name(func._schema.name)
        if func.is_view or name in NO_KERNEL_NAMES or func.namespace not in ("aten", "prims"):
            return "free"
        if name in EXTERN_OPS or "attention" in name or func in lowering.fallbacks:
            return "extern"
        if func not in lowering.lowerings and func.overloadpacket not in lowering.lowerings:
            return "extern"
        if not any(isinstance(v, torch.Tensor) and v.device.type == "cuda"
                   for v in op_costs.flat_tensors(node.meta.get("val"))):
            return "free"
        return "fused"

    def _source(self, node: Any) -> Any:
        """The node that produced the memory ``node`` views (itself if not a view)."""
        while (isinstance(node, torch.fx.Node) and node.op == "call_function"
               and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view
               and node.args and isinstance(node.args[0], torch.fx.Node)):
            node = node.args[0]
        return node

    def _space(self, node: torch.fx.Node) -> tuple[int, int]:
        """(outer elements, reduced elements per output) of a fused node."""
        out = _first_tensor(node.meta.get("val"))
        numel = _hint(out.numel()) if out is not None else 1
        if base_name(node.target._schema.name) not in REDUCTIONS:
            return numel, 1
        inp = _first_tensor(_values(node.args))
        total = _hint(inp.numel()) if inp is not None else numel
        if total <= numel:
            return numel, 1
        return numel, total // max(numel, 1)

    # fusion

    def _reduced(self, node: torch.fx.Node) -> tuple[int, ...] | None:
        """The dimensions of its input a reduction reduces (its ``dim`` argument; all where it
        has none; a norm's normalized trailing ones, a batch norm's all but channels); None
        for an element-wise node or where the schema does not say."""
        name = base_name(node.target._schema.name)
        inp = _first_tensor(_values(node.args))
        if name not in REDUCTIONS or inp is None:
            return None
        rank = inp.dim()
        if "batch_norm" in name:
            return tuple(d for d in range(rank) if d != 1)
        schema_args = node.target._schema.arguments
        bound = {a.name: v for a, v in zip(schema_args, node.args, strict=False)} | node.kwargs
        if "normalized_shape" in bound:
            return tuple(range(rank - len(bound["normalized_shape"]), rank))
        if not any(a.name == "dim" for a in schema_args):
            return None
        dims = bound.get("dim")
        if dims is None or dims == []:
            return tuple(range(rank))
        dims = [dims] if isinstance(dims, int) else list(dims)
        return tuple(sorted(d % max(rank, 1) for d in dims))

    def _inner(self, node: torch.fx.Node) -> bool:
        """Whether reduction ``node`` reduces a dimension of stride 1 of its input (true where
        the dimensions or the input are not known)."""
        inp = _first_tensor(_values(node.args))
        dims = self._reduced(node)
        if inp is None or dims is None:
            return True
        return any(_hint(inp.stride(d)) == 1 for d in dims if _hint(inp.size(d)) > 1)

    def _fuse(self, node: torch.fx.Node) -> None:
        numel, rnumel = self._space(node)
        group = _Group([node], numel, rnumel, self._reduced(node) if rnumel > 1 else None,
                       self._inner(node) if rnumel > 1 else True)
        self.group_of[node] = group
        for arg in _flat_nodes((node.args, node.kwargs)):
            producer = self._source(arg)
            other = self.group_of.get(producer)
            if other is None or other is group:
                continue
            merged = _merged_space(other, group)
            if merged is not None and not self._splits_under(other, group) \
                    and not self._path_outside(other, group):
                group = self._merge(other, group, merged)

    def _fuse_siblings(self) -> None:
        """Join reductions over the same iteration space that read a common buffer and do not
        depend on each other into one kernel, as Inductor's scheduler does (a batch norm's
        gradient sums read the output gradient once). Element-wise siblings are left apart:
        joined, the compiled Llama's planned kernels fall further below the real count."""
        buckets: dict[tuple[int, int, tuple[int, ...] | None], list[_Group]] = {}
        for group in {id(g): g for g in self.group_of.values() if g.rnumel > 1}.values():
            buckets.setdefault((group.numel, group.rnumel, group.reduced), []).append(group)
        for groups in buckets.values():
            reads = {id(g): self._group_reads(g).keys() for g in groups}
            merged: set[int] = set()
            for i, first in enumerate(groups):
                if id(first) in merged:
                    continue
                for second in groups[i + 1:]:
                    if id(second) in merged or not reads[id(first)] & reads[id(second)]:
                        continue
                    if self._path_outside(first, second) or self._path_outside(second, first) \
                            or self._feeds_loop(first, second) or self._feeds_loop(second, first):
                        continue
                    self._merge(first, second, (first.numel, first.rnumel))
                    merged.add(id(second))
                    reads[id(first)] = self._group_reads(first).keys()

    def _feeds_loop(self, source: _Group, target: _Group) -> bool:
        """Whether a result of ``source`` reaches ``target``'s reductions or the element-wise
        work over their inputs: one kernel could not compute both in one pass. A result that
        reaches only ``target``'s epilogue over the outputs is fine."""
        members = set(target.nodes)
        results = [n for n in source.nodes if not self._whole_input(n, source)]
        stack = [user for n in results for user in self._consumers(n) if user in members]
        seen: set[torch.fx.Node] = set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if base_name(node.target._schema.name) in REDUCTIONS or self._whole_input(node, target):
                return True
            stack.extend(user for user in self._consumers(node) if user in members)
        return False

    def _whole_input(self, node: torch.fx.Node, group: _Group) -> bool:
        """Whether ``node`` of reduction ``group`` computes over the reduction's whole input
        (its prologue), not over its outputs."""
        out = _first_tensor(node.meta.get("val"))
        return out is not None and _hint(out.numel()) > group.numel

    def _group_reads(self, group: _Group) -> dict[torch.fx.Node, int]:
        """The buffers (producer, bytes) the group's kernel reads from outside itself."""
        members = set(group.nodes)
        read: dict[torch.fx.Node, int] = {}
        for node in group.nodes:
            for arg in _flat_nodes((node.args, node.kwargs)):
                if self._source(arg) in members:
                    continue
                for source, size in self._reads(arg).items():
                    if source not in members:
                        read[source] = max(read.get(source, 0), size)
        return read

    def _splits_under(self, producer: _Group, consumer: _Group) -> bool:
        """Whether ``consumer`` is an element-wise epilogue over the whole input of a reduction
        that Inductor splits: each output's result is complete only after the second kernel,
        so the epilogue runs as a kernel of its own (a batch norm's input gradient)."""
        return (producer.rnumel > 1 and consumer.rnumel == 1
                and consumer.numel == producer.numel * producer.rnumel
                and self._split_count(producer) > 1)

    def _split_count(self, group: _Group) -> int:
        """In how many parts Inductor reduces each of the group's outputs (1: not split)."""
        if group.rnumel <= 1:
            return 1
        return reduction_splits(group.numel, group.rnumel, group.inner, self.device)

    def _merge(self, first: _Group, second: _Group, space: tuple[int, int]) -> _Group:
        first.nodes = sorted(first.nodes + second.nodes, key=self.index.__getitem__)
        first.numel, first.rnumel = space
        if first.rnumel > 1 and first.reduced is None:
            first.inner = second.inner
        first.reduced = first.reduced or second.reduced
        for node in second.nodes:
            self.group_of[node] = first
        return first

    def _path_outside(self, producer: _Group, consumer: _Group) -> bool:
        """Whether a kernel outside both groups lies between them (fusing would make a cycle)."""
        members = set(producer.nodes) | set(consumer.nodes)
        targets = set(consumer.nodes)
        last = max(self.index[n] for n in consumer.nodes)
        stack = [(user, False) for n in producer.nodes for user in n.users
                 if user not in members]
        seen: set[tuple[torch.fx.Node, bool]] = set()
        while stack:
            node, through_kernel = stack.pop()
            if (node, through_kernel) in seen or self.index[node] > last:
                continue
            seen.add((node, through_kernel))
            through_kernel = through_kernel or self._kind(node) != "free"
            for user in node.users:
                if user in targets:
                    if through_kernel:
                        return True
                elif user not in members:
                    stack.append((user, through_kernel))
        return False

    # costing

    def _extern_spec(self, node: torch.fx.Node) -> KernelSpec:
        func = node.target
        args, kwargs = _values(node.args), _values(node.kwargs)
        return op_costs.kernel_spec(func._schema.name, func, tuple(args), dict(kwargs),
                                    node.meta.get("val"))

    def _group_specs(self, group: _Group) -> list[PlannedKernel]:
        """The group's kernel, or its two where Inductor splits its reduction: the first reduces
        each output's elements in ``splits`` parts (and writes what its prologue computes for
        other kernels), the second those partial results."""
        members = set(group.nodes)
        read = self._group_reads(group)
        written = written_inside = reduced = 0  # inside: by the loop over the whole input
        buffers = buffers_inside = 0
        dtypes: dict[str, int] = {}
        for node in group.nodes:
            values = op_costs.flat_tensors(node.meta.get("val"))
            if self._written(node, members):
                size = sum(_hint(op_costs.operand(value).nbytes) for value in values)
                written += size
                buffers += len(values)
                if sum(_hint(value.numel()) for value in values) > group.numel:
                    written_inside += size
                    buffers_inside += len(values)
            if base_name(node.target._schema.name) in REDUCTIONS:
                reduced += sum(_hint(op_costs.operand(value).nbytes) for value in values)
            for value in values:
                name = op_costs.dtype_name(value.dtype)
                dtypes[name] = dtypes.get(name, 0) + _hint(value.numel())
        nbytes = sum(read.values()) + written
        if nbytes == 0:
            return []
        dtype = max(dtypes, key=dtypes.__getitem__) if dtypes else ""
        splits = self._split_count(group)
        if splits == 1:
            return [PlannedKernel(generated_kernel(nbytes, group.numel, group.rnumel, dtype),
                                  len(read), buffers)]
        partials = splits * reduced
        return [PlannedKernel(generated_kernel(sum(read.values()) + written_inside + partials,
                                               group.numel * splits,
                                               -(-group.rnumel // splits), dtype),
                              len(read), buffers_inside + 1),
                PlannedKernel(generated_kernel(partials + written - written_inside, group.numel,
                                               splits, dtype),
                              1, buffers - buffers_inside)]

    def _written(self, node: torch.fx.Node, members: set[torch.fx.Node]) -> bool:
        """Whether the kernel of ``members`` (``node``'s group) writes ``node``'s value to memory:
        another kernel or the graph's output reads it, and it is not recomputed there."""
        return not self._inlined(node) and any(user not in members
                                               for user in self._consumers(node))

    @functools.cache  # noqa: B019  (one planner per graph)
    def _reads(self, arg: torch.fx.Node) -> dict[torch.fx.Node, int]:
        """The buffers (their producers, bytes read) a kernel reads to have ``arg``: ``arg``'s
        own memory, or where its producer is inlined, what that producer reads."""
        source = self._source(arg)
        if isinstance(source, torch.fx.Node) and self._inlined(source):
            found: dict[torch.fx.Node, int] = {}
            for inner in _flat_nodes((source.args, source.kwargs)):
                for buffer, size in self._reads(inner).items():
                    found[buffer] = max(found.get(buffer, 0), size)
            return found
        return {source: sum(_hint(op_costs.operand(value).nbytes)
                            for value in op_costs.flat_tensors(arg.meta.get("val")))}

    @functools.cache  # noqa: B019  (one planner per graph)
    def _inlined(self, node: torch.fx.Node) -> bool:
        """Whether Inductor recomputes element-wise ``node`` in each kernel that reads it instead
        of writing it to memory: every consumer is a generated kernel, and it reads at most
        ``realize_reads_threshold`` buffers where several kernels read it (Inductor's
        ``mark_reuse``). Reductions, graph outputs and extern kernels' inputs are written."""
        if self._kind(node) != "fused" or base_name(node.target._schema.name) in REDUCTIONS:
            return False
        consumers = list(self._consumers(node))
        if not consumers or any(self._kind(user) != "fused" for user in consumers):
            return False
        reads = {buffer for arg in _flat_nodes((node.args, node.kwargs))
                 for buffer in self._reads(arg)}
        return len(consumers) == 1 or len(reads) <= torch._inductor.config.realize_reads_threshold

    def _consumers(self, node: torch.fx.Node) -> Iterator[torch.fx.Node]:
        """Users of ``node`` through views (a view of it read elsewhere is a read of it)."""
        for user in node.users:
            target = user.target
            if (user.op == "call_function" and isinstance(target, torch._ops.OpOverload)
                    and target.is_view):
                yield from self._consumers(user)
            else:
                yield user


def reduction_splits(numel: int, rnumel: int, inner: bool, device: Any) -> int:
    """In how many parts Inductor (``ir.Reduction.num_splits``, ``choices.reduction_split_factor``)
    splits a reduction of ``rnumel`` elements into each of ``numel`` outputs on ``device`` (its
    ``multi_processor_count`` and ``major``): where the outputs are too few to fill the GPU, each
    output's elements are reduced in parts by more blocks (1: not split)."""
    sms = device.multi_processor_count
    threads = 32 * 8  # a warp's threads times Inductor's 8 warps
    min_elements = 32 * sms * 2048  # 32 to 512 elements per thread, 2,048 threads per SM
    max_elements = 512 * sms * 2048
    if numel > 1 and (rnumel <= 32 or numel >= sms * 2 * 32):
        return 1
    if inner or numel == 1:
        if numel >= 2 * sms or rnumel <= (524288 if device.major >= 10 else 8192):
            return 1
        if rnumel * numel <= min_elements:
            size = 32
        elif rnumel * numel < max_elements:
            blocks_per_output = -(-(sms * 2048 // (2 * threads)) // numel)
            size = _even_split(rnumel, -(-rnumel // (threads * blocks_per_output)), 30, 32)
        else:
            size = _even_split(rnumel, 512, 50, 0)
        return -(-rnumel // (size * threads))
    per_thread = 4
    if rnumel * numel < min_elements:
        size = 32
    elif rnumel * numel < max_elements:
        blocks = -(-(sms * 2048 // threads) // -(-numel // 128))
        size = _even_split(rnumel, -(-rnumel // (per_thread * blocks)), 20, 32)
    else:
        size = _even_split(rnumel, 512, 50, 0)
    return -(-rnumel // (per_thread * size))


def _even_split(total: int, target: int, tolerance: int, least: int) -> int:
    """The divisor of ``total`` nearest ``target`` where within ``tolerance`` of it (at least
    ``least``), else ``target``: Inductor prefers parts that divide evenly."""
    nearest = min((d for i in range(1, math.isqrt(total) + 1) if total % i == 0
                   for d in (i, total // i)), key=lambda d: abs(d - target))
    return max(nearest, least) if abs(nearest - target) < tolerance else target


def _merged_space(a: _Group, b: _Group) -> tuple[int, int] | None:
    """The iteration space of ``a`` and ``b`` fused, or None where Inductor would not fuse: two
    reductions over other dimensions of their input (one's output read along the other's
    reduced dimension) never share a kernel, whatever their sizes."""
    if a.reduced is not None and b.reduced is not None and a.reduced != b.reduced:
        return None
    if (a.numel, a.rnumel) == (b.numel, b.rnumel):
        return a.numel, a.rnumel
    for red, other in ((a, b), (b, a)):
        if red.rnumel > 1 and other.rnumel == 1 and other.numel in (
                red.numel, red.numel * red.rnumel):
            return red.numel, red.rnumel  # a reduction with its prologue or epilogue
    return None


def _first_tensor(value: Any) -> torch.Tensor | None:
    found = op_costs.flat_tensors(value)
    return found[0] if found else None


def _flat_nodes(value: Any) -> list[torch.fx.Node]:
    found: list[torch.fx.Node] = []
    torch.fx.node.map_arg(value, lambda n: found.append(n) or n)
    return found


def _values(value: Any) -> Any:
    """``value`` with every node replaced by its fake value (``meta["val"]``)."""
    return torch.fx.node.map_arg(value, lambda n: n.meta.get("val"))
