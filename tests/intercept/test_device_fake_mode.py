"""SimFakeMode: kernels recorded with costs and streams, host syncs, values, real CPU work."""

from typing import Any

import pytest

from hwmodel.compute.spec import MEMCPY_DTOH, MEMCPY_HTOD
from intercept.host_time.host_cost import EMBEDDING_BACKWARD_SMALL, INDEX_PUT_ACCUMULATE, SORT_SMALL
from intercept.values.plausible import FLOAT_VALUE, INT_VALUE
from tests.intercept.device_harness import run_snippet

TRAINING_STEP = """
import time
import torch.nn as nn
import torch.nn.functional as F

class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))

vocab, d = 1000, 256
model = nn.Sequential(nn.Embedding(vocab, d), Block(d, 4), Block(d, 4), nn.Linear(d, vocab)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
side = torch.cuda.Stream()

def step():
    tokens = torch.randint(0, vocab, (4, 128)).to("cuda", non_blocking=True)
    with torch.cuda.stream(side):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens)
            loss = F.cross_entropy(logits.view(-1, vocab).float(), tokens.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return logits

step()
mark, excluded0, cpu0 = len(runtime.kernels), runtime.excluded_cpu_ns, time.process_time_ns()
logits = step()
cpu = time.process_time_ns() - cpu0  # all threads, like the stand-in's excluded time
result["step"] = {
    "kernels": runtime.kernels[mark:], "side": side.stream_id, "logits": str(logits.dtype),
    "excluded_share": (runtime.excluded_cpu_ns - excluded0) / cpu,
    "adam_state": str(opt.state[model[0].weight]["exp_avg"].dtype),
}
"""

BEHAVIOUR = """
import io, threading, warnings
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensor

def kernels_of(fn):
    mark = len(runtime.kernels)
    fn()
    return [k[0] for k in runtime.kernels[mark:]]

x = torch.randn(8, 16, device="cuda")
a, b, c = x.clone(), x.clone(), x.clone()
no_kernel = {
    "view": lambda: x.view(16, 8), "t": lambda: x.t(), "transpose": lambda: x.transpose(0, 1),
    "reshape": lambda: x.reshape(4, 32), "expand": lambda: x[:1].expand(8, 16),
    "permute": lambda: x.permute(1, 0), "split": lambda: x.split(4), "chunk": lambda: x.chunk(2),
    "unbind": lambda: x.unbind(0), "select": lambda: x[3], "slice": lambda: x[:, 2:5],
    "narrow": lambda: x.narrow(1, 0, 4), "diagonal": lambda: x.diagonal(),
    "detach": lambda: x.detach(), "as_strided": lambda: x.as_strided((4,), (2,)),
    "unsqueeze_": lambda: a.unsqueeze_(0), "squeeze_": lambda: b.squeeze_(), "t_": lambda: c.t_(),
    "empty": lambda: torch.empty(4, device="cuda"),
    "empty_like": lambda: torch.empty_like(x), "contiguous": lambda: x.contiguous(),
}
result["no_kernel"] = {name: kernels_of(fn) for name, fn in no_kernel.items()}
result["kernels"] = {
    "clone": kernels_of(lambda: x.clone()),
    "zeros": kernels_of(lambda: torch.zeros(4, device="cuda")),
    "t_contiguous": kernels_of(lambda: x.t().contiguous()), "mm": kernels_of(lambda: x @ x.t()),
}

# an index_put that accumulates (indexing's backward) sorts first: its own host-cost key
rows = torch.zeros(8, 16, device="cuda")
where = torch.tensor([1, 3, 1], device="cuda")
def host_keys_of(fn):
    mark = len(runtime.host_keys)
    fn()
    return runtime.host_keys[mark:]
long_ids = torch.zeros(5000, dtype=torch.long, device="cuda")
result["host_keys"] = {
    "accumulate": host_keys_of(lambda: rows.index_put_((where,), x[:3], accumulate=True)),
    "assign": host_keys_of(lambda: rows.index_put_((where,), x[:3])),
    "short_sort": host_keys_of(lambda: torch.argsort(where, stable=True)),
    "long_sort": host_keys_of(lambda: long_ids.sort(dim=0)),
    "short_embedding_backward": host_keys_of(lambda: torch.ops.aten.embedding_dense_backward(
        x[:3], where, 8, -1, False)),
    "long_embedding_backward": host_keys_of(lambda: torch.ops.aten.embedding_dense_backward(
        torch.zeros(5000, 16, device="cuda"), long_ids, 8, -1, False)),
}

# small all-CPU work runs for real, big CPU tensors stay fake
small = torch.arange(10)
result["real_cpu"] = {
    "sum": small.sum().item(), "small_is_real": not isinstance(small, FakeTensor),
    "big_is_fake": isinstance(torch.empty(1000, 1000), FakeTensor),
    "kernels": kernels_of(lambda: (small * 2).tolist()),
}

# reading a CUDA value on the host: a sync of the current stream, then a plausible value
# (a sum of 4096 fake floats is unknown to the simulator)
side = torch.cuda.Stream()
loss = torch.ones(4096, device="cuda").sum() * 3
reads = {
    "item": lambda: loss.item(), "float": lambda: float(loss), "int": lambda: int(loss.long()),
    "bool": lambda: bool(torch.isnan(loss)),
    "tolist": lambda: torch.ones(64, 64, device="cuda")[:2, :2].tolist(),
    "format": lambda: f"{loss:.4f}", "repr": lambda: repr(loss),
    "print": lambda: print("loss", loss),
    "cpu": lambda: loss.cpu().item(),
    "small": lambda: (torch.ones((), device="cuda") * 3).item(),
}
values, syncs = {}, {}
for name, read in reads.items():
    with torch.cuda.stream(side):
        mark = len(runtime.calls)
        values[name] = read()
        syncs[name] = [c for c in runtime.calls[mark:] if c[0] == "sync"]
result["reads"] = {"values": values, "syncs": syncs, "side": side.stream_id}
mark = len(runtime.calls)
loss.to("cpu", non_blocking=True)
result["non_blocking_syncs"] = runtime.calls[mark:]
try:
    loss.numpy()
except TypeError as error:
    result["numpy_cuda"] = str(error)
result["numpy"] = loss.cpu().numpy().tolist()

# copies between host and device: named like CUDA's profiler does, blocking ones wait
def copy_record(fn):
    kernels, calls = len(runtime.kernels), len(runtime.calls)
    fn()
    return [runtime.kernels[kernels:], [c for c in runtime.calls[calls:] if c[0] == "sync"]]

host = torch.ones(1000)
result["copies"] = {
    "to_cuda": copy_record(lambda: host.to("cuda")),
    "to_cuda_non_blocking": copy_record(lambda: host.to("cuda", non_blocking=True)),
    "cpu": copy_record(lambda: torch.ones(1000, device="cuda").cpu()),
}

# data-dependent output shapes get their real size, and sync like on a real GPU
v = torch.randn(100, device="cuda")
ids = torch.randint(0, 10, (100,), device="cuda")
result["data_dependent_expected"] = {
    "positive": int((v > 0).sum()), "distinct": len(set(ids.tolist())),
    "bins": max(16, max(ids.tolist()) + 1)}
shapes = {}
for name, fn in {
    "nonzero": lambda: torch.nonzero(v > 0), "masked": lambda: v[v > 0],
    "masked_select": lambda: torch.masked_select(v, v > 0), "unique": lambda: torch.unique(ids),
    "bincount": lambda: torch.bincount(ids, minlength=16),
    "repeat_interleave": lambda: torch.repeat_interleave(
        torch.ones(7, dtype=torch.long, device="cuda")),
}.items():
    mark = len(runtime.calls)
    shapes[name] = [list(fn().shape), sum(c[0] == "sync" for c in runtime.calls[mark:])]
result["data_dependent"] = shapes

# torch.save of fake tensors writes meta placeholders
layer = nn.Linear(512, 512).cuda()
buffer = io.BytesIO()
torch.save(layer.state_dict(), buffer)
buffer.seek(0)
loaded = torch.load(buffer)
result["save"] = {"bytes": buffer.getbuffer().nbytes,
                  "loaded": [[str(t.device), list(t.shape)] for t in loaded.values()]}

# threads the script starts run under the mode, DataLoader workers + pin-memory thread too
seen = {}
thread = threading.Thread(
    target=lambda: seen.update(device=str(torch.ones(2, device="cuda").device)))
thread.start(); thread.join()
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.arange(64.0).view(32, 2), torch.arange(32))
batches = [[str(a.to("cuda", non_blocking=True).device), int(b.sum())]
           for a, b in DataLoader(data, batch_size=8, num_workers=2, pin_memory=True)]
result["threads"] = {"thread": seen["device"], "batches": batches}

# torch.compile with Inductor launches one fused kernel per graph; a backend that needs real
# buffers runs as aot_eager (one warning), its ops recorded one by one
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = torch.compile(lambda a: (a * 2).sin())
    second = torch.compile(lambda a: (a + 1).cos(), mode="max-autotune")
    third = torch.compile(lambda a: (a - 1).exp(), backend="cudagraphs")
    compiled = kernels_of(lambda: (first(x), second(x)))
    other = kernels_of(lambda: third(x))
    # reductions over the same dimension share a kernel (softmax); over another, never
    same_dim = torch.compile(lambda a: (a - a.amax(1, keepdim=True)).exp().sum(1))
    other_dim = torch.compile(lambda a: (a - a.mean(0, keepdim=True)).mean(1))
    square = torch.randn(16, 16, device="cuda")  # both reductions' sizes alike
    reductions = {"same_dim": kernels_of(lambda: same_dim(square)),
                  "other_dim": kernels_of(lambda: other_dim(square))}
    # a batch norm's statistics: few channels over a large batch split in two kernels
    few = torch.ones(64, 64, 56, 56, device="cuda")
    many = torch.ones(64, 2048, 7, 7, device="cuda")
    channel_sums = torch.compile(lambda a: a.sum(dim=(0, 2, 3)), dynamic=False)
    reductions["few_outputs"] = kernels_of(lambda: channel_sums(few))
    reductions["many_outputs"] = kernels_of(lambda: channel_sums(many))
    # a graph compiled for dynamic shapes is planned at the sizes it was traced with
    dynamic_sums = torch.compile(lambda a: a.sum(dim=(0, 2, 3)), dynamic=True)
    reductions["dynamic"] = kernels_of(lambda: dynamic_sums(few))
    # a batch norm's backward: both gradient sums in one split reduction, then the input
    # gradient in a kernel of its own, after them
    norm = nn.BatchNorm2d(64).cuda()
    normed = torch.compile(norm)(few.requires_grad_())
    mark = len(runtime.kernels)
    normed.backward(torch.ones_like(normed))
    reductions["bn_backward"] = [k[:3] for k in runtime.kernels[mark:]]
    # a generated kernel's launch is charged by the buffers it reads and writes
    from intercept.dispatch import inductor_plan
    planned = len(inductor_plan._plans)
    torch.compile(lambda a, b, c: a + b + c, dynamic=False)(x, x * 2, x * 3)
    def sine_and_cosine(a):
        sine = a.sin()
        return sine, sine.cos()
    torch.compile(sine_and_cosine, dynamic=False)(x)
    reductions["buffers"] = [[[k.reads, k.writes] for k in plan.kernels
                              if k.spec.name.startswith("inductor::")]
                             for plan in list(inductor_plan._plans.values())[planned:]]
    # a fused kernel's intermediates take no memory: only what it writes
    chain_of_ops = torch.compile(lambda a: ((a * 2 + 1).exp() * 3).sum(dim=1))
    chain_of_ops(few)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    chained_out = chain_of_ops(few)
    reductions["fused_peak_bytes"] = torch.cuda.max_memory_allocated() - before
    reductions["fused_out_bytes"] = chained_out.numel() * chained_out.element_size()
# a backward through two calls of one compiled graph: two backward nodes, one backward run
chained = torch.compile(lambda a: (a * 2).sin())
leaf = torch.ones(8, 16, device="cuda", requires_grad=True)
for _ in range(2):  # the first compiles
    mark = len(runtime.host_charges)
    chained(chained(leaf)).sum().backward()
backward_charges = runtime.host_charges[mark:][2:]  # after the two forward calls
result["compiled_backward"] = {"charges": backward_charges,
                               "layers": runtime.host_costs.layers_ns}
result["compile"] = {"kernels": compiled, "other": other, "reductions": reductions,
                     "warnings": [str(w.message) for w in caught if "aot_eager" in str(w.message)]}
"""


FINALIZED_PARAMETERS = """
import gc, weakref
import torch.nn as nn
gone = []
model = nn.Linear(512, 512)  # built on the CPU: fake parameters
for name, param in model.named_parameters():  # as DeepSpeed names parameters for debugging
    weakref.finalize(param, gone.append, name)
model.to("cuda")
result["device"] = str(model.weight.device)
result["gone_while_alive"] = list(gone)
del model, name, param
gc.collect()
result["gone"] = sorted(gone)
"""


PARAMETER_ATTRIBUTES = """
import torch.nn as nn
def tagged(module, tag):
    for param in module.parameters():
        param.tensor_model_parallel = tag  # as Megatron marks its sharded weights
    return module
moved = tagged(nn.Linear(8, 8), "cpu").to("cuda")
cast = tagged(nn.Linear(8, 8, device="cuda"), "gpu").bfloat16()
first, second = nn.Linear(8, 8), nn.Linear(8, 8)
second.weight = first.weight
tied = nn.Sequential(first, second).cuda()
result["moved"] = [[str(p.device), p.tensor_model_parallel] for p in moved.parameters()]
result["cast"] = [[str(p.dtype), p.tensor_model_parallel] for p in cast.parameters()]
result["tied"] = [tied[0].weight is tied[1].weight, len(list(tied.parameters()))]
"""


TRUNC_NORMAL = """
import torch.nn as nn
mark = len(runtime.kernels)
big = nn.init.trunc_normal_(torch.empty(2048, 2048, device="cuda"), std=0.02)
result["kernels"] = [k[0] for k in runtime.kernels[mark:]]
small = nn.init.trunc_normal_(torch.empty(16, 16, device="cuda"), std=0.02, a=-0.03, b=0.03)
result["small_within"] = bool(small.abs().max().item() <= 0.03)
"""


SCALARS_INTO_TENSOR = """
norms = [torch.randn(4096, device="cuda").norm() for _ in range(3)]
kernels, calls = len(runtime.kernels), len(runtime.calls)
gathered = torch.tensor(norms)  # Megatron's grad-norm fallback does this
result["gathered"] = [str(gathered.device), gathered.tolist()]
result["kernels"] = [k[0] for k in runtime.kernels[kernels:]]
result["syncs"] = sum(c[0] == "sync" for c in runtime.calls[calls:])
"""


DEEP_COPIES = """
import copy
import torch.nn as nn
with torch.device("meta"):  # TorchTitan builds on meta, then copies per pipeline stage
    whole = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4))
stage = copy.deepcopy(whole)
on_gpu = nn.Linear(8, 8).cuda()
twin = copy.deepcopy(on_gpu)
result.update(meta=[str(p.device) for p in stage.parameters()],
              gpu=[str(p.device) for p in twin.parameters()],
              same_mode=twin.weight.fake_mode is on_gpu.weight.fake_mode,
              shared=twin.weight.untyped_storage() is on_gpu.weight.untyped_storage())
"""

SDPA_BACKENDS = """
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
titan = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]

def attention(dtype, backends=None):
    q = torch.randn(2, 4, 128, 64, device="cuda", dtype=dtype, requires_grad=True)
    mark = len(runtime.kernels)
    if backends is None:
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    else:
        with sdpa_kernel(backends, set_priority=True):
            F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    return sorted({k[0] for k in runtime.kernels[mark:] if "attention" in k[0]
                   or "softmax" in k[0]})

result.update(default=attention(torch.bfloat16), titan=attention(torch.bfloat16, titan),
              fp32=attention(torch.float32), titan_fp32=attention(torch.float32, titan))
"""

GENERATORS = """
generators = torch.cuda.default_generators  # Megatron's RNG tracker uses them directly
g = generators[1]
g.manual_seed(1234)
state, snapshot = g.get_state(), g.graphsafe_get_state()
torch.cuda.manual_seed(99)
after_reseed = g.initial_seed()
g.set_state(state)
restored = torch.cuda.initial_seed()
torch.cuda.manual_seed(7)
g.graphsafe_set_state(snapshot)
result.update(count=len(generators), device=str(g.device), after_reseed=after_reseed,
              restored=restored, graphsafe=torch.cuda.initial_seed())
"""


@pytest.fixture(scope="module")
def step() -> dict[str, Any]:
    return run_snippet(TRAINING_STEP)["result"]["step"]


@pytest.fixture(scope="module")
def behaviour() -> dict[str, Any]:
    return run_snippet(BEHAVIOUR)


def test_training_step_records_costed_kernels(step: dict[str, Any]) -> None:
    kernels = step["kernels"]
    names = {k[0] for k in kernels}
    assert len(kernels) > 50
    assert all(flops > 0 or nbytes > 0 for _, flops, nbytes, _ in kernels)
    assert {"aten::mm", "aten::_scaled_dot_product_flash_attention",
            "aten::_scaled_dot_product_flash_attention_backward", MEMCPY_HTOD} <= names
    assert sum(flops for name, flops, _, _ in kernels if name == "aten::mm") > 0
    assert step["logits"] == "torch.bfloat16"  # autocast really active
    assert step["adam_state"] == "torch.float32"


def test_kernels_run_on_the_stream_of_their_forward_op(step: dict[str, Any]) -> None:
    streams = {k[3] for k in step["kernels"]}
    # tokens are copied on the default stream; forward, backward (autograd's own thread) and
    # the optimizer step inherit the side stream
    assert streams == {0, step["side"]}
    assert sum(k[3] == step["side"] for k in step["kernels"]) > len(step["kernels"]) - 3


def test_interceptor_time_is_excluded(step: dict[str, Any]) -> None:
    assert step["excluded_share"] > 0.4


def test_views_and_metadata_launch_nothing(behaviour: dict[str, Any]) -> None:
    no_kernel = behaviour["result"]["no_kernel"]
    assert no_kernel == {name: [] for name in no_kernel}
    assert behaviour["result"]["kernels"] == {
        "clone": ["aten::clone"], "zeros": ["aten::zeros"], "t_contiguous": ["aten::clone"],
        "mm": ["aten::mm"]}


def test_small_cpu_work_runs_for_real(behaviour: dict[str, Any]) -> None:
    assert behaviour["result"]["real_cpu"] == {"sum": 45, "small_is_real": True,
                                               "big_is_fake": True, "kernels": []}


def test_host_reads_sync_the_current_stream(behaviour: dict[str, Any]) -> None:
    reads = behaviour["result"]["reads"]
    side = reads["side"]
    assert reads["values"] == {
        "item": FLOAT_VALUE, "float": FLOAT_VALUE, "int": INT_VALUE, "bool": False,
        "tolist": [[FLOAT_VALUE] * 2] * 2, "format": f"{FLOAT_VALUE:.4f}",
        "repr": f"tensor({FLOAT_VALUE:.0f}., device='cuda:0')", "print": None, "cpu": FLOAT_VALUE,
        "small": 3.0}
    for name, syncs in reads["syncs"].items():
        assert syncs and all(s == ["sync", "stream", side] for s in syncs), name
    assert f"tensor({FLOAT_VALUE:.0f}., device='cuda:0')" in behaviour["stdout"]
    assert behaviour["result"]["non_blocking_syncs"] == []
    assert "Use Tensor.cpu()" in behaviour["result"]["numpy_cuda"]
    assert behaviour["result"]["numpy"] == FLOAT_VALUE


def test_ops_with_several_host_paths_are_charged_by_the_path_taken(
        behaviour: dict[str, Any]) -> None:
    keys = behaviour["result"]["host_keys"]
    assert keys["accumulate"][-1] == INDEX_PUT_ACCUMULATE
    assert set(keys["assign"]) == {None}
    # ATen's one-kernel paths: a sort of at most 4,096, an embedding backward of 3,072 indices
    assert keys["short_sort"] == [SORT_SMALL]
    assert keys["long_sort"] == [None]
    assert keys["short_embedding_backward"][-1] == EMBEDDING_BACKWARD_SMALL
    assert keys["long_embedding_backward"][-1] is None


def test_host_device_copies(behaviour: dict[str, Any]) -> None:
    copies = behaviour["result"]["copies"]
    assert copies["to_cuda"] == [[[MEMCPY_HTOD, 0, 4000, 0]], [["sync", "stream", 0]]]
    assert copies["to_cuda_non_blocking"] == [[[MEMCPY_HTOD, 0, 4000, 0]], []]
    assert copies["cpu"] == [[["aten::ones", 0, 4000, 0], [MEMCPY_DTOH, 0, 4000, 0]],
                             [["sync", "stream", 0]]]


def test_data_dependent_shapes_follow_the_values(behaviour: dict[str, Any]) -> None:
    expected = behaviour["result"]["data_dependent_expected"]
    positive = expected["positive"]
    assert 20 < positive < 80  # 100 real normal draws
    assert behaviour["result"]["data_dependent"] == {
        "nonzero": [[positive, 1], 1], "masked": [[positive], 1],
        "masked_select": [[positive], 1], "unique": [[expected["distinct"]], 1],
        "bincount": [[expected["bins"]], 1], "repeat_interleave": [[7], 1]}


def test_torch_save_writes_meta_placeholders(behaviour: dict[str, Any]) -> None:
    save = behaviour["result"]["save"]
    assert save["loaded"] == [["meta", [512, 512]], ["meta", [512]]]
    assert save["bytes"] < 512 * 512 * 4 / 100


def test_script_threads_run_under_the_mode(behaviour: dict[str, Any]) -> None:
    threads = behaviour["result"]["threads"]
    assert threads["thread"] == "cuda:0"
    assert threads["batches"] == [["cuda:0", sum(range(i, i + 8))] for i in range(0, 32, 8)]


def test_parameters_with_finalizers_move_to_the_gpu() -> None:
    """Moving a module swaps its fake parameters, which refuses weakly referenced tensors; a
    framework's ``weakref.finalize`` on a parameter must neither block the move nor be lost."""
    result = run_snippet(FINALIZED_PARAMETERS)["result"]
    assert result == {"device": "cuda:0", "gone_while_alive": [], "gone": ["bias", "weight"]}


def test_parameters_keep_their_attributes_and_ties_when_moved_or_cast() -> None:
    """On a GPU ``Module.to`` converts parameters in place: what a framework set on them
    (Megatron's ``tensor_model_parallel``) and weights two modules share survive the move and
    a cast, as they must in the simulator."""
    result = run_snippet(PARAMETER_ATTRIBUTES)["result"]
    assert result["moved"] == [["cuda:0", "cpu"]] * 2
    assert result["cast"] == [["torch.bfloat16", "gpu"]] * 2
    assert result["tied"] == [True, 3]


def test_trunc_normal_of_unknown_values_ends() -> None:
    """Its rejection loop redraws until no sample is out of bounds, which fake floats never
    reach: drawn once and clamped instead; a small tensor with values runs the real loop."""
    result = run_snippet(TRUNC_NORMAL)["result"]
    assert result["kernels"] == ["aten::normal_", "aten::clamp_"]
    assert result["small_within"] is True


def test_a_tensor_of_cuda_scalars_reads_each_like_item() -> None:
    """``torch.tensor(list of CUDA scalars)`` reads them below the Python key: each is a
    device-to-host copy and a sync, as ``.item()``, not an error."""
    result = run_snippet(SCALARS_INTO_TENSOR)["result"]
    assert result["gathered"] == ["cpu", [1.0, 1.0, 1.0]]
    assert result["kernels"] == ["Memcpy DtoH"] * 3
    assert result["syncs"] == 3


def test_deep_copies_of_fake_models_stay_in_the_rank_mode() -> None:
    result = run_snippet(DEEP_COPIES)["result"]
    assert result == {"meta": ["meta"] * 4, "gpu": ["cuda:0"] * 2, "same_mode": True,
                      "shared": False}


def test_attention_picks_the_backend_a_cuda_build_picks() -> None:
    """Torch's priority order, the enabled backends and what each takes: flash by default,
    cuDNN first where TorchTitan puts it, memory-efficient for fp32, math when TorchTitan's
    list leaves only it for fp32 (its pipeline-parallel runs)."""
    result = run_snippet(SDPA_BACKENDS)["result"]
    fused = "aten::_scaled_dot_product_{0}_attention"
    assert result["default"] == [fused.format("flash"), fused.format("flash") + "_backward"]
    assert result["titan"] == [fused.format("cudnn"), fused.format("cudnn") + "_backward"]
    assert result["fp32"] == [fused.format("efficient"), fused.format("efficient") + "_backward"]
    assert "aten::_safe_softmax" in result["titan_fp32"]


def test_default_generators_exist_per_gpu_and_keep_the_seed() -> None:
    result = run_snippet(GENERATORS)["result"]
    assert result == {"count": 8, "device": "cuda:1", "after_reseed": 99, "restored": 1234,
                      "graphsafe": 1234}


def test_compiled_backward_pays_per_node_and_once_per_run(behaviour: dict[str, Any]) -> None:
    backward = behaviour["result"]["compiled_backward"]
    node, run = (backward["layers"]["compiled_backward_call"],
                 backward["layers"]["compiled_backward_run"])
    assert backward["charges"] == [node + run, node]


def test_compile_launches_fused_kernels(behaviour: dict[str, Any]) -> None:
    compiled = behaviour["result"]["compile"]
    assert compiled["kernels"] == ["inductor::triton_pointwise"] * 2
    assert {"aten::sub", "aten::exp"} <= set(compiled["other"])
    assert len(compiled["reductions"]["same_dim"]) == 1
    assert len(compiled["reductions"]["other_dim"]) == 2
    assert len(compiled["reductions"]["few_outputs"]) == 2
    assert len(compiled["reductions"]["many_outputs"]) == 1
    assert len(compiled["reductions"]["dynamic"]) == 2
    assert compiled["reductions"]["buffers"] == [[[3, 1]], [[1, 2]]]
    full = 64 * 64 * 56 * 56 * 4  # bytes of the fp32 activation and of its gradient
    assert compiled["reductions"]["fused_peak_bytes"] < full // 10  # eager: 2 x full
    assert compiled["reductions"]["fused_peak_bytes"] >= compiled["reductions"]["fused_out_bytes"]
    backward = [k for k in compiled["reductions"]["bn_backward"] if k[0].startswith("inductor::")]
    assert [k[0] for k in backward if k[2] >= full] == [
        "inductor::triton_reduction", "inductor::triton_pointwise"]
    big = [k[2] for k in backward if k[2] >= full]
    assert abs(big[0] - 2 * full) < full // 100  # reads the gradient and the input, once
    assert abs(big[1] - 3 * full) < full // 100  # reads both again, writes the input gradient
    assert len(compiled["warnings"]) == 1
