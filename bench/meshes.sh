#!/usr/bin/env bash
# Two ranks, three ways: the same GPT-2 124M step (sequence 64, global batch
# 32 of micro-batch 4) trained by data 2, pipeline 2 (1f1b, 8 micro-batches)
# and tensor 2, one thread per rank, with one rank on two threads as the
# reference measured in the same run. The machine is shared, so the four
# configurations alternate REPS times (default 3) and the medians of tokens/s
# (steps 2..STEPS) are reported, with the ratio to the reference.
# Usage: bench/meshes.sh [RECIPE] [extra --set ...]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
RECIPE=${1:-$ROOT/configs/gpt2-124m.yaml}
shift || true
EXTRA=("$@")
STEPS=${STEPS:-4}
REPS=${REPS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # name np threads sets... -> "name tokens/s bubble"
  local name=$1 np=$2 threads=$3
  shift 3
  OMP_NUM_THREADS=$threads OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -np "$np" "$BUILD_DIR/launch/trident" train "$RECIPE" --set model.seq_len=64 --set train.micro_batch=4 \
    --set train.global_batch=32 --set train.steps="$STEPS" --set eval.batches=0 --set log.metrics="$tmp/m.jsonl" \
    "$@" ${EXTRA[@]+"${EXTRA[@]}"} >/dev/null
  python3 - "$name" "$tmp/m.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[2]) if '"train"' in l][1:]  # skip the first step
tps = sum(r["tokens_per_s"] for r in recs) / len(recs)
bubble = max(sum(r["bubble"][i] for r in recs) / len(recs) for i in range(len(recs[0]["bubble"])))
print(sys.argv[1], tps, bubble)
PY
}
rows=()
for _ in $(seq "$REPS"); do
  rows+=("$(run one_rank_2_threads 1 2)")
  rows+=("$(run data_2 2 1 --set parallel.data=2)")
  rows+=("$(run pipeline_2 2 1 --set parallel.pipeline=2 --set parallel.schedule=1f1b)")
  rows+=("$(run tensor_2 2 1 --set parallel.tensor=2)")
done
printf '%s\n' "${rows[@]}"
python3 - "${rows[@]}" <<'PY'
import statistics, sys
runs = {}
for r in sys.argv[1:]:
    name, tps, bubble = r.split()
    runs.setdefault(name, []).append((float(tps), float(bubble)))
ref = statistics.median(t for t, _ in runs["one_rank_2_threads"])
print(f"{'configuration':<20} {'tokens/s (median)':>18} {'vs 1 rank x 2 threads':>22} {'max stage bubble':>17}")
for name, vals in runs.items():
    t = statistics.median(v[0] for v in vals)
    b = statistics.median(v[1] for v in vals)
    print(f"{name:<20} {t:18.1f} {t / ref:21.2f}x {100 * b:16.1f}%")
PY
