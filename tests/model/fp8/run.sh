#!/usr/bin/env bash
# kernels/fp8.hpp bit for bit against PyTorch's float8 casts, torchao's
# tensorwise scaling and DeepSeek-V3's blockwise quantisation (ctest:
# fp8_reference): tests/model/fp8/check.py with torch and torchao from a
# virtual environment: TRIDENT_FP8_VENV when set, else BUILD/py-venv (the
# interop tests' environment, which holds torch), filled from PyPI when
# missing. Exit 77 (ctest: skipped, with the reason printed) when they
# cannot be installed.
#   tests/model/fp8/run.sh FP8_DUMP BUILD_DIR
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
DUMP=$1
BUILD=$2
VENV=${TRIDENT_FP8_VENV:-$BUILD/py-venv}
source "$ROOT/tests/launch/py_venv.sh"
ensure_venv fp8_reference "$VENV" "import torch, torchao.float8, numpy" torch torchao numpy
WORK=$BUILD/fp8_reference
rm -rf "$WORK"
mkdir -p "$WORK"
exec "$VENV/bin/python" "$ROOT/tests/model/fp8/check.py" "$DUMP" "$WORK"
