#!/usr/bin/env bash
# Trident vs PyTorch, same model, same machine, same run: a full training step
# (micro-batch 4 x sequence 64) of configs/demo.yaml and configs/gpt2-124m.yaml
# at 1 and 2 threads. Installs the current PyTorch (CPU use) into a virtual
# environment when missing (TRIDENT_BENCH_VENV, default build/bench-venv).
# Prints tokens/s of both and the ratio.
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
printf '%-12s %-7s %14s %14s %8s %10s %10s\n' recipe threads trident_tok/s pytorch_tok/s ratio mfu_sgemm mfu_fma
for recipe in demo gpt2-124m; do
  for threads in 1 2; do
    ref=$("$VENV/bin/python" "$ROOT/bench/reference/gpt_pytorch.py" --recipe "$ROOT/configs/$recipe.yaml" \
          --threads "$threads" --steps 10 | tail -1)
    ours=$("$BUILD_DIR/bench/bench_train_step" --recipe "$ROOT/configs/$recipe.yaml" \
           --benchmark_filter="threads:$threads/" --benchmark_format=json 2>/dev/null)
    python3 - "$recipe" "$threads" "$ref" "$ours" <<'PY'
import json, sys
recipe, threads, ref, ours = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
b = ours["benchmarks"][0]
t = b["tokens/s"]
p = ref["tokens_per_s"]
mfu_gemm = b["model_GFLOP/s"] / b["sgemm_peak_GFLOP/s"]
mfu_fma = b["model_GFLOP/s"] / b["fma_peak_GFLOP/s"]
print(f"{recipe:<12} {threads:<7} {t:14.0f} {p:14.0f} {t / p:8.2f} {mfu_gemm:10.1%} {mfu_fma:10.1%}")
PY
  done
done
