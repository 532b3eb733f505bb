#!/usr/bin/env bash
# HSDP against plain ZeRO 3 across a slow network, on 8 ranks of this
# machine: TRIDENT_SLOW_LINK (parallel/slow_link.hpp) makes every group
# that spans two runs of 4 ranks (two simulated nodes) send at GBPS
# (default 0.1 GB/s, 20 us a message); the groups inside a run are the
# machine's. Plain ZeRO 3 shards over all 8 ranks, so every layer's
# all-gather and reduce-scatter crosses the slow link; HSDP
# (parallel.data_shard 4) keeps them inside each simulated node and sends
# only each rank's shard across, all-reduced once a step. The two runs
# alternate REPS times (default 3; the machine is shared) and the medians
# are reported: step seconds (steps after the first), and the bytes per
# step each rank sent within its shard group and across replicas (the
# metrics' comm_bytes, the busiest rank's).
# Usage: bench/hsdp.sh [extra --set ...]   (default: a LLaMA of 4 layers,
# hidden 256, sequence 64, 2 micro-batches of 2 per rank per step)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
EXTRA=("$@")
STEPS=${STEPS:-6}
REPS=${REPS:-3}
GBPS=${GBPS:-0.1}
"$ROOT/launch/setup.sh" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # data_shard -> "step_s shard_bytes replica_bytes" (medians over steps 2..)
  rm -f "$tmp/m.jsonl"
  OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 TRIDENT_SLOW_LINK="4:$GBPS:20" \
    mpirun --allow-run-as-root --oversubscribe --bind-to none -x TRIDENT_SLOW_LINK -np 8 \
    "$BUILD_DIR/launch/trident" train "$ROOT/configs/llama-tiny.yaml" --set model.layers=4 --set model.hidden=256 \
    --set model.heads=8 --set model.kv_heads=2 --set model.ffn_hidden=704 --set model.seq_len=64 \
    --set train.micro_batch=2 --set train.global_batch=32 --set train.steps="$STEPS" --set train.threads=1 \
    --set parallel.data=8 --set parallel.zero=3 --set parallel.data_shard="$1" --set eval.batches=0 \
    --set log.metrics="$tmp/m.jsonl" ${EXTRA[@]+"${EXTRA[@]}"} >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
  python3 - "$tmp/m.jsonl" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l][1:]  # steps after the first
med = lambda f: statistics.median(f(r) for r in recs)
b = lambda k: (lambda r: r.get("comm_bytes", {}).get(k, 0))
print(med(lambda r: r["step_s"]), med(b("data_shard")), med(b("data_replicate")))
PY
}
plain=() hsdp=()
for _ in $(seq "$REPS"); do
  plain+=("$(run 0)")
  hsdp+=("$(run 4)")
done
python3 - "$GBPS" "$REPS" "${plain[@]}" "${hsdp[@]}" <<'PY'
import statistics, sys
gbps, reps = sys.argv[1], int(sys.argv[2])
rows = [list(map(float, r.split())) for r in sys.argv[3:]]
plain, hsdp = rows[:reps], rows[reps:]
med = lambda rs, i: statistics.median(r[i] for r in rs)
print(f"8 ranks as 2 simulated nodes of 4, {gbps} GB/s between them; medians of {reps} alternating runs")
print(f"{'mesh':<28} {'step s':>8} {'shard group B/step':>19} {'across replicas B/step':>23}")
print(f"{'ZeRO 3 over 8 (plain)':<28} {med(plain, 0):8.3f} {med(plain, 1):19.0f} {med(plain, 2):23.0f}")
print(f"{'ZeRO 3 in shards of 4 (HSDP)':<28} {med(hsdp, 0):8.3f} {med(hsdp, 1):19.0f} {med(hsdp, 2):23.0f}")
print(f"HSDP step time / plain: {med(hsdp, 0) / med(plain, 0):.3f}")
PY
