#!/usr/bin/env bash
# Speed before and after a change, measured in the same run: one full
# training step (bench_train_step: demo, gpt2-124m and moe-tiny, micro-batch
# 4 x 64, at 1 and 2 threads) and the end-to-end tokens/s of `trident train` on the demo
# recipe (40 steps), alternating between the two builds REPS times (default
# 3, which of the two goes first alternating too) because the machine is
# shared; prints the medians and new / old.
# Usage: bench/before_after.sh OLD NEW   (each a build folder, or a folder
# holding the two binaries bench_train_step and trident)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPS=${REPS:-3}
find_bin() {  # DIR NAME
  for p in "$1/$2" "$1/bench/$2" "$1/launch/$2"; do [ -x "$p" ] && { echo "$p"; return; }; done
  echo "before_after: no $2 in $1" >&2
  exit 2
}
[ $# -eq 2 ] || { echo "usage: bench/before_after.sh OLD_BUILD NEW_BUILD" >&2; exit 2; }
unset OMP_NUM_THREADS
declare -A step_bin train_bin
for side in old new; do
  dir=$([ $side = old ] && echo "$1" || echo "$2")
  step_bin[$side]=$(find_bin "$dir" bench_train_step)
  train_bin[$side]=$(find_bin "$dir" trident)
done
out=$(mktemp -d)
for rep in $(seq "$REPS"); do
  order="old new"
  [ $((rep % 2)) -eq 0 ] && order="new old"  # alternate which goes first
  for side in $order; do
    "${step_bin[$side]}" --benchmark_format=json --benchmark_min_time=1.0 2>/dev/null > "$out/step_${side}_$rep.json"
    (cd "$ROOT" && "${step_bin[$side]}" --recipe configs/moe-tiny.yaml --benchmark_format=json \
        --benchmark_min_time=1.0 2>/dev/null) > "$out/step_${side}_moe_$rep.json"
    "${train_bin[$side]}" train "$ROOT/configs/demo.yaml" --set train.steps=40 --set eval.batches=0 \
        --set log.metrics="$out/train_${side}_$rep.jsonl" > /dev/null 2>&1
  done
done
python3 - "$out" "$REPS" <<'PY'
import json, statistics, sys, glob
out, reps = sys.argv[1], int(sys.argv[2])
def step(side):
    runs = {}
    for f in sorted(glob.glob(f"{out}/step_{side}_*.json")):
        for b in json.load(open(f))["benchmarks"]:
            runs.setdefault(b["name"], []).append(b["tokens/s"])
    return {k: statistics.median(v) for k, v in runs.items()}
def train(side):
    v = []
    for f in sorted(glob.glob(f"{out}/train_{side}_*.jsonl")):
        recs = [json.loads(l) for l in open(f) if '"train"' in l]
        v.append(statistics.median(r["tokens_per_s"] for r in recs[1:]))
    return statistics.median(v)
old, new = step("old"), step("new")
print(f"{'benchmark':<42} {'old tok/s':>11} {'new tok/s':>11} {'new/old':>8}")
for k in old:
    print(f"{k:<42} {old[k]:>11.0f} {new[k]:>11.0f} {new[k] / old[k]:>8.3f}")
o, n = train("old"), train("new")
print(f"{'trident train demo (median step, 40 steps)':<42} {o:>11.0f} {n:>11.0f} {n / o:>8.3f}")
PY
rm -rf "$out"
