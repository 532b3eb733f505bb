#!/usr/bin/env bash
# Measures the candidate CPU GEMM libraries on this machine, fp32 sgemm
# 2048^3 (row-major), 1 and 2 threads: OpenBLAS (as Debian ships it, and with
# OPENBLAS_CORETYPE=SkylakeX), BLIS, oneDNN. Installs the libraries if
# missing (root). The numbers and the choice are in docs/performance.md.
set -euo pipefail
N=${1:-2048}
if [ "$(id -u)" -eq 0 ]; then
  for p in libopenblas-dev libblis-dev libdnnl-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || \
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$p" >/dev/null
  done
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/g.cpp" <<'CPP'
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#ifdef USE_DNNL
#include <oneapi/dnnl/dnnl.h>
#else
#include <cblas.h>
#endif
int main(int argc, char** argv) {
  const long n = std::atol(argv[1]);
  std::vector<float> A(n * n, 1.0f), B(n * n, 0.5f), C(n * n);
  auto run = [&] {
#ifdef USE_DNNL
    dnnl_sgemm('N', 'N', n, n, n, 1.f, A.data(), n, B.data(), n, 0.f, C.data(), n);
#else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, A.data(), n, B.data(), n, 0.f, C.data(), n);
#endif
  };
  run();
  if (C[0] != 0.5f * float(n)) { std::printf("wrong result\n"); return 1; }
  double best = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / dt / 1e9);
  }
  std::printf("%.1f\n", best);
}
CPP
g++ -O2 "$dir/g.cpp" -o "$dir/openblas" -I/usr/include/x86_64-linux-gnu/openblas-pthread \
    -L/usr/lib/x86_64-linux-gnu/openblas-pthread -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-pthread -lopenblas
g++ -O2 "$dir/g.cpp" -o "$dir/blis" -I/usr/include/blis -lblis
g++ -O2 -DUSE_DNNL "$dir/g.cpp" -o "$dir/dnnl" -ldnnl
printf '%-32s %8s %8s   (GFLOP/s, sgemm %s^3, best of 2 s)\n' library 1-thread 2-thread "$N"
row() { printf '%-32s %8s %8s\n' "$1" "$2" "$3"; }
row "OpenBLAS (Debian default)" "$(env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=1 "$dir/openblas" "$N")" \
    "$(env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=2 "$dir/openblas" "$N")"
row "OpenBLAS CORETYPE=SkylakeX" "$(OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 "$dir/openblas" "$N")" \
    "$(OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=2 "$dir/openblas" "$N")"
row "BLIS" "$(BLIS_NUM_THREADS=1 "$dir/blis" "$N")" "$(BLIS_NUM_THREADS=2 "$dir/blis" "$N")"
row "oneDNN (dnnl_sgemm)" "$(OMP_NUM_THREADS=1 "$dir/dnnl" "$N")" "$(OMP_NUM_THREADS=2 "$dir/dnnl" "$N")"
