#!/usr/bin/env bash
# Runs the main demo: trains an MLP on scikit-learn's digits on xla.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PJRT_DEVICE=${PJRT_DEVICE:-CPU}
exec .venv/bin/python examples/train_digits.py "$@"
