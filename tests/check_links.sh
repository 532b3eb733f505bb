#!/bin/bash
# The link graph is the design (docs/architecture.md): a test binary below
# core/data and launch/tools loads none of their libraries. Reads `ldd` of
# each binary and fails naming the binary and the library it should not load.
#   check_links.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: check_links.sh BUILD_DIR}
status=0
check() {  # binary, then the library patterns it must not load
  local bin=$build/tests/$1; shift
  [ -x "$bin" ] || { echo "FAILED: no $bin"; status=1; return; }
  local libs; libs=$(ldd "$bin" | awk '{print $1}')
  for lib in "$@"; do
    if grep -q "$lib" <<< "$libs"; then echo "FAILED: $(basename "$bin") loads $lib"; status=1; fi
  done
}
data=(libpcre2 libutf8proc libsentencepiece libzstd)  # (zlib also comes with Open MPI)
report=(librsvg libcairo)
for t in test_recipe test_safetensors test_kernels test_cuda_emulated test_topology test_schedule test_collectives \
         test_model test_reference test_optim test_faults; do
  check "$t" "${data[@]}" "${report[@]}"
done
for t in test_data test_train test_planner test_pipeline; do check "$t" "${report[@]}"; done
check test_recipe libdnnl libmpi
check test_data libdnnl libmpi
[ $status -eq 0 ] && echo "check_links: no test binary loads a library its folder does not use"
exit $status
