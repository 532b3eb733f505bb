#!/usr/bin/env bash
# The whole test suite: set up, build, run every test under ctest.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
"$ROOT/launch/setup.sh"
cd "$BUILD_DIR"
export OMPI_MCA_mpi_yield_when_idle=1
ctest --output-on-failure -j "$(nproc)" --timeout 900 -LE full "$@"
