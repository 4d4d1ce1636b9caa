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
.venv/bin/python setup.py -q build_ext --inplace >/dev/null
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/python" > "$site/torchtpu-dev.pth"
