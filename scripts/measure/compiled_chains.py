"""The ``torch.compile`` probe: host time of a compiled graph's call against the generated kernels
it launches, as one script that runs on a GPU machine and under the simulator alike.

A chain of ``depth`` means along alternating dimensions is one generated (Triton) kernel per mean
(a reduction needs the previous one whole), so rows of several depths separate a generated
kernel's launch (their slope) from a graph call's own cost. The rows:

* ``inference chain of D means``: the forward graph under ``no_grad``;
* ``training forward chain of D means``: the forward graph of inputs that require grad;
* ``training chain of D means``: forward and backward graphs (``sum`` and its backward eager);
* ``training forward of K graphs`` and ``training of K graphs``: K calls of one compiled chain of
  four means, one after the other, so one backward runs K compiled backward nodes (a transformer's
  compiled blocks): their slope is a backward node's cost, their intercept one backward run's;
* ``inference wide chain of D means of N inputs``: D means, each of the last one plus a weighted
  sum of the same N graph inputs (a kernel of N + 2 buffers: the N inputs, the last mean, its
  output). At two N, the slopes over D differ by what N - 1 more buffers cost a launch; the
  graph's inputs, whose guards and wrappers cost per call, are the same at every D;
* ``inference output chain of D means of K outputs``: the chain of means, each kernel also
  writing K - 1 multiples of its result as graph outputs. At two K, the slopes over D differ by
  what K - 1 more written buffers cost (their allocation, argument and return).

``scripts/measure/measure_host_costs.py --sections compiled`` times these rows on a GPU machine
(the GPU held busy, as its other rows); run here under the simulator they give the simulated
side, which ``scripts/measure/fit_compiled_host.py`` compares them with. Each row: the median of
five rounds of back-to-back calls, us per call.

  phantora-ns3 SCENARIO   # a scenario whose script is this one, args: --json OUT.json
"""

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterator

import torch

INFERENCE_DEPTHS = (1, 4, 16, 48)
TRAINING_DEPTHS = (4, 16, 48)
GRAPHS = (1, 2, 4, 8)
WIDE_DEPTHS = (1, 4, 16)
WIDE_INPUTS = (1, 32)
OUTPUT_DEPTHS = (1, 4, 16)
OUTPUTS = (1, 8)
ROUNDS = 5


def chain(depth: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """``depth`` means, each along the other dimension than the last one's."""
    def means(x: torch.Tensor) -> torch.Tensor:
        for i in range(depth):
            x = x - x.mean(dim=i % 2, keepdim=True)
        return x
    return means


def wide_chain(depth: int) -> Callable[..., torch.Tensor]:
    """``depth`` means, each of the last one plus its own weighted sum of all the inputs."""
    def means(x: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
        for i in range(depth):
            total = x
            for j, value in enumerate(inputs):
                total = total + value * float(i + j + 1)
            x = total.mean(dim=i % 2, keepdim=True)
        return x
    return means


def output_chain(depth: int, outputs: int) -> Callable[[torch.Tensor], object]:
    """The chain of ``depth`` means, each step also returning ``outputs - 1`` multiples of its
    result (written by the step's kernel)."""
    def means(x: torch.Tensor) -> object:
        written = []
        for i in range(depth):
            x = x - x.mean(dim=i % 2, keepdim=True)
            written.extend(x * float(j + 2) for j in range(outputs - 1))
        return x, written
    return means


def cases(dev: torch.device) -> Iterator[tuple[str, int, Callable[[], object]]]:
    """(case name, depth or graphs, one call) for every row (``no_grad`` is the caller's, for the
    inference rows)."""
    import torch._dynamo

    x = torch.randn(64, 64, device=dev)
    xg = x.clone().requires_grad_()
    for depth in INFERENCE_DEPTHS:
        torch._dynamo.reset()
        fn = torch.compile(chain(depth), dynamic=False)
        yield f"inference chain of {depth} means", depth, lambda fn=fn: fn(x)
    for depth in TRAINING_DEPTHS:
        torch._dynamo.reset()
        fn = torch.compile(chain(depth), dynamic=False)
        yield f"training forward chain of {depth} means", depth, lambda fn=fn: fn(xg)

        def train(fn: Callable[[torch.Tensor], torch.Tensor] = fn) -> None:
            fn(xg).sum().backward()

        yield f"training chain of {depth} means", depth, train
    torch._dynamo.reset()
    fn = torch.compile(chain(4), dynamic=False)
    for graphs in GRAPHS:
        def forward(fn: Callable[[torch.Tensor], torch.Tensor] = fn, graphs: int = graphs
                    ) -> torch.Tensor:
            y = xg
            for _ in range(graphs):
                y = fn(y)
            return y

        yield f"training forward of {graphs} graphs", graphs, forward
        yield (f"training of {graphs} graphs", graphs,
               lambda forward=forward: forward().sum().backward())
    for inputs in WIDE_INPUTS:
        values = [torch.randn(64, 64, device=dev) for _ in range(inputs)]
        for depth in WIDE_DEPTHS:
            torch._dynamo.reset()
            fn = torch.compile(wide_chain(depth), dynamic=False)
            yield (f"inference wide chain of {depth} means of {inputs} inputs", depth,
                   lambda fn=fn, values=values: fn(x, *values))
    for outputs in OUTPUTS:
        for depth in OUTPUT_DEPTHS:
            torch._dynamo.reset()
            fn = torch.compile(output_chain(depth, outputs), dynamic=False)
            yield (f"inference output chain of {depth} means of {outputs} outputs", depth,
                   lambda fn=fn: fn(x))
    torch._dynamo.reset()


def time_call(op: Callable[[], object], calls: int, rounds: int = ROUNDS,
              warmups: int = 5) -> float:
    """Host us per call: the median of ``rounds`` rounds of ``calls`` back-to-back calls, after
    ``warmups`` calls."""
    for _ in range(warmups):
        op()
    torch.cuda.synchronize()
    per_round = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            op()
        per_round.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_round)


def probe_main(doc: str, rows: Callable[[], list[dict[str, object]]],
               **meta: object) -> None:
    """The ``main`` of a probe script (``function_chains.py``, ``op_mix.py``): ``--json OUT``,
    then its rows (each with ``case`` and ``us``) written there beside ``meta`` and torch's
    version, and printed."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--json", required=True, help="where to write the rows")
    args = parser.parse_args()
    found = rows()
    with open(args.json, "w") as f:
        json.dump({**meta, "torch": torch.__version__, "rows": found}, f, indent=1)
    for row in found:
        print(f"{row['case']:40s} {row['us']:8.2f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True, help="write the rows here")
    args = parser.parse_args()
    dev = torch.device("cuda", 0)
    rows = []
    for name, depth, op in cases(dev):
        grad = not name.startswith("inference")
        with torch.set_grad_enabled(grad):
            us = time_call(op, max(8, 400 // depth))
        rows.append({"case": name, "depth": depth, "us": round(us, 3)})
        print(json.dumps(rows[-1]), flush=True)
    with open(args.json, "w") as f:
        json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
