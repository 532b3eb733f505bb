#!/usr/bin/env bash
# Installs what is missing (Debian packages; as root, or prints the one
# apt-get line to run), configures and builds Trident into build/.
# Used by launch/demo.sh and launch/test.sh; safe to run again (a no-op when
# everything is in place). Environment: BUILD_DIR (default build),
# TRIDENT_CUDA (AUTO|ON|OFF, default AUTO).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}

PACKAGES=(cmake g++ ninja-build pkg-config libyaml-cpp-dev libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev libbenchmark-dev
          libopenmpi-dev openmpi-bin libdnnl-dev python3-venv
          libpcre2-dev libutf8proc-dev libsentencepiece-dev zlib1g-dev libzstd-dev zstd librsvg2-dev
          clang libclang-rt-14-dev)  # clang: the libFuzzer targets (tests/fuzz)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "[setup] installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "[setup] missing packages; run as root:" >&2
    echo "  apt-get install -y ${missing[*]}" >&2
    exit 2
  fi
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DTRIDENT_CUDA="${TRIDENT_CUDA:-AUTO}" >/dev/null
fi
echo "[setup] building in $BUILD_DIR"
cmake --build "$BUILD_DIR" -j "$(nproc)"
