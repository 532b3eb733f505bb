#!/bin/bash
# The fuzz targets (docs/testing.md#fuzzing): built with clang (libFuzzer,
# AddressSanitizer, UndefinedBehaviorSanitizer) into BUILD/fuzz, then each
#   1. replays its regression inputs (tests/fuzz/regressions/TARGET: inputs
#      that once crashed it, kept after the fix), and
#   2. fuzzes for SECONDS from its seeds (tests/fuzz/seeds/TARGET) and the
#      corpus it has grown (BUILD/fuzz/corpus/TARGET, kept between runs).
# A crash, leak, sanitizer report, timeout or out-of-memory fails, naming the
# input saved under BUILD/fuzz/findings/. Exit 77 (skipped) without clang.
#   run.sh BUILD_DIR [SECONDS per target, default 10] [TARGET ...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run.sh BUILD_DIR [SECONDS] [TARGET ...]}
seconds=${2:-10}
shift $(( $# >= 2 ? 2 : $# ))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(recipe safetensors indexed_dataset checkpoint_index hf_config hf_tokenizer
                                     sentencepiece char_vocab dataset_record jsonl prepare)
clang=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$clang" ]; then
  echo "SKIPPED: no clang++ (apt-get install clang): the fuzz targets need libFuzzer"
  exit 77
fi
out="$build/fuzz"
mkdir -p "$out"
cmake -S "$here" -B "$out" -G Ninja -DCMAKE_CXX_COMPILER="$clang" -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$out/configure.log" 2>&1 ||
  { cat "$out/configure.log"; exit 1; }
ninja -C "$out" > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${targets[@]}"; do
  corpus="$out/corpus/$t" findings="$out/findings"
  mkdir -p "$corpus" "$findings"
  regressions=()
  for f in "$here/regressions/$t"/*; do [ -e "$f" ] && regressions+=("$f"); done
  if [ ${#regressions[@]} -gt 0 ]; then
    if ! "$out/fuzz_$t" -rss_limit_mb=2048 "${regressions[@]}" > "$out/$t.regressions.log" 2>&1; then
      echo "FAILED: fuzz_$t crashes on a regression input again:"; tail -30 "$out/$t.regressions.log"; status=1; continue
    fi
  fi
  if "$out/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$findings/$t-" "$corpus" "$here/seeds/$t" > "$out/$t.log" 2>&1; then
    echo "fuzz_$t: $(awk '/^stat::number_of_executed_units/ {print $2; exit}' "$out/$t.log") runs in ${seconds} s, corpus $(ls "$corpus" | wc -l), ${#regressions[@]} regression inputs replayed: no finding"
  else
    echo "FAILED: fuzz_$t found an input that crashes it (kept in $findings/):"; grep -E "ERROR|SUMMARY|Test unit written|==[0-9]+==" "$out/$t.log" | head -20
    status=1
  fi
done
exit $status
