#!/usr/bin/env bash
# Prepares .gpu-deps/ (ignored by git) for bench/gpu/check.sh on a GPU
# machine that has CUDA, CMake and ninja but none of Debian's libraries and
# no network: downloads the .deb files of the build's libraries (yaml-cpp,
# fmt, GoogleTest, Google Benchmark, oneDNN, Open MPI and what they need)
# from Debian's archive. check.sh unpacks them into a private prefix there.
# Run here, from the repository root; then carry .gpu-deps to the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpu-deps/' .git/info/exclude 2>/dev/null || echo '/.gpu-deps/' >> .git/info/exclude
rm -rf .gpu-deps && mkdir -p .gpu-deps
# the build's -dev packages, and every shared library the binaries, mpirun
# and Open MPI's plugins load that a base image may lack (ldd, dpkg -S)
pkgs="libyaml-cpp-dev libyaml-cpp0.7 libfmt-dev libfmt9 libgtest-dev libbenchmark-dev libbenchmark1debian
      libdnnl-dev libdnnl2 libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libevent-core-2.1-7
      libevent-pthreads-2.1-7 libhwloc15 libpmix2 libfabric1 libucx0 libibverbs1 ibverbs-providers librdmacm1
      libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libmunge2 libnuma1 libgomp1 ocl-icd-libopencl1"
(cd .gpu-deps && apt-get download $pkgs)
du -sh .gpu-deps
