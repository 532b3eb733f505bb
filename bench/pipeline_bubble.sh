#!/usr/bin/env bash
# Measured pipeline bubble against the simulator: 8 ranks (oversubscribed on
# this machine), pipeline 8 (or 4 x 2 virtual stages for interleaving) on the
# demo model made 8 layers deep, 8 and 16 micro-batches per step. For each
# schedule: the metrics file's measured bubble (mean over stages and over
# steps 2..STEPS) beside `bubble_predicted` (unit costs).
# Usage: bench/pipeline_bubble.sh [extra --set ...]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
STEPS=${STEPS:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-18s %-9s %-15s %16s %18s\n' schedule pipeline micro-batches measured_bubble simulator_bubble
for m in 8 16; do
  for cfg in "gpipe 8 1" "1f1b 8 1" "zero_bubble 8 1" "interleaved_1f1b 4 2"; do
    read -r sched p v <<< "$cfg"
    OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 8 \
      "$BUILD_DIR/launch/trident" train "$ROOT/configs/demo.yaml" --set model.layers=8 --set train.micro_batch=2 \
      --set train.global_batch=$((2 * m * 8 / p)) --set parallel.data=$((8 / p)) --set parallel.pipeline="$p" \
      --set parallel.virtual_stages="$v" --set parallel.schedule="$sched" --set train.steps="$STEPS" \
      --set eval.batches=0 --set log.metrics="$tmp/m.jsonl" "$@" >/dev/null
    python3 - "$sched" "$p x $v" "$m" "$tmp/m.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[4]) if '"train"' in l][1:]
measured = sum(sum(r["bubble"]) / len(r["bubble"]) for r in recs) / len(recs)
print(f"{sys.argv[1]:<18} {sys.argv[2]:<9} {sys.argv[3]:<15} {100 * measured:15.1f}% {100 * recs[0]['bubble_predicted']:17.1f}%")
PY
  done
done
