"""Record the traffic and routing of a real training run: ground truth for the simulator's.

Runs an example script (or a scenario's script and arguments) for real under torchrun, one
process per rank (gloo on a CPU, NCCL on GPUs), with a ``TorchDispatchMode`` that sees every
communication op the script issues, whatever API it went through (``dist.send``/``isend`` and
``batch_isend_irecv``, the object collectives, ``all_to_all_single``, the functional and the
autograd collectives, forward and backward alike), and every ``torch.bincount`` (an MoE
router's tokens per expert). The script runs unmodified; the mode only looks.

Writes one JSON file: per rank, every event in order (``step``: optimizer steps taken before
it; op, peer, bytes, dtype, shape, all_to_all split sizes, the object collective it belongs
to, if any) and every router call's counts; a per-rank summary (bytes to/from each peer,
all_to_all volumes, collectives); and cross-rank checks (every send met by a receive of the
same size, every all_to_all's splits agreeing between sender and receiver, router counts
summing to the routed token copies).
With ``--routing-trace`` also the routing trace that ``simulation.routing: trace:<file>``
reads: ``{"experts": E, "top_k": k, "calls": [[tokens per expert], ...]}``, rank 0's router
calls in call order (with several ranks, ``<stem>.rank<r>.json`` beside it for each rank).

Usages (from the repository root):

  # a bundled scenario's script, args and rank count, on this CPU, in bf16 as on GPUs
  python3 scripts/measure/record_traffic.py --scenario scenarios/h200x2-llama-pp-1f1b.yaml \\
      --append-args="--dtype bf16" --out scripts/data/traffic/traffic_h200x2-llama-pp-1f1b.json
  # any script: ranks, then the script and its arguments after --
  python3 scripts/measure/record_traffic.py --nproc 2 --out /tmp/t.json \\
      --routing-trace /tmp/trace.json -- scenarios/examples/moe_ep.py --steps 2
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts import common  # noqa: E402
from scripts.common import REPO, run_as_main  # noqa: E402

WAITS = ("wait_tensor", "_wrap_tensor_autograd")
"""Communication-namespace ops that move nothing."""
OBJECT_COLLECTIVES = ("send_object_list", "recv_object_list", "broadcast_object_list",
                      "all_gather_object", "gather_object", "scatter_object_list")


def _nbytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


def _first_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        return next((t for t in map(_first_tensor, value) if t is not None), None)
    return None


class Recorder:
    """The events of one rank, filled by :meth:`mode` while the script runs."""

    def __init__(self, rank: int, top_k: int | None) -> None:
        self.rank = rank
        self.step = 0
        self.context: str | None = None
        self.fixed_top_k = top_k
        self.last_top_k: int | None = None
        self.events: list[dict[str, Any]] = []
        self.router_calls: list[dict[str, Any]] = []

    def on_op(self, func: Any, args: tuple[Any, ...], out: Any) -> None:
        namespace, name = func.namespace, func._opname
        if name == "topk":
            self.last_top_k = int(args[1])
        elif name == "bincount":
            self._router_call(args, out)
        elif namespace in ("c10d", "_c10d_functional", "_c10d_functional_autograd"):
            if name not in WAITS:
                self.events.append(self._comm_event(namespace, name, args, out))

    def _router_call(self, args: tuple[Any, ...], out: Any) -> None:
        top_k = self.fixed_top_k or self.last_top_k
        self.router_calls.append({"step": self.step, "routed": int(args[0].numel()),
                                  "top_k": top_k, "counts": out.detach().clone()})

    def _comm_event(self, namespace: str, name: str, args: tuple[Any, ...],
                    out: Any) -> dict[str, Any]:
        event: dict[str, Any] = {"step": self.step, "op": f"{namespace}.{name}"}
        if self.context is not None:
            event["context"] = self.context
        tensor = _first_tensor(args[0])
        if tensor is not None:
            event.update(dtype=str(tensor.dtype).removeprefix("torch."),
                         shape=list(tensor.shape))
        if name in ("send", "recv_"):
            event.update(peer=_global_rank(args[1], int(args[2])), bytes=_nbytes(args[0]))
        elif name == "alltoall_base_":  # (output, input, group, output_splits, input_splits)
            event.update(_a2a_fields(args[1], args[3], args[4], args[0].size(0)))
            event["splits_given"] = bool(args[3] or args[4])
            event.update(dtype=str(args[1].dtype).removeprefix("torch."),
                         shape=list(args[1].shape))
        elif name == "all_to_all_single":  # (input, output_splits, input_splits, group)
            event.update(_a2a_fields(args[0], args[1], args[2], out.size(0)))
            event["splits_given"] = args[1] is not None or args[2] is not None
        else:
            event["bytes"] = _nbytes(args[0])
        return event

    def finish(self) -> dict[str, Any]:
        for call in self.router_calls:
            call["counts"] = call["counts"].tolist()
        return {"rank": self.rank, "events": self.events, "router_calls": self.router_calls}


def _a2a_fields(tensor: Any, output_splits: list[int], input_splits: list[int],
                out_rows: int) -> dict[str, Any]:
    """Split sizes (rows per rank; an empty list means even splits, as c10d reads it) and
    bytes of one all_to_all."""
    import torch.distributed as dist

    world = dist.get_world_size()
    rows = tensor.size(0)
    row_bytes = _nbytes(tensor) // rows if rows else 0
    input_splits = list(input_splits) or [rows // world] * world
    output_splits = list(output_splits) or [out_rows // world] * world
    return {"input_split_sizes": input_splits, "output_split_sizes": output_splits,
            "row_bytes": row_bytes, "bytes_sent": sum(input_splits) * row_bytes,
            "bytes_received": sum(output_splits) * row_bytes}


def _global_rank(group: Any, group_rank: int) -> int:
    """The global rank of ``group_rank`` in the process group a c10d op got."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import ProcessGroup

    try:
        ranks = dist.get_process_group_ranks(ProcessGroup.unbox(group))
    except (RuntimeError, ValueError, AttributeError):
        return group_rank
    return ranks[group_rank]


def run_worker(out_dir: Path, top_k: int | None, script: Path, script_args: list[str]) -> None:
    """One rank: run ``script`` as ``__main__`` under the recording mode, then write
    ``out_dir/rank<r>.json`` (also when the script fails)."""
    import torch.distributed as dist
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils._python_dispatch import TorchDispatchMode

    recorder = Recorder(int(os.environ.get("RANK", "0")), top_k)

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            out = func(*args, **(kwargs or {}))
            recorder.on_op(func, args, out)
            return out

    def labelled(name: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            outer, recorder.context = recorder.context, name
            try:
                return function(*args, **kwargs)
            finally:
                recorder.context = outer
        return wrapper

    for name in OBJECT_COLLECTIVES:
        setattr(dist, name, labelled(name, getattr(dist, name)))

    def next_step(optimizer: Any, args: Any, kwargs: Any) -> None:
        recorder.step += 1

    register_optimizer_step_post_hook(next_step)
    try:
        with Mode():
            run_as_main(script, script_args)
    finally:
        (out_dir / f"rank{recorder.rank}.json").write_text(json.dumps(recorder.finish()))


def rank_trace_path(path: Path, rank: int) -> Path:
    """Where rank ``rank``'s routing trace goes beside ``path`` (several ranks)."""
    return path.with_name(f"{path.stem}.rank{rank}.json")


def summarize_rank(rank: dict[str, Any]) -> dict[str, Any]:
    """Bytes per peer and direction (point-to-point; object collectives apart), all_to_all
    volumes (bytes_to_peer: to each rank, this one's own share included, which stays on the
    GPU) and the other collectives' bytes, of one rank."""
    p2p: dict[str, dict[str, dict[str, int]]] = {
        "send": defaultdict(lambda: {"count": 0, "bytes": 0}),
        "recv": defaultdict(lambda: {"count": 0, "bytes": 0})}
    objects = {"count": 0, "bytes": 0}
    a2a: dict[str, Any] = {"count": 0, "bytes_sent": 0, "bytes_received": 0,
                           "bytes_to_peer": defaultdict(int)}
    collectives: dict[str, dict[str, int]] = defaultdict(lambda: {"count": 0, "bytes": 0})
    for event in rank["events"]:
        op = event["op"].split(".")[1]
        if "context" in event:
            objects["count"] += 1
            objects["bytes"] += event["bytes"]
        elif op in ("send", "recv_"):
            entry = p2p["send" if op == "send" else "recv"][str(event["peer"])]
            entry["count"] += 1
            entry["bytes"] += event["bytes"]
        elif "input_split_sizes" in event:
            a2a["count"] += 1
            a2a["bytes_sent"] += event["bytes_sent"]
            a2a["bytes_received"] += event["bytes_received"]
            for peer, rows in enumerate(event["input_split_sizes"]):
                a2a["bytes_to_peer"][str(peer)] += rows * event["row_bytes"]
        else:
            collectives[op]["count"] += 1
            collectives[op]["bytes"] += event["bytes"]
    return {"rank": rank["rank"], "p2p": {k: dict(v) for k, v in p2p.items()},
            "object_collective_p2p": objects,
            "all_to_all": {**a2a, "bytes_to_peer": dict(a2a["bytes_to_peer"])},
            "collectives": dict(collectives), "router_calls": len(rank["router_calls"])}


def check(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Cross-rank consistency of what was recorded (each False names a broken invariant)."""
    sends: dict[tuple[int, int], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[int]] = defaultdict(list)
    a2as = []
    for rank in ranks:
        a2as.append([e for e in rank["events"] if "input_split_sizes" in e])
        for event in rank["events"]:
            if event["op"].endswith(".send"):
                sends[(rank["rank"], event["peer"])].append(event["bytes"])
            elif event["op"].endswith(".recv_"):
                recvs[(event["peer"], rank["rank"])].append(event["bytes"])
    p2p_ok = ({k: sorted(v) for k, v in sends.items()} == {k: sorted(v) for k, v in recvs.items()})
    a2a_ok = len({len(calls) for calls in a2as}) <= 1
    if a2a_ok:
        for calls in zip(*a2as, strict=True):
            for sender, call in enumerate(calls):
                for receiver, rows in enumerate(call["input_split_sizes"]):
                    a2a_ok &= calls[receiver]["output_split_sizes"][sender] == rows
    routing_ok = all(sum(call["counts"]) == call["routed"]
                     and (call["top_k"] is None or call["routed"] % call["top_k"] == 0)
                     for rank in ranks for call in rank["router_calls"])
    return {"every_send_has_a_matching_recv": p2p_ok,
            "all_to_all_splits_agree_between_ranks": a2a_ok,
            "router_counts_sum_to_routed_tokens": routing_ok}


def routing_trace(rank: dict[str, Any]) -> dict[str, Any]:
    """The trace format of ``simulation.routing: trace:<file>``."""
    calls = rank["router_calls"]
    if not calls:
        raise SystemExit(f"rank {rank['rank']} made no router call (torch.bincount): nothing "
                         "to write to --routing-trace")
    top_k = calls[0]["top_k"]
    if top_k is None:
        raise SystemExit("no torch.topk before the router's torch.bincount (balanced "
                         "routing?): give --top-k")
    return {"experts": len(calls[0]["counts"]), "top_k": top_k,
            "calls": [call["counts"] for call in calls]}


def scenario_command(path: Path) -> tuple[Path, list[str], int]:
    """(script, args, ranks) of a scenario that runs a training script."""
    spec = yaml.safe_load(path.read_text())
    workload = spec["workload"]
    if "script" not in workload:
        raise SystemExit(f"{path}: workload.script missing; record_traffic runs scripts")
    nproc = workload.get("nproc_per_node", spec["cluster"].get("gpus_per_host", 8))
    return (path.parent / workload["script"], [str(a) for a in workload.get("args", [])],
            spec["cluster"].get("hosts", 1) * int(nproc))


def record(script: Path, script_args: list[str], nproc: int, top_k: int | None,
           env: dict[str, str]) -> dict[str, Any]:
    """Run the script on ``nproc`` ranks under torchrun with the recorder; the merged JSON."""
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        worker = [sys.executable, str(Path(__file__).resolve()), "worker", "--dir", tmp]
        if top_k is not None:
            worker += ["--top-k", str(top_k)]
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={nproc}", *worker[1:], str(script), *script_args]
        done = subprocess.run(command, env={**os.environ, **env}, cwd=REPO, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the script exited with {done.returncode} (its output is above)")
        ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(nproc)]
    return {"script": str(script.resolve().relative_to(REPO)) if script.resolve().is_relative_to(REPO)
            else str(script), "args": script_args, "world_size": nproc,
            "backend": "nccl" if torch.cuda.is_available() else "gloo",
            "torch": torch.__version__,
            "checks": check(ranks), "summary": [summarize_rank(r) for r in ranks],
            "ranks": ranks}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        parser = argparse.ArgumentParser()
        parser.add_argument("--dir", type=Path, required=True)
        parser.add_argument("--top-k", type=int)
        parser.add_argument("script", type=Path)
        parser.add_argument("args", nargs=argparse.REMAINDER)
        args = parser.parse_args(argv[1:])
        run_worker(args.dir, args.top_k, args.script, args.args)
        return
    parser = common.parser(__doc__)
    parser.add_argument("--scenario", type=Path, help="take script, args and ranks from it")
    parser.add_argument("--nproc", type=int, help="ranks, with a script given after --")
    parser.add_argument("--out", type=Path, required=True, help="the traffic JSON")
    parser.add_argument("--routing-trace", type=Path,
                        help="also write the router calls' counts in the routing-trace format")
    parser.add_argument("--append-args", default="",
                        help="arguments added after the scenario's, e.g. '--dtype bf16' (the "
                             "examples compute in bf16 on GPUs, in fp32 on a CPU)")
    parser.add_argument("--top-k", type=int,
                        help="experts per token, where the router calls no torch.topk")
    parser.add_argument("command", nargs="*", help="script and its arguments (after --)")
    args = parser.parse_args(argv)
    if args.scenario is not None:
        script, script_args, nproc = scenario_command(args.scenario)
        script_args += shlex.split(args.append_args)
        env = {k: str(v) for k, v in
               yaml.safe_load(args.scenario.read_text())["workload"].get("env", {}).items()}
    elif args.command and args.nproc:
        script, script_args, nproc, env = Path(args.command[0]), args.command[1:], args.nproc, {}
    else:
        parser.error("give --scenario, or --nproc N -- SCRIPT [ARGS...]")
    result = record(script, script_args, nproc, args.top_k, {"OMP_NUM_THREADS": "1", **env})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"checks": result["checks"], "summary": result["summary"]}, indent=1))
    if args.routing_trace is not None:
        traces = [routing_trace(rank) for rank in result["ranks"]]
        args.routing_trace.write_text(json.dumps(traces[0]) + "\n")
        if len(traces) > 1:
            for rank, trace in enumerate(traces):
                rank_trace_path(args.routing_trace, rank).write_text(json.dumps(trace) + "\n")


if __name__ == "__main__":
    main()
