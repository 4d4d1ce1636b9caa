#!/usr/bin/env bash
# Runs the whole test suite: C unit tests (ASan+UBSan), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# The multi-device PJRT C test drives XLA's CPU plugin when it is installed.
if [ -z "${TORCHTPU_PJRT_CPU_PLUGIN:-}" ]; then
  plugin=$(.venv/bin/python -c 'from torchtpu import pjrt; print(pjrt.find_cpu_plugin() or "")' 2>/dev/null || true)
  if [ -n "$plugin" ]; then export TORCHTPU_PJRT_CPU_PLUGIN="$plugin"; fi
fi
make -s test-c
export PJRT_DEVICE=${PJRT_DEVICE:-CPU}
exec .venv/bin/python -m pytest -q tests/python "$@"
