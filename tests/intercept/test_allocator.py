"""The caching-allocator model: rounding, pools, split/merge, reuse, release, OOM, statistics;
and what a script on the fake GPU sees of it."""

import random
from pathlib import Path
from typing import Any

import pytest

from hwmodel.catalogue import lookup_gpu
from intercept.memory.allocator import (
    CUDA_CONTEXT_BYTES,
    LARGE_SEGMENT_BYTES,
    SMALL_SEGMENT_BYTES,
    Block,
    CachingAllocator,
    OutOfMemoryError,
    format_size,
    round_size,
    segment_size,
)
from phantora.cli import main
from tests.intercept.device_harness import run_snippet

KiB, MiB, GiB = 2**10, 2**20, 2**30


def allocator(total_bytes: int = 80 * GiB, context_bytes: int = CUDA_CONTEXT_BYTES,
              ) -> CachingAllocator:
    return CachingAllocator(0, total_bytes, context_bytes)


def stat(a: CachingAllocator, name: str, kind: str = "all") -> dict[str, int]:
    return a.stats.nested()[name][kind]  # type: ignore[index]


def cached(a: CachingAllocator) -> list[tuple[int, int, bool]]:
    """(size, stream, split) of every cached block, sorted."""
    return sorted((b.size, b.stream, b.is_split()) for b in a.blocks() if b.cached)


# --- sizes --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("nbytes", "block"), [
    (1, 512), (512, 512), (513, 1024), (4000, 4096), (MiB, MiB), (MiB + 1, MiB + 512)])
def test_requests_round_to_512_bytes(nbytes: int, block: int) -> None:
    assert round_size(nbytes) == block


@pytest.mark.parametrize(("block", "segment"), [
    (512, SMALL_SEGMENT_BYTES), (MiB, SMALL_SEGMENT_BYTES),  # small pool: 2 MiB segments
    (MiB + 512, LARGE_SEGMENT_BYTES), (10 * MiB - 512, LARGE_SEGMENT_BYTES),  # 1-10 MiB: 20 MiB
    (10 * MiB, 10 * MiB), (11 * MiB + 512, 12 * MiB)])  # >= 10 MiB: rounded up to 2 MiB
def test_segment_sizes_follow_the_pools(block: int, segment: int) -> None:
    assert segment_size(block) == segment


@pytest.mark.parametrize(("nbytes", "text"), [
    (0, "0 bytes"), (1024, "1024 bytes"), (1025, "1.00 KiB"), (MiB, "1024.00 KiB"),
    (20 * MiB, "20.00 MiB"), (GiB, "1024.00 MiB"), (int(79.18 * GiB), "79.18 GiB")])
def test_sizes_print_as_c10_prints_them(nbytes: int, text: str) -> None:
    assert format_size(nbytes) == text


# --- pools, splitting, merging, reuse -----------------------------------------------------------

def test_small_requests_share_a_2_mib_segment() -> None:
    a = allocator()
    first, second = a.malloc(100, 0), a.malloc(1000, 0)
    assert (first.size, second.size) == (512, 1024)
    assert second.addr == first.addr + 512  # packed after each other in one segment
    assert (a.allocated_bytes, a.reserved_bytes) == (1536, SMALL_SEGMENT_BYTES)
    assert stat(a, "segment", "small_pool")["current"] == 1
    assert stat(a, "requested_bytes")["current"] == 1100
    assert stat(a, "inactive_split_bytes", "small_pool")["current"] == SMALL_SEGMENT_BYTES - 1536


def test_a_large_segment_splits_and_merges_back_when_freed() -> None:
    a = allocator()
    first, second = a.malloc(4 * MiB, 0), a.malloc(4 * MiB, 0)
    assert a.reserved_bytes == LARGE_SEGMENT_BYTES  # one 20 MiB segment serves both
    assert cached(a) == [(12 * MiB, 0, True)]
    a.free(first)
    assert cached(a) == [(4 * MiB, 0, True), (12 * MiB, 0, True)]
    assert stat(a, "inactive_split")["current"] == 2
    a.free(second)  # merges with both neighbours: the whole segment again
    assert cached(a) == [(LARGE_SEGMENT_BYTES, 0, False)]
    assert stat(a, "inactive_split")["current"] == 0
    assert stat(a, "inactive_split_bytes")["current"] == 0
    assert (a.allocated_bytes, a.reserved_bytes) == (0, LARGE_SEGMENT_BYTES)


def test_large_blocks_keep_a_remainder_of_at_most_1_mib() -> None:
    a = allocator()
    block = a.malloc(11 * MiB + 1, 0)  # 11 MiB + 512 in a 12 MiB segment: not worth a split
    assert (block.size, a.reserved_bytes, a.allocated_bytes) == (12 * MiB, 12 * MiB, 12 * MiB)
    assert stat(a, "requested_bytes")["current"] == 11 * MiB + 1


def test_the_smallest_fitting_block_of_the_same_stream_is_reused() -> None:
    a = allocator()
    blocks = [a.malloc(n * MiB, 0) for n in (30, 12, 16)]
    addrs = [b.addr for b in blocks]
    for block in blocks:
        a.free(block)
    reserved = a.reserved_bytes
    reused = a.malloc(13 * MiB, 0)
    assert reused.addr == addrs[2]  # the 16 MiB block, not the 30 MiB one
    assert cached(a) == [(3 * MiB, 0, True), (12 * MiB, 0, False), (30 * MiB, 0, False)]
    other_stream = a.malloc(12 * MiB, 7)
    assert other_stream.addr not in addrs  # stream 0's cache is not used
    assert a.reserved_bytes == reserved + 12 * MiB


def test_empty_cache_releases_only_segments_with_nothing_in_use() -> None:
    a = allocator()
    kept, freed = a.malloc(4 * MiB, 0), a.malloc(4 * MiB, 0)
    whole = a.malloc(40 * MiB, 0)
    a.free(freed)
    a.free(whole)
    a.empty_cache()
    assert a.reserved_bytes == LARGE_SEGMENT_BYTES  # the 40 MiB segment went back
    assert a.allocated_bytes == kept.size
    assert a.stats.nested()["num_device_free"] == 1
    assert a.free_bytes() == a.capacity_bytes - LARGE_SEGMENT_BYTES


def test_a_block_used_on_another_stream_waits_for_a_synchronisation() -> None:
    a = allocator()
    block = a.malloc(4 * MiB, 0)
    a.record_stream(block, 5)
    a.free(block)
    assert a.allocated_bytes == 0
    assert stat(a, "active_bytes")["current"] == 4 * MiB  # still in use by stream 5
    assert a.malloc(4 * MiB, 0).addr != block.addr
    assert stat(a, "allocated_bytes")["peak"] == 4 * MiB
    assert stat(a, "active_bytes")["peak"] == 8 * MiB  # 4 MiB allocated + 4 MiB pending
    a.synchronized()
    again = a.malloc(4 * MiB, 0)  # the pending block is free now and fits best
    assert again.addr == block.addr
    assert stat(a, "active_bytes") == {"current": 8 * MiB, "peak": 8 * MiB,
                                       "allocated": 12 * MiB, "freed": 4 * MiB}


# --- out of memory ------------------------------------------------------------------------------

def test_out_of_memory_frees_the_cache_retries_then_raises_pytorchs_message() -> None:
    a = allocator(total_bytes=8 * GiB, context_bytes=GiB)
    a.free(a.malloc(3 * GiB, 1))  # cached for stream 1
    kept = a.malloc(2 * GiB, 0)
    assert a.reserved_bytes == 5 * GiB
    retried = a.malloc(4 * GiB, 0)  # fits only once the cached 3 GiB segment is released
    assert a.stats.nested()["num_alloc_retries"] == 1
    assert a.reserved_bytes == 6 * GiB
    with pytest.raises(OutOfMemoryError) as raised:
        a.malloc(1536 * MiB + 1, 0)
    assert str(raised.value) == (
        "CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 8.00 GiB "
        "of which 1024.00 MiB is free. Including non-PyTorch memory, this process has 7.00 GiB "
        "memory in use. Of the allocated memory 6.00 GiB is allocated by PyTorch, and 0 bytes is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
        "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/"
        "cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)")
    nested = a.stats.nested()
    assert (nested["num_ooms"], nested["num_alloc_retries"]) == (1, 2)
    a.free(kept)
    a.free(retried)
    assert a.malloc(1536 * MiB + 1, 0).size == 1536 * MiB + 512  # the script can go on


def test_a_memory_fraction_limits_reserved_memory_and_shows_in_the_message() -> None:
    a = allocator(total_bytes=8 * GiB, context_bytes=GiB)
    a.set_allowed_fraction(0.25)
    a.malloc(GiB, 0)
    with pytest.raises(OutOfMemoryError, match=r"is free\. .* 2\.00 GiB allowed; Of the"):
        a.malloc(GiB + 1, 0)


# --- statistics ---------------------------------------------------------------------------------

def test_peaks_follow_the_high_water_mark_until_reset() -> None:
    a = allocator()
    first = a.malloc(30 * MiB, 0)
    second = a.malloc(30 * MiB, 0)
    a.free(first)
    a.free(second)
    allocated = stat(a, "allocated_bytes")
    assert allocated == {"current": 0, "peak": 60 * MiB, "allocated": 60 * MiB,
                         "freed": 60 * MiB}
    assert stat(a, "allocated_bytes", "large_pool") == allocated
    assert stat(a, "allocated_bytes", "small_pool")["peak"] == 0
    assert stat(a, "reserved_bytes")["peak"] == 60 * MiB
    a.stats.reset_peak()
    assert stat(a, "allocated_bytes")["peak"] == 0
    assert stat(a, "reserved_bytes")["peak"] == 60 * MiB  # still reserved
    a.malloc(10 * MiB, 0)
    assert stat(a, "allocated_bytes")["peak"] == 10 * MiB
    a.stats.reset_accumulated()
    assert stat(a, "allocated_bytes") == {"current": 10 * MiB, "peak": 10 * MiB,
                                          "allocated": 0, "freed": 0}


def test_random_traffic_keeps_the_counters_consistent() -> None:
    rng = random.Random(4)
    a = allocator()
    live: list[Block] = []
    for _ in range(3000):
        if live and rng.random() < 0.5:
            a.free(live.pop(rng.randrange(len(live))))
        else:
            nbytes = rng.choice([8, 700, 5000, MiB, 3 * MiB, 12 * MiB]) + rng.randrange(512)
            live.append(a.malloc(nbytes, rng.choice([0, 1])))
        if rng.random() < 0.01:
            a.empty_cache()
    assert a.allocated_bytes == sum(b.size for b in live)
    cached_bytes = sum(b.size for b in a.blocks() if b.cached)
    assert a.reserved_bytes == a.allocated_bytes + cached_bytes
    assert stat(a, "allocation")["current"] == len(live)
    for name in ("allocated_bytes", "reserved_bytes", "inactive_split_bytes"):
        pools = stat(a, name, "small_pool")["current"] + stat(a, name, "large_pool")["current"]
        assert stat(a, name)["current"] == pools
    for block in live:
        a.free(block)
    a.empty_cache()
    assert (a.allocated_bytes, a.reserved_bytes, stat(a, "inactive_split")["current"]) == (0, 0, 0)


# --- on the fake GPU ----------------------------------------------------------------------------

SCRIPT = """
GiB, MiB = 2**30, 2**20
torch.cuda.reset_peak_memory_stats()
result["start"] = [torch.cuda.memory_allocated(), torch.cuda.memory_reserved()]
kept = torch.empty(30 * GiB, dtype=torch.uint8, device="cuda")
try:
    torch.empty(60 * GiB, dtype=torch.uint8, device="cuda")
    result["oom"] = None
except torch.OutOfMemoryError as error:
    result["oom"] = [type(error) is torch.cuda.OutOfMemoryError, isinstance(error, RuntimeError),
                     str(error)]
stats = torch.cuda.memory_stats()
result["counters"] = [stats["num_ooms"], stats["num_alloc_retries"],
                      stats["allocated_bytes.all.peak"], stats["reserved_bytes.all.current"]]
del kept
result["freed"] = [torch.cuda.memory_allocated(), torch.cuda.memory_reserved(),
                   torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()]
torch.cuda.empty_cache()
free, total = torch.cuda.mem_get_info()
result["emptied"] = [torch.cuda.memory_reserved(), total - free]

# a storage resized to 0 and back (FSDP2's way of freeing unsharded parameters)
param = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
param.untyped_storage().resize_(0)
after_free = torch.cuda.memory_allocated()
param.untyped_storage().resize_(4 * MiB)
result["resized"] = [after_free, torch.cuda.memory_allocated()]

# the first matrix multiply on a stream brings the cuBLAS workspace, the second does not
x = torch.empty(64, 64, device="cuda")
before = torch.cuda.memory_allocated()
y = x @ x
first = torch.cuda.memory_allocated() - before
z = x @ x
result["matmul"] = [first, torch.cuda.memory_allocated() - before - first]

# DTensor's sharding propagation: global-shape tensors that only give shapes
before, kernels = torch.cuda.memory_allocated(), len(runtime.kernels)
with mode.shapes_only():
    ghost = torch.empty(10 * GiB, dtype=torch.uint8, device="cuda") + 1
result["shapes_only"] = [torch.cuda.memory_allocated() - before, len(runtime.kernels) - kernels]
"""


@pytest.fixture(scope="module")
def script() -> dict[str, Any]:
    return run_snippet(SCRIPT, gpu="h100", device_count=1)["result"]


def test_a_script_catches_the_out_of_memory_error(script: dict[str, Any]) -> None:
    assert script["start"] == [0, 0]
    same_class, is_runtime_error, message = script["oom"]
    assert same_class and is_runtime_error
    total = lookup_gpu("h100").memory_bytes
    assert message.startswith(
        f"CUDA out of memory. Tried to allocate 60.00 GiB. GPU 0 has a total capacity of "
        f"{format_size(total)} of which {format_size(total - CUDA_CONTEXT_BYTES - 30 * GiB)} is "
        f"free. Including non-PyTorch memory, this process has 30.50 GiB memory in use. Of the "
        f"allocated memory 30.00 GiB is allocated by PyTorch, and 0 bytes is reserved")
    assert script["counters"] == [1, 1, 30 * GiB, 30 * GiB]


def test_freed_memory_stays_reserved_until_empty_cache(script: dict[str, Any]) -> None:
    assert script["freed"] == [0, 30 * GiB, 30 * GiB, 30 * GiB]
    assert script["emptied"] == [0, CUDA_CONTEXT_BYTES]


def test_storage_resizes_and_cublas_workspaces_are_allocated(script: dict[str, Any]) -> None:
    assert script["resized"] == [0, 4 * MiB]
    output = 64 * 64 * 4
    assert script["matmul"] == [output + 32 * MiB, output]  # sm90: 32 MiB workspace


def test_tensors_made_only_for_their_shapes_take_no_memory(script: dict[str, Any]) -> None:
    assert script["shapes_only"] == [0, 0]


def test_an_uncaught_out_of_memory_error_ends_the_run_with_the_scripts_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "train.py").write_text(
        "import torch\n"
        "kept = torch.empty(50 * 2**30, dtype=torch.uint8, device='cuda')\n"
        "try:\n"
        "    torch.empty(50 * 2**30, dtype=torch.uint8, device='cuda')\n"
        "except torch.OutOfMemoryError:\n"
        "    print('caught, retrying smaller')\n"
        "smaller = torch.empty(20 * 2**30, dtype=torch.uint8, device='cuda')\n"
        "torch.empty(20 * 2**30, dtype=torch.uint8, device='cuda')\n")
    (tmp_path / "s.yaml").write_text(
        "cluster: {gpu: h100, gpus_per_host: 1}\nworkload: {script: train.py}\n")
    status = main([str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out")])
    out = " ".join(capsys.readouterr().out.split())
    assert status == 1
    assert "rank 0 failed" in out
    assert 'train.py", line 8, in <module>' in out
    assert ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has "
            "a total capacity of 79.18 GiB of which 8.68 GiB is free.") in out
    log = (tmp_path / "out" / "ranks" / "rank0.log").read_text()
    assert log.startswith("caught, retrying smaller\n")
