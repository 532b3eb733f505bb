#!/usr/bin/env bash
# Trident vs PyTorch, same model, same machine, same run: a full training step
# (micro-batch 4 x sequence 64) of configs/demo.yaml and configs/gpt2-124m.yaml
# at 1 and 2 threads, in fp32 and in bf16 (Trident's train.precision: bf16
# against PyTorch's bf16 autocast; PRECISIONS="fp32 bf16", RECIPES and
# THREADS select). Installs the current PyTorch (CPU use) into a virtual
# environment when missing (TRIDENT_BENCH_VENV, default build/bench-venv).
# Prints the median tokens/s of both over REPS alternating runs (default 3)
# and the ratio.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
VENV=${TRIDENT_BENCH_VENV:-$BUILD_DIR/bench-venv}
"$ROOT/launch/setup.sh" >/dev/null
if ! "$VENV/bin/python" -c "import torch, yaml" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch pyyaml numpy
fi
unset OMP_NUM_THREADS
REPS=${REPS:-3}
# The machine is shared: the two frameworks run alternately REPS times and the
# medians are compared.
SUMMARY=$(mktemp)
trap 'rm -f "$SUMMARY"' EXIT
printf '%-12s %-9s %-7s %14s %14s %8s %10s %10s %10s\n' recipe precision threads trident_tok/s pytorch_tok/s ratio mfu_sgemm mfu_fma bf16/sgemm
for precision in ${PRECISIONS:-fp32 bf16}; do
for recipe in ${RECIPES:-demo gpt2-124m}; do
  for threads in ${THREADS:-1 2}; do
    runs=()
    for _ in $(seq "$REPS"); do
      ref=$("$VENV/bin/python" "$ROOT/bench/reference/gpt_pytorch.py" --recipe "$ROOT/configs/$recipe.yaml" \
            --threads "$threads" --steps 10 --precision "$precision" | tail -1)
      ours=$("$BUILD_DIR/bench/bench_train_step" --recipe "$ROOT/configs/$recipe.yaml" --precision "$precision" \
             --benchmark_filter="threads:$threads/" --benchmark_format=json 2>/dev/null | grep -v '^bf16 GEMM' | tr -d '\n')
      runs+=("$ref" "$ours")
    done
    python3 - "$SUMMARY" "$recipe" "$threads" "$precision" "${runs[@]}" <<'PY'
import json, statistics, sys
summary, recipe, threads, precision, rest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
refs = [json.loads(r)["tokens_per_s"] for r in rest[0::2]]
ours = [json.loads(o)["benchmarks"][0] for o in rest[1::2]]
t = statistics.median(b["tokens/s"] for b in ours)
p = statistics.median(refs)
mfu_gemm = statistics.median(b["model_GFLOP/s"] / b["sgemm_peak_GFLOP/s"] for b in ours)
mfu_fma = statistics.median(b["model_GFLOP/s"] / b["fma_peak_GFLOP/s"] for b in ours)
# the bf16 GEMM's peak over sgemm's, measured in the same process: what bf16 can gain at most
peaks = [b["bf16_gemm_peak_GFLOP/s"] / b["sgemm_peak_GFLOP/s"] for b in ours if "bf16_gemm_peak_GFLOP/s" in b]
ceiling = f"{statistics.median(peaks):10.2f}" if peaks else f"{'-':>10}"
print(f"{recipe:<12} {precision:<9} {threads:<7} {t:14.0f} {p:14.0f} {t / p:8.2f} {mfu_gemm:10.1%} {mfu_fma:10.1%} {ceiling}",
      flush=True)
with open(summary, "a") as f:
    f.write(f"{recipe} {threads} {precision} {t}\n")
PY
  done
done
done
# Trident bf16 over Trident fp32 (rows of this run), where both were measured
python3 - "$SUMMARY" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    recipe, threads, precision, t = line.split()
    rows[(recipe, threads, precision)] = float(t)
for (recipe, threads, precision), t in rows.items():
    if precision == "bf16" and (recipe, threads, "fp32") in rows:
        print(f"trident bf16 / fp32: {recipe} {threads} threads {t / rows[(recipe, threads, 'fp32')]:.2f}x")
PY
