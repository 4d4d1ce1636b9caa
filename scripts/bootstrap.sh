#!/usr/bin/env bash
# Sets up .venv (torch 2.13 CPU, numpy, pytest, scikit-learn) and builds the
# C engine in place. Idempotent and quick when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.stamp
if [ ! -f "$stamp" ] || ! cmp -s requirements.txt "$stamp"; then
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
  cp requirements.txt "$stamp"
fi
# MLIR's mlir-opt (LLVM 19) parses the emitted StableHLO in the tests.
if ! command -v mlir-opt-19 >/dev/null 2>&1 && [ ! -x /usr/lib/llvm-19/bin/mlir-opt ]; then
  if ! { apt-get update -qq && apt-get install -y -qq mlir-19-tools; } >/dev/null 2>&1; then
    echo "bootstrap: could not install mlir-19-tools; StableHLO parse tests will be skipped" >&2
  fi
fi
.venv/bin/python setup.py -q build_ext --inplace >/dev/null
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/python" > "$site/torchtpu-dev.pth"
