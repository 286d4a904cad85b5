"""What a script sees of the fake GPUs: queries, streams and events, memory, RNG, patch table."""

from typing import Any

import pytest

from hwmodel.catalogue import lookup_gpu
from tests.intercept.device_harness import KERNEL_NS, LAUNCH_OVERHEAD_NS, run_snippet

QUERIES = """
import torch.nn as nn
from intercept.dispatch import patches

p = torch.cuda.get_device_properties(1)
result["queries"] = {
    "available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
    "name": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability()),
    "props": [p.name, p.major, p.minor, p.total_memory, p.multi_processor_count],
    "bf16": torch.cuda.is_bf16_supported(),
    "accelerator": str(torch.accelerator.current_accelerator()),
}
torch.cuda.set_device(2)
with torch.cuda.device(3):
    inner = torch.cuda.current_device()
result["devices"] = [inner, torch.cuda.current_device(), str(torch.ones(2, device="cuda").device)]
try:
    torch.cuda.set_device(4)
except RuntimeError as error:
    result["bad_device"] = str(error)
torch.cuda.set_device(0)

# streams and events: every call reaches the runtime
x = torch.ones(64, device="cuda")
torch.cuda.synchronize()
side = torch.cuda.Stream()
mark = len(runtime.calls)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(3):
    x = x * 2
end.record()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    result["current_in_context"] = torch.cuda.current_stream().stream_id
    y = x + 1
torch.cuda.current_stream().wait_event(end)
end.synchronize()
result["elapsed_ms"] = start.elapsed_time(end)
result["query"] = [end.query(), side.query()]
side.synchronize()
torch.cuda.synchronize()
result["stream_calls"] = runtime.calls[mark:]
result["side"] = side.stream_id
result["default"] = [torch.cuda.default_stream().stream_id, torch.cuda.current_stream().stream_id]
untimed = torch.cuda.Event()
untimed.record()
try:
    start.elapsed_time(untimed)
except RuntimeError as error:
    result["untimed"] = str(error)

# memory statistics from the live-bytes counter
torch.cuda.reset_peak_memory_stats()
base = torch.cuda.memory_allocated()
big = torch.empty(1024, 1024, device="cuda")
view = big[:10]
grown = torch.cuda.memory_allocated() - base
del big
after_del_with_view = torch.cuda.memory_allocated() - base
del view
result["memory"] = {
    "grown": grown, "kept_by_view": after_del_with_view,
    "freed": torch.cuda.memory_allocated() - base,
    "peak": torch.cuda.max_memory_allocated() - base,
    "reserved_covers_peak": torch.cuda.memory_reserved() >= torch.cuda.max_memory_allocated(),
    "stats": (torch.cuda.memory_stats()["allocated_bytes.all.current"]
              == torch.cuda.memory_allocated()),
    "mem_get_info": list(torch.cuda.mem_get_info()),
    "accelerator": torch.accelerator.memory_allocated() == torch.cuda.memory_allocated(),
    "summary": "CUDA memory summary" in torch.cuda.memory_summary(),
}
torch.cuda.reset_peak_memory_stats()
result["memory"]["peak_after_reset"] = torch.cuda.max_memory_allocated() - base

# RNG and NVTX are no-ops that keep their bookkeeping
torch.manual_seed(1234)
state = torch.cuda.get_rng_state()
torch.cuda.manual_seed(5)
torch.cuda.set_rng_state(state)
torch.cuda.nvtx.range_push("step"); torch.cuda.nvtx.range_pop()
with torch.cuda.nvtx.range("forward"):
    pass
result["seed"] = torch.cuda.initial_seed()

# moving tensors and modules
cpu = torch.randn(300, 300)
moved = [cpu.cuda(), cpu.cuda(1), cpu.pin_memory().to("cuda", non_blocking=True)]
model = nn.Linear(300, 300).to("cuda")
with torch.device("meta"):
    lazy = nn.Linear(300, 300)
lazy = lazy.to_empty(device="cuda")
torch.set_default_device("cuda")
default = torch.zeros(3)
torch.set_default_device("cpu")
result["moves"] = [str(t.device) for t in [*moved, model.weight, lazy.weight, default]]

# the patch table: a Wrap keeps the original as __wrapped__ (lists: gain FakeTensor; CUDA_HOME:
# names the stand-in toolkit)
from torch._subclasses.fake_tensor import FakeTensor
applied = {}
for entry in patches.PATCHES:
    if isinstance(entry, patches.Register):
        continue
    owner, name = patches._resolve(entry.target)
    new = getattr(owner, name)
    if isinstance(entry, patches.Patch):
        applied[entry.target] = new is entry.new
    else:
        applied[entry.target] = (hasattr(new, "__wrapped__") or
                                 (FakeTensor in new if isinstance(new, list) else
                                  isinstance(new, str) and "stand-in" in new))
result["patches_applied"] = applied
result["copies_rebound"] = torch.cuda.random.current_device is torch.cuda.current_device
result["torch_version"] = [torch.__version__.split("+")[0], patches.TORCH_VERSION_CHECKED]

# entry points: prepare is idempotent for the same devices, the mode is entered once
from hwmodel.catalogue import lookup_gpu
from hwmodel.errors import SimulationError
device.prepare(lookup_gpu("h100"), 4)
refusals = []
for attempt in (lambda: device.prepare(lookup_gpu("a100-80g"), 4),
                lambda: device.enter_fake_mode(runtime=runtime)):
    try:
        attempt()
    except SimulationError as error:
        refusals.append(str(error))
result["refusals"] = refusals
"""


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    return run_snippet(QUERIES, gpu="h100", device_count=4)


def test_device_queries_report_the_catalogue_gpu(run: dict[str, Any]) -> None:
    gpu = lookup_gpu("h100")
    queries = run["result"]["queries"]
    assert queries["available"] is True
    assert queries["count"] == 4
    assert queries["name"] == gpu.marketing_name
    assert queries["capability"] == [gpu.sm_arch // 10, gpu.sm_arch % 10]
    assert queries["props"] == [gpu.marketing_name, 9, 0, gpu.memory_bytes, gpu.sm_count]
    assert queries["bf16"] is True
    assert queries["accelerator"] == "cuda"


def test_set_device_and_device_context(run: dict[str, Any]) -> None:
    assert run["result"]["devices"] == [3, 2, "cuda:2"]
    assert "invalid device ordinal 4" in run["result"]["bad_device"]


def test_streams_and_events_reach_the_runtime(run: dict[str, Any]) -> None:
    result = run["result"]
    side = result["side"]
    assert side != 0 and result["current_in_context"] == side
    assert result["default"] == [0, 0]
    start, end, handover = 0, 1, 2
    assert [tuple(c) for c in result["stream_calls"]] == [
        ("new_event", start), ("record_event", start, 0),
        ("new_event", end), ("record_event", end, 0),
        # side.wait_stream(current): an event on the default stream that side waits for
        ("new_event", handover), ("record_event", handover, 0), ("wait_event", side, handover),
        ("wait_event", 0, end),
        ("sync", "event", end),
        # elapsed_time: both completed?, then both completion times
        ("sync", "query", start), ("sync", "query", end),
        ("sync", "event", start), ("sync", "event", end),
        ("sync", "query", end),
        # side.query(): is an event recorded on side now complete?
        ("new_event", 3), ("record_event", 3, side), ("sync", "query", 3),
        ("sync", "stream", side),
        ("sync", "device", 0),
    ]


def test_elapsed_time_is_milliseconds_of_virtual_time(run: dict[str, Any]) -> None:
    # stand-in: the first of three back-to-back kernels starts one launch after `start`
    assert run["result"]["elapsed_ms"] == pytest.approx((LAUNCH_OVERHEAD_NS + 3 * KERNEL_NS) / 1e6)
    # end was synchronized; side's kernel still runs after it
    assert run["result"]["query"] == [True, False]
    assert "enable_timing=True" in run["result"]["untimed"]


def test_memory_statistics_follow_live_storages(run: dict[str, Any]) -> None:
    memory = run["result"]["memory"]
    mib = 4 * 1024 * 1024
    assert memory["grown"] == mib
    assert memory["kept_by_view"] == mib
    assert memory["freed"] == 0
    assert memory["peak"] == mib
    assert memory["peak_after_reset"] == 0
    assert memory["reserved_covers_peak"] and memory["stats"] and memory["accelerator"]
    free, total = memory["mem_get_info"]
    assert total == lookup_gpu("h100").memory_bytes and 0 < free < total
    assert memory["summary"]


def test_rng_and_nvtx_are_harmless(run: dict[str, Any]) -> None:
    assert run["result"]["seed"] == 1234


def test_tensors_and_modules_move_to_the_fake_gpu(run: dict[str, Any]) -> None:
    assert run["result"]["moves"] == ["cuda:0", "cuda:1", "cuda:0", "cuda:0", "cuda:0", "cuda:0"]


def test_every_patch_is_applied_and_copies_follow(run: dict[str, Any]) -> None:
    applied = run["result"]["patches_applied"]
    assert applied and applied == dict.fromkeys(applied, True)
    assert run["result"]["copies_rebound"] is True
    installed, checked = run["result"]["torch_version"]
    assert installed == checked, "re-check every patch point, then bump TORCH_VERSION_CHECKED"


def test_entry_points_refuse_a_second_setup(run: dict[str, Any]) -> None:
    first, second = run["result"]["refusals"]
    assert "already installed as 4 x h100" in first
    assert "already entered" in second
