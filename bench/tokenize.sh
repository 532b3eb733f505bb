#!/usr/bin/env bash
# Tokenizer throughput: `trident prepare` against the `tokenizers` library on
# the same corpus, tokenizer and threads, in the same run (bench/tokenize.py),
# and prepare's peak memory on two corpus sizes.
#   bench/tokenize.sh [CORPUS.txt] [SCALE] [VOCAB]
# CORPUS defaults to the Shakespeare text beside the checkout, else docs/*.md.
# The reference library comes from PyPI into build/py-venv-tokenizers.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
VENV=${TRIDENT_TOKENIZER_VENV:-$BUILD/py-venv-tokenizers}
bash "$ROOT/launch/setup.sh" >/dev/null
if ! "$VENV/bin/python" -c "import tokenizers" 2>/dev/null; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q tokenizers sentencepiece
fi
CORPUS=${1:-$ROOT/../shared/data/tinyshakespeare.txt}
if [ ! -f "$CORPUS" ]; then
  CORPUS=$BUILD/bench_docs_corpus.txt
  cat "$ROOT"/docs/*.md > "$CORPUS"
fi
exec "$VENV/bin/python" "$ROOT/bench/tokenize.py" "$BUILD/launch/trident" "$CORPUS" "$BUILD/bench_tokenize" "${2:-8}" "${3:-8000}"
