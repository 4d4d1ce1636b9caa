"""Run a snippet of Python in a child process (a fresh engine: environment
variables read at start take effect) and read back the JSON object its
last line of output prints."""
import json
import os
import subprocess
import sys


def run_json(code, *args, timeout=300, **env):
    e = dict(os.environ, PJRT_DEVICE="CPU")
    e.update(env)
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=e,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])
