#!/usr/bin/env bash
# The tokenizer exactness test (ctest: tokenizers): tests/launch/tokenizers/check.py
# with the reference libraries `tokenizers` and `sentencepiece` from a
# virtual environment: TRIDENT_TOKENIZER_VENV when set, else BUILD/py-venv-tokenizers,
# created and filled from PyPI when they are missing. Exit 77 (ctest:
# skipped, with the reason printed) when they cannot be installed.
#   tests/launch/tokenizers/run.sh TRIDENT_BINARY BUILD_DIR
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
TRIDENT=$1
BUILD=$2
VENV=${TRIDENT_TOKENIZER_VENV:-$BUILD/py-venv-tokenizers}
have() { "$VENV/bin/python" -c "import tokenizers, sentencepiece" 2>/dev/null; }
if ! have; then
  echo "tokenizers: installing tokenizers, sentencepiece into $VENV (PyPI)"
  if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    echo "SKIPPED: python3 -m venv failed (install python3-venv) - cannot install the reference tokenizers"
    exit 77
  fi
  if ! "$VENV/bin/pip" install -q tokenizers sentencepiece 2>&1 | tail -3 || ! have; then
    echo "SKIPPED: could not install tokenizers and sentencepiece from PyPI into $VENV"
    exit 77
  fi
fi
WORK=$BUILD/tokenizers_test
rm -rf "$WORK"
mkdir -p "$WORK"
exec "$VENV/bin/python" "$ROOT/tests/launch/tokenizers/check.py" --trident "$TRIDENT" --root "$ROOT" --work "$WORK"
