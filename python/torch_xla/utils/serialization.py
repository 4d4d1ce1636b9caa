"""torch_xla.utils.serialization (xser): checkpoints in PyTorch/XLA's layout.

On disk, exactly as PyTorch/XLA writes and reads it:

  path                     torch.save() of the data with every xla tensor
                           replaced by TensorReference(tid)
  path.tensors/tensor_<tid>.pt
                           torch.save() of that tensor, moved to the CPU

save() streams: the xla tensors are synced as one graph, then copied to the
host and written one at a time, so host memory grows by about the largest
tensor, not the sum. load() returns CPU tensors (as PyTorch/XLA does) or,
with device=, moves each tensor there as soon as it is read.

Crash safety (beyond PyTorch/XLA, which deletes path.tensors before
writing): a save writes everything under temporary names beside the
checkpoint, fsyncs it, then writes a small commit record
(path.xser-commit) and renames the new files into place. A process killed
before the commit record exists leaves the previous checkpoint untouched; one
killed after it leaves a record that the next load() or save() finishes
("rolls forward"), so a load never sees a mix of the two. docs/checkpoints.md
describes the protocol.
"""
import contextlib
import copy
import errno
import json
import os
import pickle
import shutil
import uuid
import zipfile

import torch

import torch_xla

_COMMIT_FORMAT = "torchtpu-xser-commit"
_TMP = ".xser-tmp-"
_OLD = ".xser-old-"

# Called as _save_hook(phase, detail) at each step of a save, for tests that
# kill a save part-way (phases: "tensor" (detail: tid), "written",
# "committed", "old-moved", "tensors-swapped", "main-swapped", "done").
_save_hook = None


class TensorReference(object):
    """Stands for tensor_<tid>.pt in a checkpoint's main file."""

    def __init__(self, tid):
        self.tid = tid

    def __repr__(self):
        return f"TensorReference({self.tid})"


def _get_tensors_folder(path):
    return path + ".tensors"


def _get_tensor_file(path, tid):
    return os.path.join(path, "tensor_{}.pt".format(tid))


def _hook(phase, detail=None):
    if _save_hook is not None:
        _save_hook(phase, detail)


# ------------------------------------------------------------- traversal
def _is_xla_tensor(v):
    # PyTorch/XLA's selection: plain tensors on xla (Parameters are left to
    # torch.save, which handles xla tensors itself).
    return type(v) is torch.Tensor and v.device.type == "xla"


def _rewrite(value, select_fn, convert_fn, memo):
    """value with every x where select_fn(x) replaced by convert_fn(x),
    through dicts, lists, tuples (namedtuples too), sets and objects'
    attributes. Parts with nothing to replace are returned as they are;
    shared objects stay shared (one conversion per object)."""
    key = id(value)
    if key in memo:
        return memo[key]
    if select_fn(value):
        result = convert_fn(value)
        memo[key] = result
        return result
    if isinstance(value, (str, bytes, int, float, bool, type(None), torch.Tensor, type)):
        return value
    if isinstance(value, dict):
        items = [(k, _rewrite(v, select_fn, convert_fn, memo)) for k, v in value.items()]
        if all(n is value[k] for k, n in items):
            return value
        result = copy.copy(value)  # keeps the type and attributes (state_dict's _metadata)
        for k, n in items:
            result[k] = n
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = [_rewrite(x, select_fn, convert_fn, memo) for x in value]
        if all(n is o for n, o in zip(items, value)):
            return value
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            result = type(value)(*items)  # namedtuple
        elif isinstance(value, (list, set)) and type(value) not in (list, set):
            result = copy.copy(value)  # a subclass: keep its type and attributes
            result.clear()
            result.extend(items) if isinstance(value, list) else result.update(items)
        else:
            result = type(value)(items)
    elif hasattr(value, "__dict__") and not callable(value):
        attrs = {k: _rewrite(v, select_fn, convert_fn, memo) for k, v in vars(value).items()}
        if all(n is getattr(value, k) for k, n in attrs.items()):
            return value
        result = copy.copy(value)
        result.__dict__.update(attrs)
    else:
        return value
    memo[key] = result
    return result


def _collect_references(data):
    """(data with xla tensors replaced by TensorReference, the tensors)."""
    tensors = []

    def to_ref(t):
        tensors.append(t)
        return TensorReference(len(tensors) - 1)

    return _rewrite(data, _is_xla_tensor, to_ref, {}), tensors


def _sync_tensors(tensors):
    """Runs the pending work of tensors as one graph and waits for it."""
    if not tensors:
        return
    from torchtpu import _C, bridge
    _C.sync_tensors([bridge.handle_of(t) for t in tensors], True)


# ------------------------------------------------------------ file system
def _fsync_dir(d):
    fd = os.open(d or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_new_file(path, write_fn):
    """Creates path (it must not exist) with write_fn(path) and fsyncs it;
    removes it if anything fails. Writing by path lets torch.save stream
    storage bytes straight to the file (no Python bytes copy)."""
    if os.path.lexists(path):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
    try:
        write_fn(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def _write_bytes(data):
    def write(path):
        with open(path, "xb") as f:
            f.write(data)
    return write


@contextlib.contextmanager
def _dir_lock(d):
    """An exclusive flock on directory d: serialises commits and recovery
    of checkpoints in it between processes. Best effort (no-op where the
    file system has no flock)."""
    try:
        import fcntl
        fd = os.open(d or ".", os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _nonce():
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


def _pid_alive(pid):
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_temporaries(path):
    """Deletes temporaries of saves to path by processes that no longer
    exist (killed before their commit point)."""
    d, base = os.path.split(os.path.abspath(path))
    prefixes = (base + _TMP, base + ".tensors" + _TMP, base + ".tensors" + _OLD,
                base + ".xser-commit" + _TMP)
    for name in os.listdir(d):
        if not name.startswith(prefixes):
            continue
        tail = name.rsplit(_TMP if _TMP in name else _OLD, 1)[1]
        try:
            pid = int(tail.split("-", 1)[0])
        except ValueError:
            continue
        if _pid_alive(pid):
            continue
        full = os.path.join(d, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(full)


def _atomic_torch_save(obj, path):
    """torch.save(obj, path) that replaces path atomically: a temporary in
    the same directory, fsync, rename, fsync of the directory."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    _remove_stale_temporaries(path)
    tmp = path + _TMP + _nonce()
    _write_new_file(tmp, lambda p: torch.save(obj, p))
    try:
        _hook("written")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(d)
    _hook("done")


# ------------------------------------------------------------ commit record
def _commit_path(path):
    return path + ".xser-commit"


def _read_commit(path):
    with open(_commit_path(path)) as f:
        try:
            rec = json.load(f)
        except ValueError as e:
            raise RuntimeError(f"xser: commit record {_commit_path(path)} is unreadable ({e}); "
                               "it is written atomically, so something else changed it") from e
    if not isinstance(rec, dict) or rec.get("format") != _COMMIT_FORMAT or not all(
            isinstance(rec.get(k), str) and os.sep not in rec[k] for k in ("main", "tensors", "old")):
        raise RuntimeError(f"xser: {_commit_path(path)} is not a commit record of this library")
    return rec


def _roll_forward(path, rec):
    """Moves a committed save's files into place. Idempotent: safe to run
    again after being interrupted at any point. Directory lock held."""
    d = os.path.dirname(os.path.abspath(path))
    new_main = os.path.join(d, rec["main"])
    new_tensors = os.path.join(d, rec["tensors"])
    old_tensors = os.path.join(d, rec["old"])
    folder = _get_tensors_folder(path)
    if os.path.isdir(new_tensors):
        if os.path.lexists(folder):
            os.rename(folder, old_tensors)
            _hook("old-moved")
        os.rename(new_tensors, folder)
        _hook("tensors-swapped")
    if os.path.lexists(new_main):
        os.replace(new_main, path)
        _hook("main-swapped")
    _fsync_dir(d)
    os.unlink(_commit_path(path))
    _fsync_dir(d)
    if os.path.lexists(old_tensors):
        shutil.rmtree(old_tensors, ignore_errors=True)


def _recover(path):
    """Finishes a save of path that was committed but interrupted."""
    if not os.path.lexists(_commit_path(path)):
        return
    with _dir_lock(os.path.dirname(os.path.abspath(path))):
        if os.path.lexists(_commit_path(path)):
            _roll_forward(path, _read_commit(path))


# ------------------------------------------------------------ save / load
def save(data, path, master_only=True, global_master=False):
    """Saves the input data into a file.

    The saved data is transferred to PyTorch CPU device before being saved,
    so a following `torch.load()` of a tensor file will load CPU data. Views
    are not preserved: recreate them after loading.

    Args:
      data: The input data to be saved. Any nested combination of Python
        objects (list, tuples, sets, dicts, ...).
      path: The destination file for the data saving operation. If
        `master_only` is ``False`` the path must point to different
        destinations as otherwise all the writes from the same host will
        override each other.
      master_only (bool, optional): Whether only the master device should
        save the data. Default: True
      global_master (bool, optional): When ``master_only`` is ``True`` this
        flag controls whether every host's master (if ``global_master`` is
        ``False``) saves the content, or only the global master (ordinal 0).
        Default: False
    """
    import torch_xla.core.xla_model as xm
    from torchtpu import _C
    path = os.fspath(path)
    should_write_data = not master_only or xm.is_master_ordinal(local=not global_master)
    ref_data, tensors = _collect_references(data)
    _C.trace_begin("xser.save", "checkpoint", json.dumps({"tensors": len(tensors)}))
    try:
        _sync_tensors(tensors)
        if should_write_data:
            _write_checkpoint(path, ref_data, tensors)
    finally:
        _C.trace_end()


def _write_checkpoint(path, ref_data, tensors):
    d = os.path.dirname(os.path.abspath(path))
    _recover(path)
    _remove_stale_temporaries(path)
    nonce = _nonce()
    base = os.path.basename(path)
    rec = {"format": _COMMIT_FORMAT, "version": 1, "main": base + _TMP + nonce,
           "tensors": base + ".tensors" + _TMP + nonce, "old": base + ".tensors" + _OLD + nonce}
    new_main = os.path.join(d, rec["main"])
    new_tensors = os.path.join(d, rec["tensors"])
    os.mkdir(new_tensors)
    committed = False
    try:
        for tid, t in enumerate(tensors):
            cpu = t.cpu()  # the only host copy alive at a time
            _write_new_file(_get_tensor_file(new_tensors, tid), lambda p: torch.save(cpu, p))
            del cpu
            _hook("tensor", tid)
        _fsync_dir(new_tensors)
        _write_new_file(new_main, lambda p: torch.save(ref_data, p))
        _fsync_dir(d)
        _hook("written")
        with _dir_lock(d):
            commit = _commit_path(path)
            tmp = commit + _TMP + nonce
            _write_new_file(tmp, _write_bytes(json.dumps(rec).encode()))
            os.replace(tmp, commit)
            _fsync_dir(d)
            committed = True
            _hook("committed")
            _roll_forward(path, rec)
        _hook("done")
    except BaseException:
        if not committed:
            shutil.rmtree(new_tensors, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(new_main)
        raise


_ZIP_MAGIC = b"PK\x03\x04"


def _check_torch_file(path, what):
    """Raises a RuntimeError naming path when it cannot be a complete
    torch.save file (empty, truncated, or another format)."""
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        raise RuntimeError(f"xser.load: {what} {path} is empty (0 bytes): the save that wrote it "
                           "was interrupted or the copy is incomplete")
    if head == _ZIP_MAGIC:
        if not zipfile.is_zipfile(path):
            raise RuntimeError(f"xser.load: {what} {path} is truncated (its zip archive has no "
                               "central directory): the save that wrote it was interrupted or "
                               "the copy is incomplete")
    elif head[:1] != b"\x80":  # not torch's legacy pickle format either
        raise RuntimeError(f"xser.load: {what} {path} is not a torch.save/xser checkpoint "
                           f"(it starts with {head!r}, expected a zip archive)")


def _torch_load(path, what, weights_only):
    _check_torch_file(path, what)
    try:
        with torch.serialization.safe_globals([TensorReference]):
            return torch.load(path, map_location="cpu", weights_only=weights_only)
    except pickle.UnpicklingError as e:
        if "Weights only load failed" in str(e):
            raise  # torch's own message says what to allow or to pass weights_only=False
        raise RuntimeError(f"xser.load: {what} {path} is corrupt: {e}") from e
    except (RuntimeError, EOFError, KeyError, ValueError) as e:
        raise RuntimeError(f"xser.load: {what} {path} is corrupt or truncated: {e}") from e


def load(path, device=None, weights_only=True):
    """Loads data previously saved with the `save()` API.

    Args:
      path (str): The path passed to the `save()` API.
      device (optional): Where to put the loaded tensors. None (PyTorch/XLA's
        behaviour) returns CPU tensors; an xla device moves each tensor
        there as soon as it is read, so host memory stays bounded by the
        largest tensor.
      weights_only (bool): passed to torch.load for the main file (with
        TensorReference allowed). Set False for data holding arbitrary
        Python objects, from a trusted source only.
    Returns:
      The loaded data.
    """
    from torchtpu import _C
    path = os.fspath(path)
    _recover(path)
    _C.trace_begin("xser.load", "checkpoint", None)
    try:
        ref_data = _torch_load(path, "checkpoint", weights_only)
        folder = _get_tensors_folder(path)

        def convert(ref):
            tid = ref.__dict__.get("tid")
            if not isinstance(tid, int) or tid < 0:
                raise RuntimeError(f"xser.load: {path} holds a TensorReference with tid {tid!r}")
            f = _get_tensor_file(folder, tid)
            if not os.path.exists(f):
                raise RuntimeError(f"xser.load: {path} refers to tensor {tid} but {f} is missing")
            t = _torch_load(f, "tensor file", True)
            if not isinstance(t, torch.Tensor):
                raise RuntimeError(f"xser.load: tensor file {f} holds a {type(t).__name__}, "
                                   "not a tensor")
            return t if device is None else t.to(device)

        return _rewrite(ref_data, lambda v: type(v) is TensorReference, convert, {})
    finally:
        _C.trace_end()
