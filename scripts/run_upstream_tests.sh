#!/usr/bin/env bash
# Runs PyTorch/XLA's own test files, unmodified, against torchtpu.
#
# Usage: scripts/run_upstream_tests.sh CHECKOUT [test/file.py ...]
#   CHECKOUT  a PyTorch/XLA source checkout (its test/ directory is used
#             in place; nothing is copied).
#   files     paths relative to CHECKOUT (default: the list below).
#
# Each file runs in its own process, as upstream's test/run_tests.sh runs it
# (`python test/foo.py`, PJRT_DEVICE=CPU, CPU_NUM_DEVICES=1, with the
# per-file environment upstream gives it), with the checkout's test/ on
# PYTHONPATH for its sibling helpers (test_utils, ...). Files without a
# __main__ block are run through `python -m unittest` from their directory,
# as upstream's TPU script does; test_mp_early_exit.py under torchrun. Per-file counts come from the unittest
# summary lines; a file that dies before its summary counts as one error.
#
# Environment: PYTHON (default: the project's .venv/bin/python),
# UPSTREAM_TEST_TIMEOUT seconds per file (default 900),
# UPSTREAM_CPU_NUM_DEVICES the device count of files without their own
# (default 1, as upstream's CPU job),
# UPSTREAM_TEST_LOGS directory for per-file logs (default: a temp dir).
# Prints one line per file and a total; exits 0 (the counts are the result).
set -u

here="$(cd "$(dirname "$0")/.." && pwd -P)"
if [ $# -lt 1 ] || [ ! -d "$1/test" ]; then
  echo "usage: $0 CHECKOUT [test/file.py ...]  (CHECKOUT must contain test/)" >&2
  exit 2
fi
checkout="$(cd "$1" && pwd -P)"
shift
py="${PYTHON:-$here/.venv/bin/python}"
timeout_s="${UPSTREAM_TEST_TIMEOUT:-900}"
devices="${UPSTREAM_CPU_NUM_DEVICES:-1}"
logs="${UPSTREAM_TEST_LOGS:-$(mktemp -d /tmp/upstream-tests.XXXXXX)}"
mkdir -p "$logs"

default_files=(
  test/test_core_aten_ops.py
  test/test_operations.py
  test/test_metrics.py
  test/eager/test_eager.py
  test/eager/test_eager_with_xla_compile.py
  test/test_input_output_aliases.py
  test/test_devices.py
  test/test_dynamic_shapes_detector.py
  test/test_async_closures.py
  test/test_ops.py
  test/test_xla_graph_execution.py
  test/test_autocast.py
  test/test_grad_checkpoint.py
  test/test_gradient_accumulation.py
  test/scan/test_scan.py
  test/test_while_loop.py
  test/test_mat_mul_precision.py
  test/dynamo/test_dynamo.py
  test/pjrt/test_metrics.py
  test/debug_tool/test_pt_xla_debug.py
  test/test_compilation_cache_utils.py
  test/test_persistent_cache.py
  test/spmd/test_xla_sharding.py
  test/spmd/test_xla_sharded_tensor.py
  test/spmd/test_xla_virtual_device.py
  test/spmd/test_xla_spmd_python_api_interaction.py
  test/spmd/test_spmd_debugging.py
  test/spmd/test_train_spmd_linear_model.py
  test/spmd/test_mp_input_sharding.py
  test/spmd/test_fsdp_v2.py
  test/spmd/test_xla_distributed_checkpoint.py
  test/test_zero1.py
  test/test_fsdp_auto_wrap.py
  test/test_torch_distributed_fsdp_frozen_weight.py
  test/test_train_mp_mnist_fsdp_with_ckpt.py
  test/test_train_mp_mnist_zero1.py
  test/pjrt/test_runtime_multi_cpu.py
  test/test_mp_replication.py
  test/test_mp_all_gather.py
  test/test_mp_all_to_all.py
  test/test_mp_collective_permute.py
  test/test_mp_reduce_scatter.py
  test/test_mp_mesh_reduce.py
  test/test_mp_save.py
  test/test_mp_sync_batch_norm.py
  test/test_mp_rendezvous.py
  test/test_mp_early_exit.py
  test/test_train_mp_mnist.py
)
if [ $# -gt 0 ]; then files=("$@"); else files=("${default_files[@]}"); fi

# The environment upstream's run_tests.sh gives a file beyond the common one.
file_env() {
  case "$1" in
    test/debug_tool/test_pt_xla_debug.py)
      echo "PT_XLA_DEBUG=1 PT_XLA_DEBUG_FILE=$logs/pt_xla_debug.txt" ;;
    test/spmd/test_xla_sharded_tensor.py)  # run_test_multi_devices upstream
      echo "CPU_NUM_DEVICES=4" ;;
    test/spmd/test_fsdp_v2.py)  # upstream runs it on multi-device TPU hosts only
      echo "CPU_NUM_DEVICES=4" ;;
    test/test_train_mp_mnist_fsdp_with_ckpt.py | test/test_train_mp_mnist_zero1.py)
      # Not in upstream's CPU script; two replicas so the shards are real.
      echo "CPU_NUM_DEVICES=2" ;;
    # The multi-replica scripts: upstream's CPU job runs them with
    # CPU_NUM_DEVICES=1 (a TODO there: "fails due to TF issue"), where most
    # of them check nothing; 4 devices is what they are written for (its
    # TPU job runs them on every chip of the host).
    test/test_mp_early_exit.py) echo "" ;;  # torchrun: 2 processes x 1 device
    test/test_mp_*.py | test/test_train_mp_mnist.py)
      echo "CPU_NUM_DEVICES=4" ;;
    *) echo "" ;;
  esac
}

# Extra arguments upstream passes.
file_args() {
  case "$1" in
    test/test_operations.py | test/test_xla_graph_execution.py) echo "--verbosity=2" ;;
    test/spmd/test_train_spmd_linear_model.py) echo "--skip-gradient-checkpointing" ;;
    # Fake data, one epoch of few large batches (upstream's defaults train
    # 18 epochs on downloaded MNIST).
    test/test_train_mp_mnist_fsdp_with_ckpt.py)
      echo "--fake_data --num_epochs 1 --batch_size 2048 --use_nested_fsdp --flatten_parameters --ckpt_prefix $logs/mnist-fsdp/final_ckpt" ;;
    test/test_train_mp_mnist_zero1.py) echo "--fake_data --num_epochs 1 --batch_size 4096" ;;
    # As upstream's docs run it on CPU, one epoch; 15 steps per replica.
    test/test_train_mp_mnist.py) echo "--fake_data --num_epochs=1 --batch_size=1000" ;;
    *) echo "" ;;
  esac
}

# Parses a unittest log: prints "ran failures errors skipped".
counts_of() {
  "$py" - "$1" <<'EOF'
import re, sys
text = open(sys.argv[1], errors="replace").read()
ran = [int(m) for m in re.findall(r"^Ran (\d+) tests? in", text, re.M)]
fail = err = skip = 0
for m in re.finditer(r"^(?:OK|FAILED)(?: \((.*)\))?\s*$", text, re.M):
    for part in (m.group(1) or "").split(","):
        k, _, v = part.strip().partition("=")
        if not v.isdigit():
            continue
        if k == "failures": fail += int(v)
        elif k == "errors": err += int(v)
        elif k == "skipped": skip += int(v)
        elif k == "unexpected successes": fail += int(v)
print(sum(ran), fail, err, skip, len(ran))
EOF
}

printf "%-46s %6s %6s %6s %6s %6s  %s\n" FILE RAN PASS FAIL ERROR SKIP NOTE
t_ran=0 t_pass=0 t_fail=0 t_err=0 t_skip=0
for f in "${files[@]}"; do
  path="$checkout/$f"
  log="$logs/$(echo "$f" | tr '/' '_').log"
  note=""
  if [ ! -f "$path" ]; then
    printf "%-46s %6s %6s %6s %6s %6s  %s\n" "$f" 0 0 0 1 0 "missing"
    t_err=$((t_err + 1)); continue
  fi
  dir="$(dirname "$path")"
  base="$(basename "$path" .py)"
  env_extra="$(file_env "$f")"
  args="$(file_args "$f")"
  if [ "$f" = test/test_mp_early_exit.py ]; then
    # It exits unless torchrun started it (two processes, one device each).
    cmd=("$py" -m torch.distributed.run --nproc_per_node=2 "$path")
  elif grep -q "__main__" "$path"; then
    cmd=("$py" "$path")
  else
    cmd=("$py" -m unittest "$base")
  fi
  # shellcheck disable=SC2086
  (cd "$dir" && env PJRT_DEVICE=CPU CPU_NUM_DEVICES="$devices" XLA_DUMP_FATAL_STACK=1 \
     PYTORCH_TEST_WITH_SLOW=1 TORCH_TEST_DEVICES="$checkout/test/pytorch_test_base.py" \
     PYTHONPATH="$checkout/test${PYTHONPATH:+:$PYTHONPATH}" $env_extra \
     timeout -k 10 "$timeout_s" "${cmd[@]}" $args) >"$log" 2>&1
  rc=$?
  read -r ran fail err skip summaries < <(counts_of "$log")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    note="timeout after ${timeout_s}s"
  fi
  if [ "$summaries" -eq 0 ]; then
    # No unittest summary: a plain script (pass/fail by exit code) or a
    # file that died before finishing.
    ran=1
    if [ "$rc" -eq 0 ]; then fail=0 err=0; else err=1; fi
    # A multi-replica script that gates its checks on the device kind
    # prints why it checked nothing and exits 0: a skip, not a pass.
    gate="$(grep -m1 -o -E "is not a TPU device|is not a supported device|does not support replication" "$log")"
    if [ "$rc" -eq 0 ] && [ -n "$gate" ]; then
      skip=1; [ -z "$note" ] && note="skipped by the file (device $gate)"
    fi
    [ -z "$note" ] && note="no unittest summary, rc=$rc"
  elif [ "$rc" -ne 0 ] && [ $((fail + err)) -eq 0 ]; then
    err=1; ran=$((ran + 1)); [ -z "$note" ] && note="exit code $rc"
  fi
  # Class-level setup errors are counted without a test being "run".
  [ "$ran" -lt $((fail + err + skip)) ] && ran=$((fail + err + skip))
  pass=$((ran - fail - err - skip))
  [ "$pass" -lt 0 ] && pass=0
  printf "%-46s %6d %6d %6d %6d %6d  %s\n" "$f" "$ran" "$pass" "$fail" "$err" "$skip" "$note"
  t_ran=$((t_ran + ran)) t_pass=$((t_pass + pass)) t_fail=$((t_fail + fail))
  t_err=$((t_err + err)) t_skip=$((t_skip + skip))
done
printf "%-46s %6d %6d %6d %6d %6d\n" TOTAL "$t_ran" "$t_pass" "$t_fail" "$t_err" "$t_skip"
echo "logs: $logs"
