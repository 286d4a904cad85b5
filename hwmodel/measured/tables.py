"""The measured tables in ``hwmodel/measured/data/``, each with its source; the loaders
(``hwmodel.compute.table`` through ``hwmodel.compute.model``, ``intercept.host_time.host_cost``,
``intercept.host_time.host_speed``) read them from these paths."""

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from hwmodel.measured.source import NO_NCCL, UNKNOWN, Source, Table

DATA_DIR = Path(__file__).resolve().with_name("data")

_KERNELS = dict(nccl=NO_NCCL, torch="2.11.0+cu130 (cuBLAS 13.1, cuDNN 9.19, Triton 3.6.0)",
                how="scripts/measure/measure_kernels.py --export-clean: measured rows only, the "
                    "first of any duplicate, host-bound rows left out; data/README.md says how a "
                    "row was timed")

KERNEL_TABLES: Mapping[str, Table] = MappingProxyType({
    "h100": Table(DATA_DIR / "kernels_h100.csv", Source(
        file="scripts/measure/data/kernels/h100/results.csv, "
             "scripts/measure/data/kernels/h100-families/",
        date="2026-11-22 (model-family rows 2026-11-25)",
        gpu="NVIDIA H100 80GB HBM3, SXM (a one-GPU cloud VM)", **_KERNELS)),
    "h200": Table(DATA_DIR / "kernels_h200.csv", Source(
        file="scripts/measure/data/kernels/h200/results.csv, "
             "scripts/measure/data/kernels/h200-families/",
        date="2026-11-22 (model-family rows 2026-11-25)",
        gpu="NVIDIA H200, SXM (a one-GPU cloud VM)", **_KERNELS)),
})
"""Device time of one call of an aten op per op, dtype and shape, by catalogue GPU key."""

HOST_COSTS = Table(DATA_DIR / "host_costs.json", Source(
    file="scripts/measure/data/host_costs/h100x1.json",
    date="2026-11-25",
    gpu="NVIDIA H100 80GB HBM3 (a one-GPU cloud VM; 16 vCPUs of an Intel Xeon)",
    nccl=UNKNOWN, torch="2.11.0+cu130",
    how="scripts/measure/measure_host_costs.py --import-raw: per op family the median of its "
        "cases' medians of 7 rounds; --import-ops: per-op rows from h100x1-ops*.json (the file's "
        "provenance block)"))
"""Host CPU time per intercepted op on the reference host: kernel launches by op family,
collective calls (``intercept.host_time.host_cost``)."""

GEMM_HEURISTIC = Table(DATA_DIR / "gemm_heuristic.json", Source(
    file="scripts/measure/data/gemm_heuristic/ (the fit: the four h100x1-training-b4 logs; checks: "
         "the four h100x1-training-b8 logs and the h100x1-replay logs)",
    date="2026-11-26",
    gpu="NVIDIA H100 80GB HBM3 (a one-GPU cloud VM; 16 vCPUs of an Intel Xeon)",
    nccl="n/a (one GPU)", torch="2.11.0+cu130",
    how="scripts/measure/measure_gemm_heuristic.py --fit on four profiled moe-600m training runs "
        "at batch 4, pooled: mean extra of a new shape, and of one with a kernel new to the "
        "process (by the H100 kernel map); for unmapped products least squares by distance and "
        "age; checked on four runs at batch 8 and on replays of recorded routing traces"))
"""Host cost of a cuBLAS product of a shape new to the process, and of a kernel new to it
(``intercept.host_time.gemm_heuristic``)."""

CUBLAS_KERNEL_MAPS: Mapping[str, Table] = MappingProxyType({
    "h100": Table(DATA_DIR / "cublas_kernels_h100.json", Source(
        file="hwmodel/measured/data/cublas_kernels_h100.json (as measured; its provenance "
             "block)",
        date="2026-11-27",
        gpu="NVIDIA H100 80GB HBM3 (a one-GPU cloud VM)",
        nccl=NO_NCCL, torch="2.11.0+cu130 (cuBLAS 13.1)",
        how="scripts/measure/measure_gemm_heuristic.py --kernel-map: every routed-token count "
            "1..16384 of the moe-600m experts' six products and 1..1024 of the moe-tiny ones, in "
            "order, under the PyTorch profiler; the kernels each aten::mm launched")),
})
"""The kernels cuBLAS launches per routed-token count of MoE expert products, by catalogue GPU
key (``intercept.host_time.gemm_heuristic``)."""

PYTHON_WORK = Table(DATA_DIR / "python_work.json", Source(
    file="scripts/measure/data/python_work/python_work_h100_1.json, "
         "scripts/measure/data/python_work/python_work_h100_2.json, "
         "scripts/measure/data/python_work/python_work_h100_3.json",
    date="2026-11-26",
    gpu="NVIDIA H100 80GB HBM3 (a one-GPU cloud VM; 16 vCPUs of an Intel Xeon)",
    nccl="n/a (plain Python)", torch="2.11.0+cu130 (counted here with 2.13.0)",
    how="scripts/measure/measure_python_work.py --fit: per workload the median over 3 runs of the "
        "fastest of 25 rounds; ns per line and per call fitted on module calls, hooks and an "
        "optimizer loop, counted with this repository's Python and torch"))
"""Reference-host ns per line and per call of Python (``intercept.host_time.python_work``)."""

HOST_FIT = Table(DATA_DIR / "host_fit.json", Source(
    file="scripts/measure/data/host_fit/h200x2-6layer.txt",
    date="2026-11-26",
    gpu="2x NVIDIA H200 (a two-GPU cloud VM; 32 vCPUs of an Intel Xeon)",
    nccl=UNKNOWN, torch="2.11.0+cu130",
    how="scripts/measure/fit_host_time.py: least squares of relative step error over the real "
        "steps of gpt_single, gpt_ddp, gpt_fsdp2 and gpt_tp at a 6-layer configuration outside the "
        "accuracy harness"))
"""Host-time constants fitted on real steps: Python's cold-code factor, DTensor's dispatch per
op (``intercept.host_time.host_fit``)."""

COMPILED_CALL = Table(DATA_DIR / "compiled_call.json", Source(
    file="scripts/measure/data/host_costs/ (h200x1-compiled1, 2, 7, 8 and h200x2-compiled3 to 6: "
         "the compiled rows of measure_host_costs.py on four hosts, two processes each)",
    date="2026-11-28",
    gpu="NVIDIA H200 (one- and two-GPU cloud VMs)",
    nccl="n/a (one GPU)", torch="2.11.0+cu130 (Triton 3.6.0)",
    how="scripts/measure/fit_compiled_host.py: each record put on the table's reference host by "
        "its aten cases; a generated kernel's launch from the inference chains' slope (all 8 "
        "records), a backward node and run from the rows of K graphs in one backward (records 7 "
        "and 8); each the shipped value plus the median of real less simulated"))
"""Host costs of compiled graphs beyond the eager tables and counted Python: a generated kernel's
launch, a backward node, a backward run (``intercept.host_time.compiled_call``)."""

CUDNN_RNN_HOST = Table(DATA_DIR / "cudnn_rnn_host.json", Source(
    file="scripts/measure/data/rnn_host/ (measure_rnn_host.py: LSTM and GRU calls, fp16 and fp32, "
         "sequences 8-128, 1-2 layers and directions, with the GPU held busy)",
    date="2026-12-08",
    gpu="NVIDIA H100 80GB HBM3 (two one-GPU cloud VMs; 16 vCPUs of an Intel Xeon)",
    nccl="n/a (one GPU)", torch="2.11.0+cu130 (cuDNN 9.19)",
    how="scripts/measure/fit_rnn_host.py: each row on the reference host by the torch_ops probe "
        "beside it; per pass a relative least-squares fit of a call cost plus a cost per "
        "layer-step"))
"""Host time of one cuDNN recurrent call, which enqueues its time steps one by one
(``intercept.host_time.cudnn_rnn_host``)."""

COLLECTIVE_HOST = Table(DATA_DIR / "collective_host.json", Source(
    file="scripts/measure/data/collective_host/h200x2.j (the calls of 9 training runs on a "
         "2xH200 cloud VM; data sets h200x2.k and h200x2.l check it)",
    date="2026-11-28",
    gpu="2x NVIDIA H200 (a two-GPU cloud VM; 32 vCPUs of an Intel Xeon)",
    nccl="2.28.9", torch="2.11.0+cu130",
    how="scripts/measure/time_host_calls.py fit: every collective call on a group of two ranks "
        "(barriers aside) of the runs' steps 3.., timed unprofiled, with the time since the "
        "rank's previous collective; robust least squares; that host taken as the H200 "
        "reference host, put on the table's by the two references' torch_ops component"))
"""Host cost of a collective call on a group of two or more ranks, by the time since the rank's
previous collective call (``intercept.host_time.collective_host``)."""

HOST_SPREAD = Table(DATA_DIR / "host_spread.json", Source(
    file="scripts/measure/data/collective_host/h200x4.g, h200x4.h (training runs on two "
         "4xH200 cloud VMs, each rank's waits on the GPU timed)",
    date="2026-11-28",
    gpu="4x NVIDIA H200 (four-GPU cloud VMs; 64 vCPUs of an Intel Xeon)",
    nccl="2.28.9", torch="2.11.0+cu130",
    how="scripts/measure/time_host_calls.py spread: the ranks' coefficient of variation of the "
        "host work between consecutive collective calls (waits on the GPU left out; ranks 1-3, "
        "rank 0 also logs), over windows of 1-64 calls, least squares by window length"))
"""How far the hosts of a collective's ranks spread, and the expected wait for the slowest
(``intercept.host_time.host_spread``)."""

HOST_SPEED = Table(DATA_DIR / "host_speed.json", Source(
    file="scripts/measure/data/host/h100-x1-b.json, scripts/measure/data/host/h200-x2.json",
    date="2026-11-22",
    gpu="hosts of a one-H100 cloud VM (h100-host) and a two-H200 cloud VM (h200-host)",
    nccl="n/a (host CPU benchmark)", torch="2.11.0+cu130",
    how="scripts/measure/measure_host_speed.py --import-record: the fastest of 5 rounds per "
        "component, median over the measurements (scripts/measure/data/host/README.md)"))
"""Reference hosts' CPU speeds, which a rank's own CPU time is scaled by
(``intercept.host_time.host_speed``)."""
