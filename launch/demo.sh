#!/usr/bin/env bash
# The main job: set up, build, and train the demo recipe (configs/demo.yaml:
# a small GPT-2 on the embedded synthetic Markov source, no download).
# Extra arguments go to `trident train` (e.g. --set train.steps=200).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/launch/setup.sh"
cd "$ROOT"
mkdir -p runs/demo
exec "${BUILD_DIR:-$ROOT/build}/launch/trident" train configs/demo.yaml "$@"
