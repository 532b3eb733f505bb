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
source "$ROOT/tests/launch/py_venv.sh"
ensure_venv tokenizers "$VENV" "import tokenizers, sentencepiece" tokenizers sentencepiece
WORK=$BUILD/tokenizers_test
rm -rf "$WORK"
mkdir -p "$WORK"
exec "$VENV/bin/python" "$ROOT/tests/launch/tokenizers/check.py" --trident "$TRIDENT" --root "$ROOT" --work "$WORK"
