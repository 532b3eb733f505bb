#!/usr/bin/env bash
# DualPipeV against 1F1B, measured in the same run: 8 ranks (oversubscribed
# on this machine), configs/deepseek-v3-tiny.yaml made 8 layers deep (MLA,
# routed experts, its multi-token prediction module), pipeline
# 4 x data 2 with expert parallelism 2, micro-batch 2, 8 micro-batches per
# step. 1F1B runs 4 stages of 2 layers; dualpipev 8 chunks of 1 layer, two
# per rank in a V. The runs alternate, ROUNDS times; each row: the metrics
# file's measured bubble (time blocked on pipeline transfers over the
# schedule's time, mean over stages and over steps 3..STEPS), the
# simulator's bubble (unit costs), and the mean step time.
# Usage: bench/dualpipev_bubble.sh [extra --set ...]
source "$(dirname "${BASH_SOURCE[0]}")/dualpipev_common.sh"
printf '%-6s %-10s %16s %18s %10s\n' round schedule measured_bubble simulator_bubble step_s
for round in $(seq 1 "$ROUNDS"); do
  for sched in 1f1b dualpipev; do
    v=1
    [ "$sched" = dualpipev ] && v=2
    OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 8 \
      "$BUILD_DIR/launch/trident" train "$ROOT/configs/deepseek-v3-tiny.yaml" --set model.layers=8 \
      --set parallel.pipeline=4 --set parallel.data=2 --set parallel.expert=2 \
      --set parallel.virtual_stages=$v --set parallel.schedule=$sched --set train.micro_batch=2 \
      --set train.global_batch=32 --set train.steps="$STEPS" --set eval.batches=0 --set log.every=1 \
      --set log.metrics="$tmp/m.jsonl" "$@" >/dev/null
    python3 - "$round" "$sched" "$tmp/m.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[3]) if '"train"' in l][2:]
measured = sum(sum(r["bubble"]) / len(r["bubble"]) for r in recs) / len(recs)
step = sum(r["step_s"] for r in recs) / len(recs)
print(f"{sys.argv[1]:<6} {sys.argv[2]:<10} {100 * measured:15.1f}% {100 * recs[0]['bubble_predicted']:17.1f}% {step:10.3f}")
PY
  done
done
