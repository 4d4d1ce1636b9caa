"""The cross-process transport of the collective layer: torch.distributed's
Gloo (docs/collectives.md, "Several processes").

Two implementations, chosen at start by TORCHTPU_PROCESS_TRANSPORT (c10d or
python; unset: c10d when the optional extension torchtpu._c10d_transport is
built, else python; c10d without the extension raises RuntimeError):

- c10d: the extension (python/torchtpu/_c10d_transport.cpp) serves each
  request on the leader's own thread, in C++, through c10d's Backend
  interface; this module only opens each group's ProcessGroupGloo the
  first time the extension asks (_DirectTransport.group) and words
  failures (_failure_text, _mismatch_text), so both implementations fail
  with the same messages.
- python: the rest of this contract.

kind() says which one runs ("c10d", "python"; None before start).

Contract: start(index, count, local_devices) attaches the transport to the
collective layer and starts a dispatcher thread. The device workers never
run Python: a process's leader for a collective queues a request in C
(src/runtime/collective_process.c) and blocks; the dispatcher takes it
(_C.collective_transport_next, without the GIL while it waits) and hands
it to the channel of its group, one thread and one Gloo process group per
group (the group's processes, ranked by process index), so collectives on
different groups never wait behind each other. A channel runs its
requests in order:

1. a header exchange (one Gloo all_gather): every leader's call (kind,
   reduce, dtype, count, layouts, root, pairs, members in its process) and
   its per-group sequence number. A difference fails every process with
   one message naming both sides: "collective mismatch across processes
   on group [0, 1]: device 1 (process 1) issued all_reduce(float32, 8,
   sum) #0 but device 0 (process 0) issued all_reduce(float32, 16, sum)
   #0".
2. the data, on tensors viewing the leader's buffers (no copy): Gloo
   all_reduce (in place), all_gather or broadcast (bytes); for
   reduce_scatter and all_to_all one Gloo alltoall_base of per-process
   chunks (each peer gets only its chunk; reduce_scatter then reduces the
   received chunks in process order, since Gloo's own reduce_scatter
   measured as an all_reduce's traffic); for collective_permute Gloo
   send/recv pairs, only for the pairs crossing processes; nothing for a
   barrier.

bytes_sent() counts, per op, the payload bytes this process's
reduce_scatter, all_to_all, collective_permute and all_gather requests
handed Gloo for other processes (tests check that the ops move only what
they need).

Every Gloo call is bounded by TORCHTPU_COLLECTIVE_TIMEOUT_S. A failure (a
peer gone, a deadline passed, a mismatch) completes the request with an
error naming the call, the group and what is known of the peers: a peer
process that died with an exception published it in the job's store first
(an exception hook installed by start), so its message is quoted. The
failure then aborts this process's collectives (C side)."""
import atexit
import ctypes
import datetime
import os
import queue
import struct
import sys
import threading
import traceback
import zlib

import torch

from torchtpu import processes

# tt_dtype_t (include/torchtpu/base.h) -> torch dtype.
_DTYPES = {
    0: torch.float32, 1: torch.float64, 2: torch.float16, 3: torch.bfloat16, 4: torch.int8,
    5: torch.uint8, 6: torch.int16, 7: torch.int32, 8: torch.int64, 9: torch.bool,
    10: torch.complex64,
}
# tt_reduce_op_t (include/torchtpu/kernels.h).
_SUM, _MEAN, _PROD, _MAX, _MIN, _ARGMAX, _ARGMIN, _ANY, _ALL = range(9)
# tt_collective_transport_op_t (include/torchtpu/collective.h).
(_ALL_REDUCE, _ALL_GATHER, _BROADCAST, _BARRIER, _REDUCE_SCATTER, _ALL_TO_ALL,
 _PERMUTE) = range(7)
_OP_NAMES = {_ALL_REDUCE: "all_reduce", _ALL_GATHER: "all_gather", _BROADCAST: "broadcast",
             _BARRIER: "barrier", _REDUCE_SCATTER: "reduce_scatter", _ALL_TO_ALL: "all_to_all",
             _PERMUTE: "collective_permute"}
_XFER_LEN = 5  # dir (0 send, 1 receive), peer position, tag, byte offset, bytes
_SIG_LEN = 11
_DESC_BYTES = 160

_state = None
_sent = {}
_requests = {}
_sent_lock = threading.Lock()


def _count_sent(op, nbytes):
    with _sent_lock:
        _sent[op] = _sent.get(op, 0) + int(nbytes)


def _count_request(op):
    with _sent_lock:
        _requests[op] = _requests.get(op, 0) + 1


def _merged(mine, index):
    """mine plus the C++ transport's counters (counters()[index])."""
    with _sent_lock:
        out = dict(mine)
    if isinstance(_state, _DirectTransport):
        for op, n in _state.shim.counters()[index].items():
            out[op] = out.get(op, 0) + n
    return out


def requests():
    """{op name: requests this process's transport served} (see the
    contract)."""
    return _merged(_requests, 0)


def bytes_sent():
    """{op name: payload bytes sent to other processes} (see the contract)."""
    return _merged(_sent, 1)


def _failed_key(process):
    return f"torchtpu/failed/{process}"


def _view(address, nbytes):
    """A uint8 tensor over nbytes at address (memory the leader owns and
    keeps until the request completes)."""
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    buf = (ctypes.c_uint8 * nbytes).from_address(address)
    return torch.frombuffer(buf, dtype=torch.uint8)


def _reduce_plan(reduce, dtype):
    """(Gloo ReduceOp, dtype Gloo reduces in) for the engine's reduction of
    dtype: 16-bit floats reduce in float32, int16 in int32 (wrapping sums
    and products agree once truncated back), bool as uint8, complex64 as
    float32 pairs."""
    import torch.distributed as dist
    R = dist.ReduceOp
    if dtype == torch.bool:
        op = R.MAX if reduce in (_SUM, _ANY, _MAX) else R.MIN
        return op, torch.uint8
    op = {_SUM: R.SUM, _PROD: R.PRODUCT, _MAX: R.MAX, _MIN: R.MIN, _ALL: R.BAND,
          _ANY: R.BOR}.get(reduce)
    if op is None:
        raise RuntimeError(f"reduction {reduce} has no cross-process form")
    if dtype in (torch.float16, torch.bfloat16):
        return op, torch.float32
    if dtype == torch.int16:
        return op, torch.int32
    if dtype == torch.complex64:
        return op, torch.float32
    return op, dtype


def _reduce_chunks(reduce, dtype, parts, out):
    """out = the reduction of parts' rows (one per process, in process
    order), in the dtype _reduce_plan picks (16-bit floats in float32,
    rounded once)."""
    if dtype == torch.bool:
        out.copy_(parts.all(0) if reduce in (_PROD, _MIN, _ALL) else parts.any(0))
        return
    if reduce not in (_SUM, _PROD, _MAX, _MIN, _ALL, _ANY):
        raise RuntimeError(f"reduction {reduce} has no cross-process form")
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    acc = parts[0].to(wide).clone()
    step = {_SUM: torch.add, _PROD: torch.mul, _MAX: torch.maximum, _MIN: torch.minimum,
            _ALL: torch.bitwise_and, _ANY: torch.bitwise_or}[reduce]
    for row in parts[1:]:
        acc = step(acc, row.to(wide))
    out.copy_(acc.to(dtype))


def _group_text(ids):
    return "[" + ", ".join(map(str, ids)) + "]"


def _failure_text(transport, ids, processes, desc, seq, text):
    """The message of a failed Gloo call whose error reads text: the call,
    the group, and what the store says of the peers."""
    peers = []
    for p in processes:
        if p == transport.index:
            continue
        try:
            key = _failed_key(p)
            if transport.store.check([key]):
                peers.append(f"process {p} failed: {transport.store.get(key).decode()}")
        except Exception:
            pass
    lowered = text.lower()
    if peers:
        cause = "; ".join(peers)
    elif "timeout" in lowered or "timed out" in lowered:
        others = [p for p in processes if p != transport.index]
        cause = (f"timed out after {transport.timeout_s:g} s "
                 f"(TORCHTPU_COLLECTIVE_TIMEOUT_S) waiting for process(es) "
                 f"{', '.join(map(str, others))}")
    else:
        cause = "a peer process is gone or unreachable"
    return (f"{desc} #{seq} on group {_group_text(ids)} across processes "
            f"{processes} failed: {cause} (gloo: {text})")


def _mismatch_text(ids, h, first):
    """The message of two leaders' headers (lists of int64: sig, sequence
    number, device, process, description bytes) that differ: h's call but
    first's call."""
    n = _SIG_LEN + 3

    def name(x):
        raw = struct.pack(f"<{len(x) - n}q", *x[n:])
        text = raw.rstrip(b"\0").decode(errors="replace")
        return f"device {x[_SIG_LEN + 1]} (process {x[_SIG_LEN + 2]}) issued {text} #{x[_SIG_LEN]}"

    extra = ""
    if name(h).split(" issued ")[1] == name(first).split(" issued ")[1]:
        extra = (f" (with {h[_SIG_LEN - 1]} and {first[_SIG_LEN - 1]} "
                 f"group members in their processes, or a different layout or pairs)")
    return (f"collective mismatch across processes on group {_group_text(ids)}: "
            f"{name(h)} but {name(first)}{extra}")


def _processes_of(ids, local_devices):
    return sorted({i // local_devices for i in ids})


def _open_group(transport, ids, rank, count):
    """A new ProcessGroupGloo of the processes of group ids (this process
    at rank, of count), over its own connection to the job's store, with
    TORCHTPU_COLLECTIVE_TIMEOUT_S as Gloo's timeout."""
    import torch.distributed as dist
    key = ",".join(map(str, ids))
    store = dist.PrefixStore(f"torchtpu/group/{zlib.crc32(key.encode()):x}/{len(key)}",
                             processes.store_connection(transport.timeout))
    return dist.ProcessGroupGloo(store, rank, count, transport.timeout)


class _Channel:
    """One group's Gloo process group and the thread running its requests."""

    def __init__(self, transport, ids):
        self.transport = transport
        self.ids = ids
        L = transport.local_devices
        self.processes = _processes_of(ids, L)
        self.rank = self.processes.index(transport.index)
        self.seq = 0
        self.pg = None
        self.connect_done = threading.Event()  # the first connect attempt ended
        self.queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name=f"torchtpu-transport-{ids[:4]}",
                                       daemon=True)
        self.thread.start()

    def _connect(self):
        if self.pg is None:
            self.pg = _open_group(self.transport, self.ids, self.rank, len(self.processes))
        return self.pg

    def _run(self):
        from torchtpu import _C
        while True:
            rq = self.queue.get()
            if rq is None:
                return
            if rq == ("connect",):  # open the Gloo group ahead of the first request
                try:
                    self._connect()
                except Exception:
                    pass  # the first request reports it
                finally:
                    self.connect_done.set()
                continue
            handle = rq[0]
            try:
                error = self._serve(rq)
            except BaseException as e:  # the leader must always be released
                error = f"cross-process transport failed: {type(e).__name__}: {e}"
                traceback.print_exc()
            _C.collective_transport_done(handle, error)

    def _failure(self, desc, seq, exc):
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return _failure_text(self.transport, self.ids, self.processes, desc, seq, text)

    def _serve(self, rq):
        import torch.distributed as dist
        (handle, op, ids, sig, desc, device, reduce, dtype_code, send, recv, count,
         root_process, xfers) = rq
        seq = self.seq
        self.seq += 1
        try:
            pg = self._connect()
        except Exception as e:
            return self._failure(desc, seq, e)
        # 1. The header: every leader's call, checked against process 0's.
        raw = desc.encode()[:_DESC_BYTES].ljust(_DESC_BYTES, b"\0")
        header = torch.tensor(list(sig) + [seq, device, self.transport.index], dtype=torch.int64)
        header = torch.cat([header, torch.frombuffer(bytearray(raw), dtype=torch.int64)])
        headers = [torch.empty_like(header) for _ in self.processes]
        try:
            pg.allgather([headers], [header]).wait()
        except Exception as e:
            return self._failure(desc, seq, e)
        first = headers[0].tolist()
        for h in headers[1:]:
            h = h.tolist()
            if h[:_SIG_LEN + 1] != first[:_SIG_LEN + 1]:
                return _mismatch_text(self.ids, h, first)
        # 2. The data.
        _count_request(_OP_NAMES[op])
        dtype = _DTYPES[dtype_code]
        esize = torch.empty((), dtype=dtype).element_size()
        try:
            if op == _ALL_REDUCE:
                self._all_reduce(pg, reduce, dtype, send, recv, count, esize)
            elif op == _ALL_GATHER:
                out = _view(recv, count * esize * len(self.processes))
                parts = list(out.chunk(len(self.processes))) if count * esize else []
                if parts:
                    pg.allgather([parts], [_view(send, count * esize)]).wait()
                    _count_sent("all_gather", (len(self.processes) - 1) * count * esize)
            elif op in (_REDUCE_SCATTER, _ALL_TO_ALL):
                self._exchange(pg, op, reduce, dtype, send, recv, count, esize)
            elif op == _PERMUTE:
                self._permute(pg, send, recv, xfers)
            elif op == _BROADCAST:
                if count * esize:
                    t = _view(recv, count * esize)
                    if send != recv:
                        t.copy_(_view(send, count * esize))
                    opts = dist.BroadcastOptions()
                    opts.rootRank = self.processes.index(root_process)
                    opts.rootTensor = 0
                    pg.broadcast([t], opts).wait()
        except Exception as e:
            return self._failure(desc, seq, e)
        return None

    def _exchange(self, pg, op, reduce, dtype, send, recv, count, esize):
        """reduce_scatter / all_to_all: one alltoall_base of count-element
        chunks, one per process (see the contract)."""
        P = len(self.processes)
        nbytes = count * esize
        if nbytes == 0:
            return
        src = _view(send, P * nbytes)
        if op == _ALL_TO_ALL:
            pg.alltoall_base(_view(recv, P * nbytes), src, [], []).wait()
            _count_sent("all_to_all", (P - 1) * nbytes)
            return
        parts = torch.empty(P * nbytes, dtype=torch.uint8)
        pg.alltoall_base(parts, src, [], []).wait()
        _count_sent("reduce_scatter", (P - 1) * nbytes)
        _reduce_chunks(reduce, dtype, parts.view(dtype).view(P, count),
                       _view(recv, nbytes).view(dtype))

    def _permute(self, pg, send, recv, xfers):
        """collective_permute: every transfer posted at once (Gloo's send
        and recv do not block), then waited for."""
        works = []
        for i in range(0, len(xfers), _XFER_LEN):
            direction, peer, tag, offset, nbytes = xfers[i:i + _XFER_LEN]
            if nbytes == 0:
                continue
            if direction == 0:
                works.append(pg.send([_view(send + offset, nbytes)], peer, tag))
                _count_sent("collective_permute", nbytes)
            else:
                works.append(pg.recv([_view(recv + offset, nbytes)], peer, tag))
        for w in works:
            w.wait(self.transport.timeout)

    def _all_reduce(self, pg, reduce, dtype, send, recv, count, esize):
        import torch.distributed as dist
        nbytes = count * esize
        if nbytes == 0:
            return
        out = _view(recv, nbytes)
        if send != recv:
            out.copy_(_view(send, nbytes))
        typed = out.view(dtype)
        op, wire = _reduce_plan(reduce, dtype)
        if dtype == torch.complex64:
            work = typed.view(torch.float32)
        elif wire != dtype:
            work = typed.view(torch.uint8) if dtype == torch.bool else typed.to(wire)
        else:
            work = typed
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        pg.allreduce([work], opts).wait()
        if wire != dtype and dtype not in (torch.complex64, torch.bool):
            typed.copy_(work.to(dtype))


class _TransportBase:
    """What both transports hold: this process's place in the job, the
    deadline, the job's store once its thread has opened it (or why not),
    and the thread that runs `run` (started by start() or attach())."""

    def __init__(self, index, count, local_devices, run):
        self.index = index
        self.count = count
        self.local_devices = local_devices
        self.timeout_s = processes.timeout_s()
        self.timeout = datetime.timedelta(seconds=self.timeout_s)
        self.store = None
        self.startup_error = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=run, name="torchtpu-transport", daemon=True)


class _Transport(_TransportBase):
    """The Python transport: a dispatch thread takes the engine's requests
    and hands each to the channel (thread) of its group."""

    def __init__(self, index, count, local_devices):
        super().__init__(index, count, local_devices, self._dispatch)
        self.channels = {}

    def _dispatch(self):
        from torchtpu import _C, processes
        try:
            self.store = processes.store(self.timeout)
            # The group of every replica, connected now: a peer that dies
            # before the first collective then breaks a live connection.
            world = tuple(range(self.count * self.local_devices))
            self.channels[world] = _Channel(self, world)
            self.channels[world].queue.put(("connect",))
        except Exception as e:
            self.startup_error = f"{type(e).__name__}: {e}"
        self.ready.set()
        while True:
            rq = _C.collective_transport_next()
            if rq is None:
                return
            if self.store is None:
                _C.collective_transport_done(
                    rq[0], f"{rq[4]} across processes: the transport could not start: "
                    f"{self.startup_error}")
                continue
            ids = tuple(rq[2])
            channel = self.channels.get(ids)
            if channel is None:
                channel = self.channels[ids] = _Channel(self, ids)
            channel.queue.put(rq)


class _DirectTransport(_TransportBase):
    """The C++ transport (torchtpu._c10d_transport, see its contract): the
    leaders call it on their own threads; this object only opens the Gloo
    groups it asks for and words its failures."""

    def __init__(self, shim, index, count, local_devices):
        super().__init__(index, count, local_devices, self._open)
        self.shim = shim
        self.groups = {}  # ids -> [lock, (pg, rank, processes) once open]
        self.groups_lock = threading.Lock()

    def _open(self):
        try:
            self.store = processes.store(self.timeout)
        except Exception as e:
            self.startup_error = f"{type(e).__name__}: {e}"
        self.ready.set()
        if self.store is not None:
            # The group of every replica, connected now: a peer that dies
            # before the first collective then breaks a live connection.
            self.group(tuple(range(self.count * self.local_devices)))

    def group(self, ids):
        """(ProcessGroupGloo, rank, processes) of group ids, opened once;
        the error's text if it cannot be opened (the shim calls it, under
        the GIL, the first time a leader uses the group)."""
        self.ready.wait()
        if self.store is None:
            return f"the transport could not start: {self.startup_error}"
        ids = tuple(ids)
        with self.groups_lock:
            entry = self.groups.setdefault(ids, [threading.Lock(), None])
        with entry[0]:
            if entry[1] is None:
                procs = _processes_of(ids, self.local_devices)
                rank = procs.index(self.index)
                try:
                    entry[1] = (_open_group(self, ids, rank, len(procs)), rank, procs)
                except Exception as e:
                    return str(e).strip() or type(e).__name__
        return entry[1]

    def failure(self, ids, desc, seq, text):
        if self.store is None:
            return f"{desc} across processes: the transport could not start: {self.startup_error}"
        text = text.strip().splitlines()[0] if text.strip() else "error"
        return _failure_text(self, ids, _processes_of(ids, self.local_devices), desc, max(seq, 0),
                             text)

    def attach(self):
        from torchtpu import _C
        serve = self.shim.install(self.group, self.failure, _mismatch_text, float(self.timeout_s))
        _C.collective_transport_attach_direct(serve)
        self.thread.start()


def _shim():
    """torchtpu._c10d_transport when TORCHTPU_PROCESS_TRANSPORT selects it
    (c10d, or unset and the extension is built), else None (python)."""
    choice = os.environ.get("TORCHTPU_PROCESS_TRANSPORT", "").strip().lower()
    if choice not in ("", "c10d", "python"):
        raise ValueError(f"TORCHTPU_PROCESS_TRANSPORT must be c10d or python, got {choice!r}")
    if choice == "python":
        return None
    try:
        from torchtpu import _c10d_transport
    except ImportError as e:
        if choice == "c10d":
            raise RuntimeError("TORCHTPU_PROCESS_TRANSPORT=c10d, but the extension "
                               f"torchtpu._c10d_transport is not available: {e}") from e
        return None
    return _c10d_transport


def kind():
    """The running transport: "c10d", "python", or None before start."""
    if _state is None:
        return None
    return "c10d" if isinstance(_state, _DirectTransport) else "python"


def _publish_failure(exc_type, exc, tb):
    """Writes this process's uncaught exception to the job's store, so the
    peers' failing collectives can name it."""
    if _state is None or _state.store is None:
        return
    try:
        _state.store.set(_failed_key(_state.index), f"{exc_type.__name__}: {exc}")
    except Exception:
        pass


def start(index, count, local_devices):
    """See the contract; once per process."""
    global _state
    from torchtpu import _C
    if _state is not None:
        return
    shim = _shim()
    if shim is not None:
        _state = _DirectTransport(shim, index, count, local_devices)
    else:
        _state = _Transport(index, count, local_devices)
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        _publish_failure(exc_type, exc, tb)
        previous(exc_type, exc, tb)

    sys.excepthook = hook
    atexit.register(_finish_connect)
    if shim is not None:
        _state.attach()
    else:
        _C.collective_transport_attach()
        _state.thread.start()


# How long a process that exits leaves its eager connect to finish.
_EXIT_CONNECT_WAIT_S = 30.0


def _finish_connect():
    """At exit: lets the eager connect of the job's group end first. Gloo
    cannot be torn down while a thread is inside its connect (the process
    aborts: "terminate called without an active exception"), which a
    process that exits before its first collective would otherwise hit.
    The peers exit or connect too, so the wait is short; it is bounded for
    a peer that is already gone."""
    state = _state
    if state is None:
        return
    if isinstance(state, _DirectTransport):  # its opening thread ends after the connect
        if state.thread.is_alive():
            state.thread.join(min(_EXIT_CONNECT_WAIT_S, state.timeout_s))
        return
    if not state.ready.wait(_EXIT_CONNECT_WAIT_S):
        return
    world = state.channels.get(tuple(range(state.count * state.local_devices)))
    if world is not None:  # the one group connected eagerly (_dispatch)
        world.connect_done.wait(min(_EXIT_CONNECT_WAIT_S, state.timeout_s))
    _stop_channels(state)


def _stop_channels(state, budget_s=2.0):
    """Python transport, at exit, before the interpreter finalizes: lets
    each channel thread finish its request and end. A daemon thread still
    inside a Gloo call when the interpreter finalizes is ended by
    pthread_exit in C++ frames, which aborts the process as above.
    Bounded: a channel stuck on a peer is left."""
    import time
    channels = list(state.channels.values())
    for channel in channels:
        channel.queue.put(None)
    end = time.monotonic() + budget_s
    for channel in channels:
        channel.thread.join(max(0.0, end - time.monotonic()))
    # Close the Gloo groups of the channels that ended while the interpreter
    # is whole (as destroy_process_group would), not during finalization.
    for channel in channels:
        if not channel.thread.is_alive():
            channel.pg = None


def publish_failure(exc):
    """Records exc as this process's failure (the launcher calls it when a
    replica thread raises)."""
    _publish_failure(type(exc), exc, None)
