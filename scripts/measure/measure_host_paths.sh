#!/usr/bin/env bash
# The host paths the host-profile issue checks, on one GPU, with the host's speed watched beside
# every run (scripts/measure/host_watch.py): collectives timed by the host clock on a one-rank
# communicator (five ops, 64 KiB - 16 MiB), a DTensor tensor-parallel MLP on a one-rank mesh
# against the same MLP on plain tensors, the synchronisation and event calls, each twice (two
# processes); the host's mechanisms as phantora-ns3 host-profile measures them
# (intercept.host_time.mechanisms, twice); then the c10d, framework (DTensor rows) and foreach
# sections of measure_host_costs.py.
#   OUT=/tmp/out bash scripts/measure/measure_host_paths.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:?set OUT to the result folder}
mkdir -p "$OUT"
machine=$(python3 -c 'import torch; print(torch.cuda.get_device_name().split()[1].lower())')x1
python3 scripts/measure/host_watch.py --out "$OUT/${machine}_host_watch.jsonl" &
watch=$!
run() {  # name, command...: a run's log with its wall-clock span for the watch
  local name=$1; shift
  { echo "=== START $(date +%s.%N)"; "$@"; echo "=== END $(date +%s.%N)"; } >>"$OUT/${machine}_$name.log" 2>&1
}
for i in 1 2; do
  run collectives python3 -m torch.distributed.run --nproc_per_node 1 \
    scenarios/examples/time_collectives.py --min-kib 64 --max-mib 16 --factor 4 --iters 20 --warmup 3
  run dtensor python3 -m torch.distributed.run --nproc_per_node 1 \
    scenarios/examples/time_dtensor_linear.py
  run sync python3 -m torch.distributed.run --nproc_per_node 1 scenarios/examples/time_sync_calls.py
  run mechanisms python3 -m intercept.host_time.mechanisms --out "$OUT/${machine}_mechanisms$i.json"
done
run host_costs python3 scripts/measure/measure_host_costs.py --json "$OUT/${machine}_host_costs.json" \
  --sections c10d framework foreach
kill $watch
nvidia-smi --query-gpu=name,driver_version --format=csv >"$OUT/${machine}_gpu.txt"
lscpu | head -20 >>"$OUT/${machine}_gpu.txt"
