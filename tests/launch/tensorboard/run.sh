#!/usr/bin/env bash
# TensorBoard event files read back by the `tensorboard` package (ctest:
# tensorboard): tests/launch/tensorboard/check.py with TensorBoard from a
# virtual environment: TRIDENT_TENSORBOARD_VENV when set, else
# BUILD/py-venv-tensorboard, created and filled from PyPI when missing. Exit 77
# (ctest: skipped, with the reason printed) when it cannot be installed.
#   tests/launch/tensorboard/run.sh TRIDENT_BINARY BUILD_DIR
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
TRIDENT=$1
BUILD=$2
VENV=${TRIDENT_TENSORBOARD_VENV:-$BUILD/py-venv-tensorboard}
source "$ROOT/tests/launch/py_venv.sh"
ensure_venv tensorboard "$VENV" "from tensorboard.backend.event_processing import event_accumulator" tensorboard
WORK=$BUILD/tensorboard_test
rm -rf "$WORK"
mkdir -p "$WORK"
exec "$VENV/bin/python" "$ROOT/tests/launch/tensorboard/check.py" --trident "$TRIDENT" --root "$ROOT" --work "$WORK"
