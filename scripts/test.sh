#!/usr/bin/env bash
# Runs the whole test suite: C unit tests (ASan+UBSan), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
make -s test-c
export PJRT_DEVICE=${PJRT_DEVICE:-CPU}
exec .venv/bin/python -m pytest -q tests/python "$@"
