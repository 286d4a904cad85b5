"""Measure the GPU time of the ops the model zoo launches that the kernel tables cannot cost.

``scenarios/examples/zoo_train.py`` trains Hugging Face, timm and diffusers models with their
default optimizers. Their steps launch ops the grid of ``measure_kernels.py`` never timed
(``_foreach_addcdiv_``, ``native_group_norm``, ``native_dropout_backward``, ``rsqrt``, ...).
This script runs each zoo model on the GPU (two plain steps, then one recorded), keeps every
launch that the GPU's shipped table (``hwmodel/measured/data/kernels_<gpu>.csv``) has no
estimate for, as the simulator would describe it (``intercept.dispatch.op_costs.kernel_spec``:
the same bytes and dtype), and times each distinct one (op, tensor shapes, strides, dtypes and
other arguments) with ``measure_kernels.py``'s timer on copies of the recorded arguments. The
rows (section ``zoo``) go to ``results.csv`` in the columns of the kernel tables, so they join
them as the other sections' rows do (``measure_kernels.py --import-result ... --export-clean``).

  python3 scripts/measure/measure_zoo_ops.py --out "$OUT/zoo_ops"                 # on a GPU
  python3 scripts/measure/measure_zoo_ops.py --out "$OUT/zoo_mm" --unaligned-matmuls  # on a GPU
  python3 scripts/measure/measure_zoo_ops.py --out /tmp/zoo_ops --device cpu --models hf-bert \\
      --size ci                                                                  # code check

Matrix products, attention, convolutions and recurrent layers are left out: the tables cost them by rate over
shape, which one model's few shapes would not improve. The exception, ``--unaligned-matmuls``:
only the matrix products with a dimension that is no multiple of 16 bytes (a vocabulary of
30522 or 51865), which cuBLAS runs with slower kernels than the table's aligned grid; they are
written as ``matmul`` rows (``m``, ``n``, ``k``, ``layout``, ``batch``), which the table pools
by alignment (``hwmodel.compute.table.ALIGNED_BYTES``).
"""

from __future__ import annotations

import contextlib
import csv
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.measure import measure_kernels as mk  # noqa: E402  (sets the safety environment)

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_map  # noqa: E402

from hwmodel.compute.ops import base_name  # noqa: E402
from hwmodel.compute.spec import Family, KernelSpec  # noqa: E402
from hwmodel.compute.table import ALIGNED_BYTES, KernelTable, matmul_alignment  # noqa: E402
from intercept.dispatch.cuda_wheels import prepare_torchvision  # noqa: E402
from intercept.dispatch.op_costs import flat_tensors, kernel_spec  # noqa: E402

TABLES = common.REPO / "hwmodel" / "measured" / "data"
TABLED_FAMILIES = (Family.MATMUL, Family.ATTENTION_FWD, Family.ATTENTION_BWD, Family.CONV,
                   Family.GROUPED_MATMUL, Family.RNN)
"""Costed by rate over shape (left out, see the module's text)."""
MAX_CASES_PER_MODEL = 150
"""The distinct launches timed per model, largest traffic first (a step has a few hundred)."""


def _copy(value: Any) -> Any:
    """A tensor's copy with the same shape, strides and values (others as they are); one whose
    elements share memory (a broadcast) is copied with its whole storage."""
    if not isinstance(value, torch.Tensor):
        return value
    with torch.no_grad():
        if any(stride == 0 and size > 1 for size, stride in zip(value.shape, value.stride())):
            out = torch.empty(0, dtype=value.dtype, device=value.device)
            return out.set_(value.untyped_storage().clone(), value.storage_offset(),
                            value.shape, value.stride())
        out = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                  device=value.device)
        return out.copy_(value)


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), tuple(value.stride()), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return tuple(_signature(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _signature(v)) for k, v in value.items()))
    return repr(value)


class Launch:
    """A distinct launch: the op, copies of its arguments, how the simulator describes it."""

    def __init__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 spec: KernelSpec) -> None:
        self.func, self.args, self.kwargs, self.spec = func, args, kwargs, spec
        self.count = 1

    def call(self, device: torch.device) -> Callable[[], object]:
        args, kwargs = tree_map(_copy, self.args), tree_map(_copy, self.kwargs)
        return lambda: self.func(*args, **kwargs)


def uncosted(table: KernelTable) -> Callable[[KernelSpec], bool]:
    """Launches of the families costed by bytes that ``table`` has no estimate for."""
    return lambda spec: spec.family not in TABLED_FAMILIES and table.estimate(spec) is None


def unaligned_matmul(spec: KernelSpec) -> bool:
    """Matrix products with a dimension no multiple of :data:`ALIGNED_BYTES`."""
    return (spec.family is Family.MATMUL
            and matmul_alignment(spec.dims, spec.dtype) < ALIGNED_BYTES)


class Recorder(TorchDispatchMode):
    """Keeps each distinct launch that ``wanted`` picks, with copies of its arguments taken
    before it runs (in-place ops change them)."""

    def __init__(self, wanted: Callable[[KernelSpec], bool], device_type: str) -> None:
        super().__init__()
        self.wanted = wanted
        self.device_type = device_type
        self.launches: dict[Any, Launch] = {}
        self.unreadable: dict[str, str] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if _is_view(func):
            return func(*args, **kwargs)
        key = (str(func), _signature(args), _signature(kwargs))
        seen = self.launches.get(key)
        copies = None if seen is not None else (tree_map(_copy, args), tree_map(_copy, kwargs))
        out = func(*args, **kwargs)
        if seen is not None:
            seen.count += 1
            return out
        if not any(t.device.type == self.device_type for t in flat_tensors((args, kwargs, out))):
            return out
        try:
            spec = kernel_spec(str(func.name()), func, args, kwargs, out)
        except (AssertionError, RuntimeError, TypeError, ValueError) as exc:
            # a FLOP formula of this torch that rejects the shapes (GQA attention): a tabled
            # family, not timed here
            self.unreadable[str(func.name())] = f"{type(exc).__name__}: {exc}"
            return out
        if self.wanted(spec):
            self.launches[key] = Launch(func, *copies, spec)
        return out


def _is_view(func: Any) -> bool:
    """Ops that launch no kernel: outputs that alias an input without writing it, and the
    ops ``measure_kernels.py`` knows launch none."""
    if base_name(str(func.name())) in mk.NO_KERNEL_OPS:
        return True
    returns = func._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write
                                 for r in returns)


def record_model(zoo: Any, name: str, size: str, wanted: Callable[[KernelSpec], bool],
                 device: torch.device) -> list[Launch]:
    """One zoo model's launches that ``wanted`` picks, from its third plain step."""
    entry = zoo.ZOO[name][size]
    torch.manual_seed(0)
    model = entry.build().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = entry.batch(device)
    recorder = Recorder(wanted, device.type)
    for step in range(3):
        with recorder if step == 2 else contextlib.nullcontext():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = entry.loss(model, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    for op, error in recorder.unreadable.items():
        print(f"   {name}: {op} not described ({error})", flush=True)
    launches = sorted(recorder.launches.values(), key=lambda l: -l.spec.bytes * l.count)
    del model, optimizer, batch
    return launches[:MAX_CASES_PER_MODEL]


def case_of(model: str, launch: Launch) -> mk.Case:
    spec = launch.spec
    tensors = flat_tensors((launch.args, launch.kwargs))
    shape: dict[str, Any] = {"model": model, "calls_per_step": launch.count,
                             "args": str(_signature(launch.args))[:300]}
    name = str(launch.func.name()).split("::", 1)[-1].split(".", 1)[0]
    if spec.family is Family.MATMUL:
        batch, m, n, k = spec.dims
        shape.update(batch=batch, m=m, n=n, k=k, layout=spec.variant)
        return mk.Case("matmul", base_name(spec.name), spec.dtype, shape, spec.flops,
                       spec.bytes, launch.call, aten_ops=name)
    shape.update(numel=max((t.numel() for t in tensors), default=0), tensors=len(tensors))
    if spec.variant:
        shape["layout"] = spec.variant  # the table keeps such rows apart (``mul@strided``)
    return mk.Case("zoo", base_name(spec.name), spec.dtype, shape, 0, spec.bytes,
                   launch.call, aten_ops=name)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--models", default="", help="comma-separated zoo models (default all)")
    parser.add_argument("--size", choices=("full", "ci"), default="full")
    parser.add_argument("--gpu", choices=("h100", "h200"),
                        help="the table that decides what is missing (default: from the GPU)")
    parser.add_argument("--unaligned-matmuls", action="store_true",
                        help="time the matrix products with a dimension no multiple of 16 "
                             "bytes instead of the launches the table cannot cost")
    args = parser.parse_args()
    device = torch.device(args.device)
    gpu = args.gpu or ("h200" if device.type == "cuda"
                       and "H200" in torch.cuda.get_device_name(device) else "h100")
    wanted = (unaligned_matmul if args.unaligned_matmuls
              else uncosted(KernelTable.load(TABLES / f"kernels_{gpu}.csv")))
    prepare_torchvision()  # a CUDA build of torchvision beside a CPU torch (code checks)
    zoo = common.load_example("zoo_train")
    models = [m for m in args.models.split(",") if m] or sorted(zoo.ZOO)
    args.out.mkdir(parents=True, exist_ok=True)
    facts = mk.system_facts(device)
    timer = mk.Timer(device)
    (args.out / "system.json").write_text(json.dumps(facts, indent=2) + "\n")
    path = args.out / "results.csv"
    new_file = not path.exists()
    start = time.monotonic()
    with path.open("a", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=mk.CSV_COLUMNS)
        if new_file:
            writer.writeheader()
        for model in models:
            try:
                launches = record_model(zoo, model, args.size, wanted, device)
            except Exception as exc:  # noqa: BLE001  (one model's failure must not stop the others)
                print(f"== {model}: failed to run: {type(exc).__name__}: {exc}", flush=True)
                continue
            print(f"== {model}: {len(launches)} launches to time", flush=True)
            for launch in launches:
                row = mk.measure(case_of(model, launch), timer, facts["gpu"],
                                 facts.get("l2_bytes", 2**20))
                writer.writerow(asdict(row))
                stream.flush()
                print(f"[{model} {time.monotonic() - start:.0f}s] {row.op} {row.dtype} "
                      f"{row.bytes} B {row.time_us} us {row.gbs} GB/s {row.note}", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
