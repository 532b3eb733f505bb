#!/usr/bin/env bash
# The GPU check: build the CUDA backend for this GPU, run the CUDA tests
# (every kernel against its CPU twin, training on device: cuda against the
# CPU, the mesh equivalence with 4 ranks sharing the GPU), then measure
#   - kernel throughput (bench_cuda: GEMM against cuBLAS alone on bf16,
#     the FP8 GEMM against the bf16 one, flash attention TFLOP/s, LayerNorm
#     GB/s),
#   - a single-GPU bf16 training step of GPT-2 124M and GPT-3 XL 1.3B (and
#     the 1.3B with train.fp8 tensorwise, against its bf16 step):
#     tokens/s, MFU against the device's dense bf16 peak, peak memory, and
#     the step time against the sum of its kernels' GPU times.
# Writes OUT/gpu_check.json (OUT: $OUT, else build-gpu/out) and the logs
# beside it. Budget: 8 minutes on an H100/H200; each stage has a timeout and
# a stage that fails is recorded, not fatal.
# Machines without Debian's libraries (yaml-cpp, fmt, GoogleTest, Google
# Benchmark, oneDNN, Open MPI): run bench/gpu/pack.sh where apt works and
# bring .gpu-deps along; they are unpacked into a private prefix here.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/build-gpu/out}
mkdir -p "$OUT"
BUILD=$ROOT/build-gpu
JSON=$OUT/gpu_check.json
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
stage() { echo "== [$(elapsed)s] $*"; }

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true
stage "device: $(cat "$OUT/gpu.txt")"

# --- dependencies: the system's, else .gpu-deps unpacked into a prefix
PREFIX_ARGS=()
if ! pkg-config --exists yaml-cpp 2>/dev/null && [ -d .gpu-deps ]; then
  DEPS=$ROOT/build-gpu/deps
  mkdir -p "$DEPS"
  for f in .gpu-deps/*.deb; do dpkg -x "$f" "$DEPS"; done
  # Debian names the Open MPI programs *.openmpi (the plain names are alternatives)
  for f in "$DEPS"/usr/bin/*.openmpi; do ln -sf "$(basename "$f")" "${f%.openmpi}"; done
  LIB=$DEPS/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$LIB:$LIB/openmpi/lib:${LD_LIBRARY_PATH:-}
  export PATH=$DEPS/usr/bin:$PATH
  export OPAL_PREFIX=$DEPS/usr
  export CPATH=$DEPS/usr/include:$DEPS/usr/lib/x86_64-linux-gnu/openmpi/include:${CPATH:-}
  PREFIX_ARGS=(-DCMAKE_PREFIX_PATH="$DEPS/usr;$LIB/cmake" -DMPI_HOME="$LIB/openmpi"
               -DMPI_CXX_COMPILER="$DEPS/usr/bin/mpicxx" -DDNNL_INCLUDE_DIR="$DEPS/usr/include"
               -DDNNL_LIBRARY="$LIB/libdnnl.so.2")
  stage "libraries from .gpu-deps ($DEPS)"
fi

# --- build (this GPU's architecture only: faster than sm_80 + sm_90)
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
ARCH=${ARCH:-90}
stage "configure + build for sm_$ARCH"
BUILD_OK=true
# (warnings stay warnings here: another compiler version may add some; CI keeps them errors)
{ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIDENT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
    -DTRIDENT_WERROR=OFF \
    "${PREFIX_ARGS[@]}" && \
  timeout 240 ninja -C "$BUILD" trident test_cuda test_cuda_train test_pipeline bench_cuda; } > "$OUT/build.log" 2>&1 || BUILD_OK=false
tail -5 "$OUT/build.log"

TESTS="null"; MESH="null"; KERNELS="[]"; TRAIN="[]"
if $BUILD_OK; then
  stage "CUDA tests (kernels vs CPU twins, training vs CPU)"
  timeout 100 "$BUILD/tests/test_cuda" --gtest_output=json:"$OUT/test_cuda.json" > "$OUT/test_cuda.log" 2>&1
  rc=$?
  timeout 60 "$BUILD/tests/test_cuda_train" --gtest_output=json:"$OUT/test_cuda_train.json" >> "$OUT/test_cuda.log" 2>&1
  rc=$(( rc != 0 ? rc : $? ))
  TESTS=$(python3 - "$OUT/test_cuda.json" "$rc" "$OUT/test_cuda_train.json" <<'PY'
import json, sys
try:
    rs = [json.load(open(f)) for f in (sys.argv[1], sys.argv[3])]
    fails = [t["name"] for r in rs for s in r["testsuites"] for t in s["testsuite"] if t.get("failures")]
    print(json.dumps({"rc": int(sys.argv[2]), "tests": sum(r["tests"] for r in rs),
                      "failures": sum(r["failures"] for r in rs), "failed": fails}))
except Exception as e:
    print(json.dumps({"rc": int(sys.argv[2]), "error": str(e)}))
PY
)
  echo "$TESTS"
  stage "mesh equivalence on device: cuda, 4 ranks on one GPU"
  OMP_NUM_THREADS=2 OMPI_MCA_mpi_yield_when_idle=1 timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -np 4 "$BUILD/tests/test_pipeline" --gtest_filter='*Cuda*' > "$OUT/test_mesh.log" 2>&1
  MESH="{\"rc\":$?}"
  tail -3 "$OUT/test_mesh.log"

  stage "kernel throughput"
  timeout 90 "$BUILD/bench/bench_cuda" > "$OUT/bench_cuda.jsonl" 2> "$OUT/bench_cuda.err"
  KERNELS=$(python3 -c "import json,sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1]) if l.strip()]))" "$OUT/bench_cuda.jsonl" 2>/dev/null || echo "[]")
  cat "$OUT/bench_cuda.jsonl"

  run_train() {  # name recipe steps extra-sets...
    local name=$1 recipe=$2 steps=$3; shift 3
    local sets=(--set device=cuda --set train.precision=bf16 --set train.steps="$steps" --set eval.batches=0
                --set log.every=1 --set log.metrics="$OUT/$name.jsonl" --set checkpoint.dir= "$@")
    stage "training step: $name"
    TRIDENT_KERNEL_TIMES=1 timeout 150 "$BUILD/launch/trident" train "$recipe" "${sets[@]}" > "$OUT/$name.log" 2>&1
    echo "rc $?" >> "$OUT/$name.log"
    tail -4 "$OUT/$name.log"
  }
  run_train gpt2-124m configs/gpt2-124m.yaml 8 --set train.micro_batch=16 --set train.global_batch=16
  run_train gpt3-1.3b configs/gpt3-1.3b.yaml 6 --set train.micro_batch=4 --set train.global_batch=4
  run_train gpt3-1.3b-fp8 configs/gpt3-1.3b.yaml 6 --set train.micro_batch=4 --set train.global_batch=4 \
    --set train.fp8.recipe=tensorwise
  TRAIN=$(python3 - "$OUT" <<'PY'
import json, sys, os
out = []
for name in ["gpt2-124m", "gpt3-1.3b", "gpt3-1.3b-fp8"]:
    path = os.path.join(sys.argv[1], name + ".jsonl")
    try:
        recs = [json.loads(l) for l in open(path) if l.strip()]
    except Exception as e:
        out.append({"model": name, "error": str(e)}); continue
    train = [r for r in recs if r.get("type") == "train"]
    if not train:
        out.append({"model": name, "error": "no train records (see %s.log)" % name}); continue
    timed = train[2:] if len(train) > 3 else train[1:] or train  # skip warm-up steps
    step_s = sum(r["step_s"] for r in timed) / len(timed)
    kernel_s = sum(r.get("kernel_s", 0) for r in timed) / len(timed)
    out.append({"model": name, "steps_timed": len(timed),
                "tokens_per_s": sum(r["tokens_per_s"] for r in timed) / len(timed),
                "mfu": sum(r["mfu"] for r in timed) / len(timed),
                "peak_bytes": train[-1]["peak_bytes"],
                "step_s": step_s, "kernel_s": kernel_s,
                "step_over_kernels": step_s / kernel_s if kernel_s else None,
                "loss_first": train[0]["loss"], "loss_last": train[-1]["loss"]})
print(json.dumps(out))
PY
)
fi

cat > "$JSON" <<JSONEOF
{"date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "device": "$(head -1 "$OUT/gpu.txt")", "git": "$(git rev-parse --short HEAD 2>/dev/null)",
 "build_ok": $BUILD_OK, "tests": $TESTS, "mesh_equivalence": $MESH,
 "kernels": $KERNELS, "training": $TRAIN, "seconds": $(elapsed),
 "targets": {"mfu_1.3b": 0.45, "step_over_kernels_max": 1.10}}
JSONEOF
stage "wrote $JSON"
cat "$JSON"
