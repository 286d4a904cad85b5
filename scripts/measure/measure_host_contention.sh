#!/usr/bin/env bash
# Does a rank's host run slower when other ranks share its host? One-process scripts run alone,
# then two and four copies side by side (one GPU each, no communication between them), each
# under time_host_calls.py (its host's waits on the GPU timed, so host-busy time per step is
# step minus waits). Then expert parallel on 2 and 4 ranks for comparison.
#   bash scripts/measure/measure_host_contention.sh OUT_DIR     (on a lent 4-GPU machine)
set -u
OUT=$1
PY=${PY:-python3}
EX=scenarios/examples
TIMER=scripts/measure/time_host_calls.py
declare -A ARGS=(
  [tiny]="$EX/gpt_single.py --steps 10 --grad-accum 2 --num-workers 2"
  [moe]="$EX/moe_ep.py --model moe-600m --seq-len 2048 --steps 10 --num-workers 0 --batch-size 4 --routing balanced"
)
mkdir -p "$OUT/calls" "$OUT/logs"
side_by_side() {  # name copies
  local name=$1 copies=$2 g
  for ((g = 0; g < copies; g++)); do
    CUDA_VISIBLE_DEVICES=$g $PY $TIMER --out "$OUT/calls/$name-x$copies-g$g" -- ${ARGS[$name]} \
      > "$OUT/logs/$name-x$copies-g$g.log" 2>&1 &
  done
  wait
}
for name in tiny moe; do
  for copies in 1 4 2; do side_by_side $name $copies; done
done
for nproc in 2 4; do
  $PY -m torch.distributed.run --standalone --nproc_per_node $nproc $TIMER \
    --out "$OUT/calls/ep-x$nproc" -- ${ARGS[moe]} > "$OUT/logs/ep-x$nproc.log" 2>&1
done
