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
have() { "$VENV/bin/python" -c "import torch, transformers, safetensors" 2>/dev/null; }
if ! have; then
  echo "hf_interop: installing torch, transformers, safetensors into $VENV (PyPI)"
  if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    echo "SKIPPED: python3 -m venv failed (install python3-venv) - cannot install PyTorch and transformers"
    exit 77
  fi
  if ! "$VENV/bin/pip" install -q torch transformers safetensors numpy 2>&1 | tail -3 || ! have; then
    echo "SKIPPED: could not install torch, transformers and safetensors from PyPI into $VENV"
    exit 77
  fi
fi
WORK=$BUILD/hf_interop
rm -rf "$WORK"
mkdir -p "$WORK"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
exec "$VENV/bin/python" "$ROOT/tests/launch/hf/interop.py" --trident "$TRIDENT" --root "$ROOT" --work "$WORK"
