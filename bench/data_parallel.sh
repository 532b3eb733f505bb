#!/usr/bin/env bash
# Data-parallel scaling on this machine: the same recipe trained by 1 rank and
# by 2 ranks (one thread each, so the work per core is the same), for ZeRO
# stages 0-3 (ZERO_STAGES="0 1 2 3"). The machine is shared, so the 1-rank
# and 2-rank runs alternate REPS times (default 3) and the medians are
# reported: tokens/s, the time per step blocked on communication, and the
# scaling efficiency tokens/s(2 ranks) / (2 x tokens/s(1 rank)).
# Usage: bench/data_parallel.sh [RECIPE] [extra --set ...]   (default gpt2-124m
# at sequence 64, micro-batch 4, 4 micro-batches per rank per step)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
RECIPE=${1:-$ROOT/configs/gpt2-124m.yaml}
shift || true
EXTRA=("$@")
STEPS=${STEPS:-4}
REPS=${REPS:-3}
"$ROOT/launch/setup.sh" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # ranks zero -> "tokens/s comm_wait_s step_s" averaged over steps 2..
  local np=$1 zero=$2 gb=$((16 * $1))
  OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    "$BUILD_DIR/launch/trident" train "$RECIPE" --set model.seq_len=64 --set train.micro_batch=4 \
    --set train.global_batch=$gb --set train.steps="$STEPS" --set parallel.data="$np" --set parallel.zero="$zero" \
    --set eval.batches=0 --set log.metrics="$tmp/m.jsonl" ${EXTRA[@]+"${EXTRA[@]}"} >/dev/null
  python3 - "$tmp/m.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l][1:]  # skip the first step
n = len(recs)
print(sum(r["tokens_per_s"] for r in recs) / n, sum(r["comm_wait_s"] for r in recs) / n,
      sum(r["step_s"] for r in recs) / n)
PY
}
printf '%-6s %-5s %12s %14s %10s %11s\n' ranks zero tokens/s comm_wait_s step_s efficiency
for zero in ${ZERO_STAGES:-0 1 2 3}; do
  one=() two=()
  for _ in $(seq "$REPS"); do
    one+=("$(run 1 "$zero")")
    two+=("$(run 2 "$zero")")
  done
  python3 - "$zero" "${one[@]}" "${two[@]}" <<'PY'
import statistics, sys
zero, rows = sys.argv[1], [list(map(float, r.split())) for r in sys.argv[2:]]
half = len(rows) // 2
med = lambda rs, i: statistics.median(r[i] for r in rs)
one, two = rows[:half], rows[half:]
print(f"{1:<6} {zero:<5} {med(one, 0):12.1f} {med(one, 1):14.3f} {med(one, 2):10.3f} {'-':>11}")
print(f"{2:<6} {zero:<5} {med(two, 0):12.1f} {med(two, 1):14.3f} {med(two, 2):10.3f} {100 * med(two, 0) / (2 * med(one, 0)):10.1f}%")
PY
done
