#!/usr/bin/env bash
# Trident vs PyTorch, same model, same machine, same run: a full training step
# (micro-batch 4 x sequence 64) of configs/demo.yaml and configs/gpt2-124m.yaml
# (and, with RECIPES=moe-124m PRECISIONS=fp32, the 120M-active MoE model
# against bench/reference/moe_pytorch.py) at 1 and 2 threads, in fp32 and in bf16 (Trident's train.precision: bf16
# against PyTorch's bf16 autocast; PRECISIONS="fp32 bf16", RECIPES and
# THREADS select). Installs the current PyTorch (CPU use) into a virtual
# environment when missing (TRIDENT_BENCH_VENV, default build/bench-venv).
# Prints the median tokens/s of both over REPS alternating runs (default 3),
# the ratio, and Trident's bf16 / fp32 ratio.
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
PRECISIONS=${PRECISIONS:-fp32 bf16}
# The machine is shared: within each repetition both frameworks run in every
# precision one after the other, REPS times, and the medians are compared;
# Trident's bf16 / fp32 ratio is the median of the per-repetition ratios
# (runs next to each other in time).
RUNS=$(mktemp -d)
trap 'rm -rf "$RUNS"' EXIT
printf '%-12s %-9s %-7s %14s %14s %8s %10s %10s %10s\n' recipe precision threads trident_tok/s pytorch_tok/s ratio mfu_sgemm mfu_fma bf16/sgemm
for recipe in ${RECIPES:-demo gpt2-124m}; do
  for threads in ${THREADS:-1 2}; do
    for _ in $(seq "$REPS"); do
      for precision in $PRECISIONS; do
        reference=gpt_pytorch.py
        case $recipe in moe*) reference=moe_pytorch.py ;; esac  # the MoE model's own PyTorch twin
        "$VENV/bin/python" "$ROOT/bench/reference/$reference" --recipe "$ROOT/configs/$recipe.yaml" \
            --threads "$threads" --steps 10 --precision "$precision" | tail -1 >> "$RUNS/ref_$precision"
        "$BUILD_DIR/bench/bench_train_step" --recipe "$ROOT/configs/$recipe.yaml" --precision "$precision" \
            --benchmark_filter="threads:$threads/" --benchmark_format=json 2>/dev/null | grep -v '^bf16 GEMM' \
            | tr -d '\n' >> "$RUNS/ours_$precision"
        echo >> "$RUNS/ours_$precision"
      done
    done
    python3 - "$RUNS" "$recipe" "$threads" $PRECISIONS <<'PY'
import json, statistics, sys
runs, recipe, threads, precisions = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
tokens = {}
for precision in precisions:
    refs = [json.loads(r)["tokens_per_s"] for r in open(f"{runs}/ref_{precision}") if r.strip()]
    ours = [json.loads(o)["benchmarks"][0] for o in open(f"{runs}/ours_{precision}") if o.strip()]
    tokens[precision] = [b["tokens/s"] for b in ours]
    t = statistics.median(tokens[precision])
    p = statistics.median(refs)
    mfu_gemm = statistics.median(b["model_GFLOP/s"] / b["sgemm_peak_GFLOP/s"] for b in ours)
    mfu_fma = statistics.median(b["model_GFLOP/s"] / b["fma_peak_GFLOP/s"] for b in ours)
    # the bf16 GEMM's peak over sgemm's, measured in the same process: what bf16 can gain at most
    peaks = [b["bf16_gemm_peak_GFLOP/s"] / b["sgemm_peak_GFLOP/s"] for b in ours if "bf16_gemm_peak_GFLOP/s" in b]
    ceiling = f"{statistics.median(peaks):10.2f}" if peaks else f"{'-':>10}"
    print(f"{recipe:<12} {precision:<9} {threads:<7} {t:14.0f} {p:14.0f} {t / p:8.2f} {mfu_gemm:10.1%} "
          f"{mfu_fma:10.1%} {ceiling}", flush=True)
if "fp32" in tokens and "bf16" in tokens:
    pairs = [b / f for b, f in zip(tokens["bf16"], tokens["fp32"])]
    print(f"trident bf16 / fp32: {recipe} {threads} threads {statistics.median(pairs):.2f}x "
          f"(per repetition: {', '.join(f'{r:.2f}' for r in pairs)})", flush=True)
PY
    rm -f "$RUNS"/*
  done
done
