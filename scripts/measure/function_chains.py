"""The custom ``autograd.Function`` probe: what one ``Function.apply`` costs the host beyond the
ops its ``forward`` runs, as one script that runs on a GPU machine and under the simulator alike.

Megatron-core wraps every tensor-parallel linear layer and every sequence-parallel gather and
scatter in a ``torch.autograd.Function``; the simulator counts the Python of ``apply`` and of
``forward`` and charges their ops, but not ``apply``'s C++ (``THPFunction_apply``: the node, its
context object, the outputs wrapped into the graph). Rows, each a chain of ``DEPTH`` steps on a
tensor that requires grad, us per step:

* ``ops``: ``y = y * 1.0001`` (one op, recorded for backward);
* ``function``: ``y = Scale.apply(y)``, whose ``forward`` runs the same op;
* ``function saving``: the same ``forward`` also saving its input (``ctx.save_for_backward``);
* ``... forward+backward``: the chain, then its backward (the engine running a Python node per
  step in place of a C++ one).

The difference between a ``function`` row and the ``ops`` row, real against simulated, is what
the simulator leaves out per ``apply`` (and per Python backward node). Each row: the median of
``ROUNDS`` rounds (the kernels are small: the GPU keeps up with the host).

  python3 scripts/measure/function_chains.py --json OUT.json    # on a GPU machine
  phantora-ns3 SCENARIO   # a scenario whose script is this one, args: --json OUT.json
"""

import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from scripts.measure.compiled_chains import probe_main, time_call  # noqa: E402

DEPTH = 50
ROUNDS = 7
CALLS = 20


class Scale(torch.autograd.Function):
    """``x * 1.0001`` as a custom Function, its backward the same scale."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
        return x * 1.0001

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        return grad * 1.0001


class SavingScale(torch.autograd.Function):
    """:class:`Scale` that also saves its input for backward, as Megatron's linear layers do."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * 1.0001

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        return grad * 1.0001


def chain(step: Callable[[torch.Tensor], torch.Tensor], x0: torch.Tensor) -> torch.Tensor:
    y = x0
    for _ in range(DEPTH):
        y = step(y)
    return y


def timed(op: Callable[[], object]) -> float:
    """us per chain step: :func:`compiled_chains.time_call` per chain, over its depth."""
    return time_call(op, CALLS, rounds=ROUNDS, warmups=3) / DEPTH


def rows() -> list[dict[str, object]]:
    x0 = torch.randn(256, 256, device="cuda", requires_grad=True)
    steps: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "ops": lambda y: y * 1.0001, "function": Scale.apply, "function saving": SavingScale.apply}
    out = []
    for name, step in steps.items():
        out.append({"case": name, "us": round(timed(lambda s=step: chain(s, x0)), 3)})
        out.append({"case": f"{name} forward+backward",
                    "us": round(timed(lambda s=step: chain(s, x0).sum().backward()), 3)})
    return out


def main() -> None:
    probe_main(__doc__, rows, depth=DEPTH, rounds=ROUNDS)


if __name__ == "__main__":
    main()
