#!/usr/bin/env bash
# The Python tests' virtual environments, filled from PyPI before those tests
# run (ctest: py_venvs, the fixture hf_interop, fp8_reference, tokenizers and
# tensorboard require). Installing is network and disk work: as a test of
# its own it holds one core while the others run, instead of the two each
# of those tests holds. It never fails: a package that cannot be installed
# leaves its test to skip with the reason (tests/launch/py_venv.sh).
#   tests/launch/py_venvs.sh BUILD_DIR
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$1
source "$ROOT/tests/launch/py_venv.sh"
# each in a subshell: ensure_venv exits (77) where it cannot install
(ensure_venv hf_interop "${TRIDENT_PY_VENV:-$BUILD/py-venv}" "import torch, transformers, safetensors" \
   torch transformers safetensors numpy)
(ensure_venv fp8_reference "${TRIDENT_FP8_VENV:-$BUILD/py-venv}" "import torch, torchao.float8, numpy" \
   torch torchao numpy)
(ensure_venv tokenizers "${TRIDENT_TOKENIZER_VENV:-$BUILD/py-venv-tokenizers}" "import tokenizers, sentencepiece" \
   tokenizers sentencepiece)
(ensure_venv tensorboard "${TRIDENT_TENSORBOARD_VENV:-$BUILD/py-venv-tensorboard}" \
   "from tensorboard.backend.event_processing import event_accumulator" tensorboard)
exit 0
