"""Values cross ranks: collectives, send/recv and object collectives of integer, bool and small
tensors carry what the other ranks hold, on two simulated GPUs, as NCCL and gloo would."""

import json

import pytest

from phantora.cli import main

SCRIPT = """\
import json, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
out = {}
t = torch.tensor([rank + 1, 10 * (rank + 1)], device="cuda")
dist.all_reduce(t)
out["all_reduce_sum"] = t.tolist()
m = torch.tensor([rank], device="cuda")
dist.all_reduce(m, op=dist.ReduceOp.MAX)
out["all_reduce_max"] = m.item()
import torch.distributed._functional_collectives as funcol
tokens = torch.tensor(3 + rank, device="cuda")
out["functional_all_reduce"] = funcol.all_reduce(tokens, "sum", dist.group.WORLD).item()
out["functional_input_after"] = tokens.item()
gathered = [torch.zeros(1, dtype=torch.long, device="cuda") for _ in range(world)]
dist.all_gather(gathered, torch.tensor([rank * 7], device="cuda"))
out["all_gather"] = [g.item() for g in gathered]
counts = torch.tensor([rank, 2 + rank], device="cuda")   # rows this rank sends to each rank
received = torch.empty_like(counts)
dist.all_to_all_single(received, counts)
out["all_to_all"] = received.tolist()
n = received.sum()               # computed before its values are read: queued, then replayed
out["sum_after"] = int(n)
if rank == 0:
    dist.send(torch.tensor([42, 43], device="cuda"), dst=1)
else:
    buf = torch.zeros(2, dtype=torch.long, device="cuda")
    dist.recv(buf, src=0)
    out["recv"] = buf.tolist()
objs = [{"from": rank}] if rank == 0 else [None]
dist.broadcast_object_list(objs, src=0)
out["broadcast_object"] = objs[0]
everyone = [None] * world
dist.all_gather_object(everyone, f"rank{rank}")
out["all_gather_object"] = everyone
cpu_group = dist.new_group(backend="gloo")
c = torch.tensor([rank + 5])
dist.all_reduce(c, group=cpu_group)
out["cpu_all_reduce"] = c.tolist()
print("VALUES", json.dumps(out), flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def values(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("values")
    (tmp / "train.py").write_text(SCRIPT)
    (tmp / "s.yaml").write_text("cluster: {gpu: h200, gpus_per_host: 2}\n"
                                "workload: {script: train.py}\n")
    assert main([str(tmp / "s.yaml"), "--out", str(tmp / "out")]) == 0
    logs = [(tmp / "out" / "ranks" / f"rank{r}.log").read_text() for r in range(2)]
    return [json.loads(next(line for line in log.splitlines()
                            if line.startswith("VALUES"))[len("VALUES "):]) for log in logs]


def test_reductions_and_gathers_carry_values(values: list[dict]) -> None:
    for found in values:
        assert found["all_reduce_sum"] == [3, 30]
        assert found["all_reduce_max"] == 1
        assert found["all_gather"] == [0, 7]
        assert found["cpu_all_reduce"] == [11]
        # out of place (TorchTitan's token count): the sum lands in the result, the input keeps
        assert found["functional_all_reduce"] == 7
    assert [v["functional_input_after"] for v in values] == [3, 4]


def test_all_to_all_and_ops_queued_on_its_output(values: list[dict]) -> None:
    assert values[0]["all_to_all"] == [0, 1] and values[0]["sum_after"] == 1
    assert values[1]["all_to_all"] == [2, 3] and values[1]["sum_after"] == 5


def test_point_to_point_and_object_collectives(values: list[dict]) -> None:
    assert values[1]["recv"] == [42, 43]
    for found in values:
        assert found["broadcast_object"] == {"from": 0}
        assert found["all_gather_object"] == ["rank0", "rank1"]
