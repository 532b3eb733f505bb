# Sourced by bench/dualpipev_bubble.sh and bench/dualpipev_overlap.sh: the
# paths, the step and round counts (STEPS, ROUNDS from the environment), and
# a scratch folder removed on exit.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
STEPS=${STEPS:-12}
ROUNDS=${ROUNDS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
