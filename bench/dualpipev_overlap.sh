#!/usr/bin/env bash
# DualPipeV's paired passes against the same schedule without them,
# measured in the same run: 8 ranks (oversubscribed on this machine),
# configs/deepseek-v3-tiny.yaml made 8 layers deep, pipeline 4 x data 2 with
# expert parallelism 2, micro-batch 2, 8 micro-batches per step, 8 chunks of
# 1 layer in a V. parallel.overlap_paired true runs each paired forward and
# backward as paired passes (their expert dispatches and combines under the
# other pass's compute), false one after the other. The runs alternate,
# ROUNDS times; each row (rank 0's metrics, means over steps 3..STEPS): the
# step time, the expert exchanges' time before their wait began (other work
# ran) and waited, and the paired passes and switches per step.
# Usage: bench/dualpipev_overlap.sh [extra --set ...]
source "$(dirname "${BASH_SOURCE[0]}")/dualpipev_common.sh"
printf '%-6s %-8s %8s %14s %10s %7s %9s\n' round overlap step_s overlapped_s waited_s pairs switches
for round in $(seq 1 "$ROUNDS"); do
  for overlap in true false; do
    OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 8 \
      "$BUILD_DIR/launch/trident" train "$ROOT/configs/deepseek-v3-tiny.yaml" --set model.layers=8 \
      --set parallel.pipeline=4 --set parallel.data=2 --set parallel.expert=2 --set parallel.virtual_stages=2 \
      --set parallel.schedule=dualpipev --set parallel.overlap_paired=$overlap --set train.micro_batch=2 \
      --set train.global_batch=32 --set train.steps="$STEPS" --set eval.batches=0 --set log.every=1 \
      --set log.metrics="$tmp/m.jsonl" "$@" >/dev/null
    python3 - "$round" "$overlap" "$tmp/m.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[3]) if '"train"' in l][2:]
mean = lambda k: sum(r.get(k, 0) for r in recs) / len(recs)
print(f"{sys.argv[1]:<6} {sys.argv[2]:<8} {mean('step_s'):8.3f} {mean('expert_overlapped_s'):14.4f} "
      f"{mean('expert_waited_s'):10.4f} {mean('paired_passes'):7.0f} {mean('pass_switches'):9.0f}")
PY
  done
done
