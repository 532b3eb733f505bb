#!/usr/bin/env bash
# The Hugging Face interoperability test (ctest: hf_interop). Runs
# tests/launch/hf/interop.py with PyTorch + transformers + safetensors from a virtual
# environment: TRIDENT_PY_VENV when set, else BUILD/py-venv, created and filled
# from PyPI when the packages are missing. Exit 77 (ctest: skipped, with the
# reason printed) when they cannot be installed.
#   tests/launch/hf/run.sh TRIDENT_BINARY BUILD_DIR
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
TRIDENT=$1
BUILD=$2
VENV=${TRIDENT_PY_VENV:-$BUILD/py-venv}
source "$ROOT/tests/launch/py_venv.sh"
ensure_venv hf_interop "$VENV" "import torch, transformers, safetensors" torch transformers safetensors numpy
WORK=$BUILD/hf_interop
rm -rf "$WORK"
mkdir -p "$WORK"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
exec "$VENV/bin/python" "$ROOT/tests/launch/hf/interop.py" --trident "$TRIDENT" --root "$ROOT" --work "$WORK"
