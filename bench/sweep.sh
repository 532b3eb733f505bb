#!/usr/bin/env bash
# The planner against measurement on this machine: for the demo and GPT-2
# 124M (sequence 128, global batch 8, micro-batch 2) at 2 and 4 ranks,
# calibrate, sweep every mesh, chart it. Results in runs/sweep/<recipe>_<N>/.
# Installs matplotlib into a virtual environment when missing
# (TRIDENT_BENCH_VENV, default build/bench-venv).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
VENV=${TRIDENT_BENCH_VENV:-$BUILD_DIR/bench-venv}
"$ROOT/launch/setup.sh" >/dev/null
if ! "$VENV/bin/python" -c "import matplotlib" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q matplotlib
fi
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
M="mpirun --allow-run-as-root --oversubscribe --bind-to none"
T=$BUILD_DIR/launch/trident
OUT=${OUT:-$ROOT/runs/sweep}
S124=(--set model.seq_len=128 --set train.global_batch=8 --set train.micro_batch=2)
for n in 2 4; do
  $M -np $n "$T" plan "$ROOT/configs/demo.yaml" --calibrate --cluster "$ROOT/configs/clusters/cpu-local.yaml" \
    --out "$OUT/demo_$n/cluster.yaml"
  $M -np $n "$T" sweep "$ROOT/configs/demo.yaml" --cluster "$OUT/demo_$n/cluster.yaml" --out "$OUT/demo_$n" \
    --steps 10 --repeats 5 | grep -v '^\[rank'
  $M -np $n "$T" plan "$ROOT/configs/gpt2-124m.yaml" "${S124[@]}" --calibrate \
    --cluster "$ROOT/configs/clusters/cpu-local.yaml" --out "$OUT/124m_$n/cluster.yaml"
  $M -np $n "$T" sweep "$ROOT/configs/gpt2-124m.yaml" "${S124[@]}" --cluster "$OUT/124m_$n/cluster.yaml" \
    --out "$OUT/124m_$n" --warmup 1 --steps 3 --repeats 2 | grep -v '^\[rank'
  "$VENV/bin/python" "$ROOT/bench/plot_sweep.py" "$OUT/demo_$n" "$OUT/124m_$n"
done
