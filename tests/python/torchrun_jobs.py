"""What the torchrun tests share: a free port for a job's master, the
environment a job inherits (without this process's own layout), and the
processes of a job still alive."""
import os
import socket

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_env(**extra):
    """os.environ without the variables that describe this process's own
    layout (torchrun's, PyTorch/XLA's, the engine's: an in-process launch of
    an earlier test may have set some), the project's python/ on
    PYTHONPATH, PJRT_DEVICE=CPU, then extra."""
    inherited = {k: v for k, v in os.environ.items()
                 if not k.startswith(("PJRT_", "XLA_", "TORCHTPU_", "TORCHELASTIC_"))
                 and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                               "MASTER_ADDR", "MASTER_PORT", "CPU_NUM_DEVICES")}
    return dict(inherited, PYTHONPATH=os.path.join(ROOT, "python"), PJRT_DEVICE="CPU", **extra)


def job_processes(tag):
    """Processes (pid list) whose command line holds tag: the job's agent
    and workers (the tag is an argument of the worker script)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if tag.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found
