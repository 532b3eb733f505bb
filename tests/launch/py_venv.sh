# Sourced by the Python-based tests (hf_interop, tokenizers, tensorboard):
#   ensure_venv TEST VENV IMPORTS PACKAGE...
# makes VENV (python3 -m venv) hold PACKAGE... from PyPI unless
# `python -c IMPORTS` already works there; exits 77 (ctest: skipped) with the
# reason when they cannot be installed.
ensure_venv() {
  local test=$1 venv=$2 imports=$3
  shift 3
  "$venv/bin/python" -c "$imports" 2>/dev/null && return 0
  echo "$test: installing $* into $venv (PyPI)"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "SKIPPED: python3 -m venv failed (install python3-venv) - cannot install $*"
    exit 77
  fi
  if ! "$venv/bin/pip" install -q "$@" 2>&1 | tail -3 || ! "$venv/bin/python" -c "$imports" 2>/dev/null; then
    echo "SKIPPED: could not install $* from PyPI into $venv"
    exit 77
  fi
}
