"""Runs a test's script in a fresh interpreter with N virtual CPU devices
(SPMD mode is per process, so SPMD tests run their programs this way) and
returns the JSON the script printed on its last `RESULT ` line."""
import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_result_script(folder, name, code, devices=8, timeout=300):
    script = folder / f"{name}.py"
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices),
               PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("XLA_USE_SPMD", None)
    env.pop("TORCHTPU_SPMD_PARTITION", None)
    p = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, p.stdout + p.stderr
    return json.loads(line[-1][len("RESULT "):])
