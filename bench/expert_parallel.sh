#!/usr/bin/env bash
# An MoE training step with the experts split over 8 ranks against the same
# 8 ranks each holding every expert: data 8 x expert 1 and data 8 x expert 8
# of the same recipe, one thread per rank, alternating REPS times (default 3;
# the machine is shared) and reporting medians: tokens/s, the step time,
# and rank 0's peak memory by category (its model states shrink by the
# experts it no longer holds; its activations grow by the rows its experts
# receive).
# Usage: bench/expert_parallel.sh [RECIPE] [extra --set ...]   (default
# configs/moe-tiny.yaml: 8 experts, micro-batch 8, one micro-batch per rank)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
RECIPE=${1:-$ROOT/configs/moe-tiny.yaml}
shift || true
EXTRA=("$@")
STEPS=${STEPS:-6}
REPS=${REPS:-3}
"$ROOT/launch/setup.sh" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # expert -> "tokens/s step_s params grads optimizer activations total" (steps 3.., MiB)
  OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 8 \
    "$BUILD_DIR/launch/trident" train "$RECIPE" --set parallel.data=8 --set parallel.expert="$1" \
    --set train.micro_batch=8 --set train.global_batch=64 --set train.steps="$STEPS" --set eval.batches=0 \
    --set log.metrics="$tmp/m.jsonl" ${EXTRA[@]+"${EXTRA[@]}"} >/dev/null
  python3 - "$tmp/m.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l][2:]  # the first two steps warm up
n = len(recs)
peak = recs[-1]["peak_bytes"]
mib = lambda k: peak.get(k, 0) / 2**20
print(sum(r["tokens_per_s"] for r in recs) / n, sum(r["step_s"] for r in recs) / n,
      mib("params"), mib("grads"), mib("optimizer"), mib("activations"), mib("total"))
PY
}
one=() eight=()
for _ in $(seq "$REPS"); do
  one+=("$(run 1)")
  eight+=("$(run 8)")
done
python3 - "${one[@]}" "${eight[@]}" <<'PY'
import statistics, sys
rows = [list(map(float, r.split())) for r in sys.argv[1:]]
half = len(rows) // 2
med = lambda rs, i: statistics.median(r[i] for r in rs)
print(f"{'expert':>6} {'tokens/s':>10} {'step s':>8} {'params MiB':>11} {'grads MiB':>10} {'optim MiB':>10} "
      f"{'activ MiB':>10} {'total MiB':>10}")
for name, rs in (("1", rows[:half]), ("8", rows[half:])):
    print(f"{name:>6} {med(rs, 0):10.0f} {med(rs, 1):8.4f} {med(rs, 2):11.2f} {med(rs, 3):10.2f} {med(rs, 4):10.2f} "
          f"{med(rs, 5):10.2f} {med(rs, 6):10.2f}")
print(f"expert 8 / expert 1: tokens/s x{med(rows[half:], 0) / med(rows[:half], 0):.2f}, "
      f"model states x{sum(med(rows[half:], i) for i in (2, 3, 4)) / sum(med(rows[:half], i) for i in (2, 3, 4)):.2f}")
PY
