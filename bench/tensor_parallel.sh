#!/usr/bin/env bash
# Tensor-parallel layer cost on this machine: bench_tensor_parallel with
# tensor 1 (1 and 2 threads) and tensor 2 (1 thread per rank), alternated
# three times; prints every run, then the median layer time per configuration.
#   bash bench/tensor_parallel.sh [recipe] [key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bench/bench_tensor_parallel
[ -x "$BIN" ] || { echo "build first: cmake -S . -B build -G Ninja && ninja -C build" >&2; exit 2; }
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
export OMPI_MCA_mpi_yield_when_idle=1
ARGS=("$@")
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for rep in 1 2 3; do
  for cfg in "1 1" "1 2" "2 1"; do
    read -r np threads <<< "$cfg"
    run=$(OMP_NUM_THREADS=$threads "${MPIRUN[@]}" -np "$np" "$BIN" "${ARGS[@]}")
    echo "$run"
    echo "$run" | awk -v t="$np" -v th="$threads" '/^  (on|off) / {print t, th, $1, $2}' >> "$rows"
  done
done
echo "# medians over 3 runs: tensor threads_per_rank sequence_parallel layer_ms"
for key in $(awk '{print $1 "_" $2 "_" $3}' "$rows" | sort -u); do
  IFS=_ read -r t th sp <<< "$key"
  awk -v t="$t" -v th="$th" -v sp="$sp" '$1 == t && $2 == th && $3 == sp {print $4}' "$rows" | sort -n |
    awk -v k="$t $th $sp" '{v[NR] = $1} END {print k, v[int((NR + 1) / 2)]}'
done
