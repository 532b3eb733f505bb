#!/usr/bin/env bash
# Trident against a real Slurm cluster (ctest: slurm). Needs a running Slurm
# with at least 2 nodes of 4 CPUs (sinfo answers), or TRIDENT_SLURM_START: a
# command that starts one (it is called with --nodes 2); exit 77 (ctest:
# skipped, the reason printed) otherwise.
#   1. `trident submit` of the demo on 1 node x 4 tasks runs to completion:
#      state COMPLETED, exit 0, the loss fell, the last checkpoint exists.
#   2. Preemption: the running job gets SIGUSR1 (scancel --batch --signal),
#      saves, requeues itself and resumes; its losses equal, step by step and
#      bit for bit, those of an uninterrupted mpirun run of the same recipe.
#   3. Two nodes x 2 tasks, tensor 2: the start-up log shows each rank's node
#      and no tensor group spans nodes; with tensor outermost it warns.
#   4. scancel: the ranks save and stop (stopped.json names the checkpoint), the job ends CANCELLED, not requeued.
#   5. A bad recipe (missing dataset) fails fast: state FAILED, exit code 2,
#      the message in the job's log.
#   6. srun without the MPI plugin (N singleton worlds) is refused.
#   7. A rank killed (TRIDENT_FAULT) inside a job: `trident supervise`
#      restarts srun inside the allocation (no requeue), the run resumes and
#      its losses equal an uninterrupted run's bit for bit.
#   tests/launch/slurm/run.sh TRIDENT_BINARY BUILD_DIR
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
TRIDENT=$(realpath "$1")
BUILD=$(realpath "$2")
if ! sinfo >/dev/null 2>&1 || [ "$(sinfo -h -o %D 2>/dev/null | awk '{s += $1} END {print s + 0}')" -lt 2 ]; then
  if [ -n "${TRIDENT_SLURM_START:-}" ]; then
    if ! $TRIDENT_SLURM_START --nodes 2 >"$BUILD/slurm_start.log" 2>&1; then
      tail -20 "$BUILD/slurm_start.log"
      echo "SKIPPED: TRIDENT_SLURM_START ($TRIDENT_SLURM_START) could not start a Slurm cluster"
      exit 77
    fi
  else
    echo "SKIPPED: no Slurm cluster with 2 nodes (sinfo) and TRIDENT_SLURM_START is not set"
    exit 77
  fi
fi
# Simulated nodes share this machine: Open MPI's TCP transport between them
# goes over loopback (jobs inherit the environment of sbatch).
export OMPI_MCA_btl_tcp_if_include=${OMPI_MCA_btl_tcp_if_include:-lo}
W=$BUILD/slurm_test
rm -rf "$W"
mkdir -p "$W"
cd "$W"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
field() { scontrol show job "$1" | grep -o "$2=[^ ]*" | head -1 | cut -d= -f2; }
# wait_job JOB SECONDS: until the job has ended. Slurm holds a requeued job
# for about 2 minutes (BeginTime); the test releases it after 2 s instead.
# Not at once: slurmd revokes the old instance's credential with a time in
# whole seconds, and a new launch whose credential dates from that same
# second is killed ("Job credential revoked", the job ends FAILED).
wait_job() {
  local end=$((SECONDS + $2)) st
  while [ $SECONDS -lt $end ]; do
    st=$(field "$1" JobState)
    case "$st" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) echo "$st"; return 0 ;;
      PENDING)
        if [ "$(field "$1" Reason)" = BeginTime ] &&
          [ "$(date -d "$(field "$1" StartTime)" +%s 2>/dev/null || echo 0)" -gt $(($(date +%s) + 3)) ]; then
          sleep 2
          scontrol update JobId="$1" StartTime=now >/dev/null 2>&1
        fi ;;
    esac
    sleep 1
  done
  echo "TIMEDOUT"
}
submit() {  # prints the job id
  "$TRIDENT" submit "$ROOT/configs/demo.yaml" --time 10 --log-dir "$W/logs" "$@" 2>&1 | tee -a "$W/submit.out" |
    grep -o "job [0-9]* submitted" | grep -o "[0-9]*"
}
log_of() { echo "$W/logs/$(field "$1" JobName)-$1.out"; }
# submit_two_nodes ARGS...: submit, wait, print the job id. Open MPI 4.1's
# TCP transport can take a peer's first message while this process still
# waits in MPI_Init's PMIx fence, before its PML has registered the handler
# (upstream open-mpi/ompi#13559); the process then dies of SIGSEGV inside
# ompi_mpi_init, before Trident runs a line. On simulated nodes sharing one
# loaded machine about 1 two-node job in 50 hits it. Only a job whose log
# shows that crash is submitted again (at most twice), and the test says so.
submit_two_nodes() {
  local job st try
  for try in 1 2 3; do
    job=$(submit --nodes 2 --tasks-per-node 2 "$@")
    st=$(wait_job "$job" 300)
    if [ "$st" != COMPLETED ] && grep -q "Segmentation fault" "$(log_of "$job")" &&
      grep -Eq "ompi_mpi_init|PMPI_Init" "$(log_of "$job")" && [ $try -lt 3 ]; then
      echo "note: job $job died in Open MPI's MPI_Init (a segfault inside ompi_mpi_init); submitting again" >&2
      continue
    fi
    break
  done
  echo "$job"
}
COMMON=(--set train.steps=150 --set log.every=25 --set eval.batches=2)

# 1. submit and complete
job=$(submit --nodes 1 --tasks-per-node 4 --set parallel.data=4 "${COMMON[@]}" --set log.metrics="$W/one.jsonl" \
      --set checkpoint.dir="$W/ck_one")
[ -n "$job" ] || { cat "$W/submit.out"; fail "submit printed no job id"; exit 1; }
st=$(wait_job "$job" 300)
[ "$st" = COMPLETED ] && [ "$(field "$job" ExitCode)" = 0:0 ] && ok "job $job completed" ||
  { fail "job $job: $st, exit $(field "$job" ExitCode)"; cat "$(log_of "$job")"; }
python3 - "$W/one.jsonl" <<'PY' && ok "the loss fell" || fail "the loss did not fall"
import json, sys
losses = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if r["type"] == "train"]
print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps")
sys.exit(0 if len(losses) == 150 and losses[-1] < losses[0] - 0.25 else 1)
PY
[ -f "$W/ck_one/step_00000150/index.json" ] && ok "checkpoint step 150" || fail "no checkpoint step_00000150"

# 2. preempt, requeue, resume: the losses of an uninterrupted run
job=$(submit --nodes 1 --tasks-per-node 4 --set parallel.data=4 "${COMMON[@]}" --set log.metrics="$W/pre.jsonl" \
      --set checkpoint.dir="$W/ck_pre")
for _ in $(seq 300); do
  n=$(grep -c '"train"' "$W/pre.jsonl" 2>/dev/null)
  [ "${n:-0}" -ge 30 ] && break
  sleep 0.2
done
scancel --batch --signal=USR1 "$job"
st=$(wait_job "$job" 400)
log=$(log_of "$job")
[ "$st" = COMPLETED ] && [ "$(field "$job" Restarts)" = 1 ] && ok "job $job completed after 1 requeue" ||
  { fail "job $job: $st, restarts $(field "$job" Restarts)"; cat "$log"; }
grep -Eq "stopping after step [0-9]+ of [0-9]+ on signal SIGUSR1: saved" "$log" && grep -q "requeueing job $job" "$log" &&
  grep -q "resumed from .*ck_pre/step_" "$log" && ok "signalled, saved, requeued, resumed" ||
  { fail "the log does not show stop, requeue and resume"; cat "$log"; }
OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 \
  "$TRIDENT" train "$ROOT/configs/demo.yaml" --set parallel.data=4 "${COMMON[@]}" --set log.metrics="$W/ref.jsonl" \
  >"$W/ref.out" 2>&1 || fail "the reference run failed"
python3 - "$W/pre.jsonl" "$W/ref.jsonl" <<'PY' && ok "resumed losses equal the uninterrupted run's" || fail "losses differ"
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r["type"] == "train"}
got, ref = losses(sys.argv[1]), losses(sys.argv[2])
bad = [s for s in ref if got.get(s) != ref[s]]
print(f"{len(got)} steps after requeue, {len(ref)} uninterrupted; differing steps: {bad[:5]}")
sys.exit(0 if len(ref) == 150 and not bad else 1)
PY

# 3. two nodes: tensor groups inside a node; the log names each rank's node
job=$(submit_two_nodes --set parallel.tensor=2 --set parallel.data=2 --set train.steps=5 \
      --set eval.batches=0 --set log.metrics= --set checkpoint.dir="$W/ck_two")
st=$(field "$job" JobState)
log=$(log_of "$job")
[ "$st" = COMPLETED ] && grep -q "4 ranks on 2 nodes" "$log" && grep -Eq "node 0 \(.*\): ranks 0-1" "$log" &&
  grep -Eq "node 1 \(.*\): ranks 2-3" "$log" && ! grep -q "span nodes" "$log" &&
  ok "two nodes: ranks 0-1 and 2-3, tensor groups inside a node" || { fail "two-node job"; cat "$log"; }
job=$(submit_two_nodes --set parallel.tensor=2 --set parallel.data=2 --set train.steps=2 \
      --set eval.batches=0 --set log.metrics= --set checkpoint.dir="$W/ck_span" \
      --set "parallel.order=[data, tensor, pipeline]")
grep -q "tensor groups \[0,2\] \[1,3\] span nodes" "$(log_of "$job")" && ok "warns when tensor groups span nodes" ||
  { fail "no span warning"; cat "$(log_of "$job")"; }

# 4. scancel (SIGTERM): the ranks save and stop; the job ends, not requeued
job=$(submit --nodes 1 --tasks-per-node 4 --set parallel.data=4 --set train.steps=2000 --set eval.batches=0 \
      --set log.metrics="$W/cancel.jsonl" --set checkpoint.dir="$W/ck_cancel")
for _ in $(seq 300); do
  n=$(grep -c '"train"' "$W/cancel.jsonl" 2>/dev/null)
  [ "${n:-0}" -ge 10 ] && break
  sleep 0.2
done
scancel "$job"
st=$(wait_job "$job" 120)
log=$(log_of "$job")
# The ranks finish their save after Slurm marks the job cancelled: wait for the line that ends the run.
for _ in $(seq 600); do grep -Eq "^trident: srun exited|stopped: [0-9]+ of" "$log" && break; sleep 0.1; done
[ "$st" = CANCELLED ] && [ "$(field "$job" Restarts)" = 0 ] && grep -Eq "stopping after step [0-9]+ of [0-9]+ on signal" "$log" &&
  [ -f "$W/ck_cancel/latest" ] && grep -q "\"checkpoint\": \"$(cat "$W/ck_cancel/latest")\"" "$W/ck_cancel/stopped.json" &&
  ok "scancel: saved $(cat "$W/ck_cancel/latest") (stopped.json names it), cancelled, not requeued" ||
  { fail "scancel: $st, restarts $(field "$job" Restarts)"; cat "$log"; }

# 5. a bad recipe fails fast, visibly
start=$SECONDS
job=$(submit --nodes 1 --tasks-per-node 2 --set parallel.data=2 --set data.synthetic=null \
      --set data.train="$W/missing/corpus_train")
st=$(wait_job "$job" 120)
log=$(log_of "$job")
[ "$st" = FAILED ] && [ "$(field "$job" ExitCode)" = 2:0 ] && grep -q "error: .*missing/corpus_train.idx: cannot open" "$log" &&
  ok "bad recipe: FAILED, exit code 2:0, message in the log, $((SECONDS - start)) s" ||
  { fail "bad recipe job: $st, exit $(field "$job" ExitCode)"; cat "$log"; }

# 6. srun without the MPI plugin starts N singletons: each says so
out=$(srun -N 1 -n 2 --mpi=none "$TRIDENT" train "$ROOT/configs/demo.yaml" --set parallel.data=2 2>&1)
code=$?
[ "$code" != 0 ] && grep -q "srun started 2 tasks without an MPI plugin" <<<"$out" &&
  ok "srun --mpi=none: refused, naming srun --mpi=pmix" || { fail "srun --mpi=none: exit $code"; echo "$out"; }

# 7. a rank killed inside the job: `trident supervise` (the script's default) starts srun again inside the
#    allocation, not requeued, resuming from the newest checkpoint; the losses equal the uninterrupted run's
SUP=(--set train.steps=6 --set eval.batches=0 --set checkpoint.every=1)
job=$(TRIDENT_FAULT='kill,step=3,rank=1,attempt=0' submit --nodes 1 --tasks-per-node 4 --set parallel.data=4 \
      "${SUP[@]}" --set log.metrics="$W/sup.jsonl" --set checkpoint.dir="$W/ck_sup")
st=$(wait_job "$job" 300)
log=$(log_of "$job")
[ "$st" = COMPLETED ] && [ "$(field "$job" Restarts)" = 0 ] && grep -q "supervise: attempt 1 failed" "$log" &&
  grep -q "restart (attempt 2) after" "$log" && grep -q '"type":"restart"' "$W/sup.jsonl" &&
  ok "a killed rank: srun restarted inside job $job, resumed, the failure's cost recorded" ||
  { fail "supervised job $job: $st, requeues $(field "$job" Restarts)"; cat "$log"; }
OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 \
  "$TRIDENT" train "$ROOT/configs/demo.yaml" --set parallel.data=4 "${SUP[@]}" --set log.metrics="$W/sup_ref.jsonl" \
  >"$W/sup_ref.out" 2>&1 || fail "the supervised case's reference run failed"
python3 - "$W/sup.jsonl" "$W/sup_ref.jsonl" <<'PY' && ok "restarted losses equal the uninterrupted run's" || fail "losses differ"
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if r["type"] == "train"}
got, ref = losses(sys.argv[1]), losses(sys.argv[2])
bad = [s for s in ref if got.get(s) != ref[s]]
print(f"{len(got)} steps supervised, {len(ref)} uninterrupted; differing steps: {bad[:5]}")
sys.exit(0 if len(ref) == 6 and not bad else 1)
PY

[ "$failures" = 0 ] && echo "all Slurm checks passed" || echo "$failures Slurm check(s) failed"
exit $((failures > 0))
