"""Point-to-point transfers between replicas: xm.send / xm.recv (matched by
channel id) and the torch.distributed xla backend's send / recv (matched by
source rank, destination rank and tag). docs/collectives.md, "Send and
recv".

Contract: a key (a channel, or a (source, destination, tag) triple) is a
FIFO: the k-th send on a key is received by the k-th recv on it, whatever
replicas issue them. A send is buffered: it computes its value (syncing
what the value depends on), hands a copy to the key's mailbox and returns
at once, so a replica may send before its peer receives, or to itself. A
recv first syncs its replica's pending graph (so the collectives recorded
before it run, and peers blocked in them are released), then waits for the
matching send until TORCHTPU_COLLECTIVE_TIMEOUT_S, and returns a new
tensor on the output's device, with the output's shape and dtype. A send
whose shape or dtype differs from the receiving output fails the recv
with a RuntimeError naming both.

Where the data waits: inside one process (threads of a launch, or a
single replica), a mailbox in this module; in a job of several processes
(torchrun), the job's TCPStore, so a replica may send to any replica of
any process without knowing which one receives. An exception in a
replica of a launch (abort()) wakes the replicas waiting in a recv."""
import datetime
import threading
import time

import torch

_ABORTED = None  # the reason, between abort() and reset()
_cond = threading.Condition()
_boxes = {}  # key -> [sends issued, recvs issued, {k: payload}]
_local = threading.local()


def abort(reason):
    """Fails every waiting and later recv of this process until reset()."""
    global _ABORTED
    with _cond:
        if _ABORTED is None:
            _ABORTED = str(reason)
        _cond.notify_all()


def reset():
    """Forgets the mailboxes and ends an abort (a new launch)."""
    global _ABORTED
    with _cond:
        _ABORTED = None
        _boxes.clear()


def _timeout_s():
    from torchtpu import processes
    return processes.timeout_s()


def _pack(t):
    header = f"{str(t.dtype).replace('torch.', '')}|{','.join(map(str, t.shape))}".encode()
    return header + b"\n" + t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def _unpack(blob, output, what):
    header, _, data = blob.partition(b"\n")
    dtype_name, _, dims = header.decode().partition("|")
    shape = tuple(int(d) for d in dims.split(",") if d)
    want = str(output.dtype).replace("torch.", "")
    if dtype_name != want or shape != tuple(output.shape):
        raise RuntimeError(f"{what}: the send carried {dtype_name}{list(shape)} but the output "
                           f"is {want}{list(output.shape)}")
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
        torch.empty(0, dtype=torch.uint8)
    return flat.view(output.dtype).reshape(shape)


def _multi_process():
    from torchtpu import processes
    return processes.launched() and processes.count() > 1


def _job_store():
    """This thread's own connection to the job's store (a blocking wait
    must not hold a connection other threads use)."""
    store = getattr(_local, "store", None)
    if store is None:
        import torch.distributed as dist
        from torchtpu import processes
        store = dist.PrefixStore("torchtpu/p2p", processes.store_connection())
        _local.store = store
    return store


def _store_key(key):
    return "/".join(str(k) for k in key)


def _post(key, blob, store):
    if store is not None:
        name = _store_key(key)
        k = store.add(f"{name}/sent", 1) - 1
        store.set(f"{name}/{k}", blob)
        return
    with _cond:
        box = _boxes.setdefault(key, [0, 0, {}])
        box[2][box[0]] = blob
        box[0] += 1
        _cond.notify_all()


def _take(key, store, what):
    timeout = _timeout_s()
    if store is not None:
        name = _store_key(key)
        k = store.add(f"{name}/recv", 1) - 1
        slot = f"{name}/{k}"
        try:
            store.wait([slot], datetime.timedelta(seconds=timeout))
        except Exception as e:  # the store's own timeout / connection errors
            raise RuntimeError(f"{what} timed out after {timeout:g} s "
                               f"(TORCHTPU_COLLECTIVE_TIMEOUT_S) waiting for its send "
                               f"({type(e).__name__}: {e})") from None
        blob = store.get(slot)
        store.delete_key(slot)
        return blob
    deadline = time.monotonic() + timeout
    with _cond:
        box = _boxes.setdefault(key, [0, 0, {}])
        k = box[1]
        box[1] += 1
        while k not in box[2]:
            if _ABORTED is not None:
                raise RuntimeError(f"{what} failed: collectives aborted: {_ABORTED}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{what} timed out after {timeout:g} s "
                                   "(TORCHTPU_COLLECTIVE_TIMEOUT_S) waiting for its send")
            _cond.wait(left)
        return box[2].pop(k)


def _check_xla(t, what):
    if not isinstance(t, torch.Tensor) or t.device.type != "xla":
        raise TypeError(f"{what} expects a tensor on an xla device, got "
                        f"{getattr(t, 'device', type(t).__name__)}")


def send(value, key, what, store=None):
    """Posts value's data under key (see the contract); store: a c10d
    Store to use instead of this process's mailbox / the job's store."""
    _check_xla(value, what)
    if store is None and _multi_process():
        store = _job_store()
    # .cpu() runs what value depends on and waits for it.
    _post(key, _pack(value.detach().cpu()), store)
    return value


def recv(output, key, what, store=None):
    """The data of the send matching this recv on key, as a new tensor on
    output's device (see the contract)."""
    _check_xla(output, what)
    import torch_xla
    torch_xla.sync()
    if store is None and _multi_process():
        store = _job_store()
    data = _unpack(_take(key, store, what), output, what)
    result = data.to(output.device)
    if output.requires_grad and result.is_floating_point():
        result.requires_grad_(True)
    return result
