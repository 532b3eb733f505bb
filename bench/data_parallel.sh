#!/usr/bin/env bash
# Data-parallel scaling on this machine: the same recipe trained by 1 rank and
# by 2 ranks (one thread each, so the work per core is the same), for ZeRO
# stages 0-3 (ZERO_STAGES="0 1 2 3"). Prints tokens/s, the time per step
# blocked on communication, and the scaling efficiency
# tokens/s(2 ranks) / (2 x tokens/s(1 rank)).
# Usage: bench/data_parallel.sh [RECIPE] [extra --set ...]   (default gpt2-124m
# at sequence 64, micro-batch 4, 4 micro-batches per rank per step)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
RECIPE=${1:-$ROOT/configs/gpt2-124m.yaml}
shift || true
EXTRA=("$@")
STEPS=${STEPS:-5}
"$ROOT/launch/setup.sh" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # ranks zero
  local np=$1 zero=$2 gb=$((16 * $1))
  OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    "$BUILD_DIR/launch/trident" train "$RECIPE" --set model.seq_len=64 --set train.micro_batch=4 \
    --set train.global_batch=$gb --set train.steps="$STEPS" --set parallel.data="$np" --set parallel.zero="$zero" \
    --set eval.batches=0 --set log.metrics="$tmp/m_${np}_${zero}.jsonl" ${EXTRA[@]+"${EXTRA[@]}"} >/dev/null
  python3 - "$tmp/m_${np}_${zero}.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l][1:]  # skip the first step
tps = sum(r["tokens_per_s"] for r in recs) / len(recs)
wait = sum(r["comm_wait_s"] for r in recs) / len(recs)
step = sum(r["step_s"] for r in recs) / len(recs)
print(f"{tps:.1f} {wait:.3f} {step:.3f}")
PY
}
printf '%-6s %-5s %12s %14s %10s %11s\n' ranks zero tokens/s comm_wait_s step_s efficiency
for zero in ${ZERO_STAGES:-0 1 2 3}; do
  read -r t1 w1 s1 < <(run 1 "$zero")
  read -r t2 w2 s2 < <(run 2 "$zero")
  printf '%-6s %-5s %12s %14s %10s %11s\n' 1 "$zero" "$t1" "$w1" "$s1" "-"
  printf '%-6s %-5s %12s %14s %10s %10.1f%%\n' 2 "$zero" "$t2" "$w2" "$s2" "$(python3 -c "print(100*$t2/(2*$t1))")"
done
