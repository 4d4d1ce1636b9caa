"""The CheckpointManager's directory layout and its crash-safe commit.

Contract (local file systems; every name below is inside the base path):
- `<step>/`          a committed checkpoint: torch.distributed.checkpoint's
                     files and the manager's record (MANAGER_METADATA_FILE).
- `.tmp-<step>/`     a save in progress (prepare_temp); never listed.
- `.old-<step>/`     a committed checkpoint being replaced by a new save of
                     the same step.
- `.del-<step>-<n>/` a checkpoint being deleted.
commit(base, step, record) writes the record into `.tmp-<step>`, fsyncs it
and the directory, moves an existing `<step>` aside to `.old-<step>`,
renames `.tmp-<step>` to `<step>` (the commit point: rename is atomic),
fsyncs the base and removes `.old-<step>`. delete(base, step) renames
`<step>` away before removing its files, so a checkpoint is listed whole
or not at all. recover(base) finishes what a killed process left: an
`.old-<step>` whose `<step>` is missing is renamed back (the kill came
before the commit point), every other temporary is removed. A process
killed at any moment therefore leaves each step either as it was or as
the new save wrote it.
_commit_hook, when set (tests), is called with the stage name
("written", "moved_aside", "renamed") inside commit.
"""
import os
import shutil
import uuid

MANAGER_METADATA_FILE = ".manager_metadata"

_commit_hook = None


def _hook(stage):
    if _commit_hook is not None:
        _commit_hook(stage)


def step_path(base, step):
    return os.path.join(base, str(step))


def temp_path(base, step):
    return os.path.join(base, f".tmp-{step}")


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prepare_temp(base, step):
    """An empty `.tmp-<step>` (a killed save's leftovers removed)."""
    path = temp_path(base, step)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def commit(base, step, record: bytes):
    tmp, final = temp_path(base, step), step_path(base, step)
    with open(os.path.join(tmp, MANAGER_METADATA_FILE), "wb") as f:
        f.write(record)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    _hook("written")
    old = os.path.join(base, f".old-{step}")
    if os.path.exists(final):
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
        _fsync_dir(base)
        _hook("moved_aside")
    os.rename(tmp, final)
    _fsync_dir(base)
    _hook("renamed")
    shutil.rmtree(old, ignore_errors=True)


def delete(base, step):
    path = step_path(base, step)
    if not os.path.exists(path):
        return
    doomed = os.path.join(base, f".del-{step}-{uuid.uuid4().hex[:8]}")
    os.rename(path, doomed)
    _fsync_dir(base)
    shutil.rmtree(doomed, ignore_errors=True)


def recover(base):
    for name in os.listdir(base):
        path = os.path.join(base, name)
        if name.startswith(".old-"):
            final = step_path(base, name[len(".old-"):])
            if not os.path.exists(final):
                os.rename(path, final)
                _fsync_dir(base)
            else:
                shutil.rmtree(path, ignore_errors=True)
        elif name.startswith((".tmp-", ".del-")):
            shutil.rmtree(path, ignore_errors=True)


def committed(base):
    """The names of the committed step directories."""
    return [n for n in os.listdir(base)
            if not n.startswith(".") and os.path.isdir(os.path.join(base, n))]
