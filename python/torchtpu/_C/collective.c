/* The collective layer's process-wide controls (torchtpu/collective.h):
 * the launcher sets the replica count around its replicas and aborts the
 * collectives when a replica fails, so its peers stop waiting; a
 * multi-process launch sets the process layout and runs the cross-process
 * transport thread (torchtpu.process_transport), which takes the leaders'
 * requests here. */
#include "binding.h"
#include "torchtpu/collective.h"

static PyObject *py_collective_abort(PyObject *m, PyObject *args) {
  (void)m;
  const char *reason;
  if (!PyArg_ParseTuple(args, "s", &reason)) return NULL;
  tt_collective_abort(reason);
  Py_RETURN_NONE;
}

static PyObject *py_collective_reset(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_collective_reset();
  Py_RETURN_NONE;
}

static PyObject *py_collective_set_world_size(PyObject *m, PyObject *args) {
  (void)m;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  tt_collective_set_world_size(n);
  Py_RETURN_NONE;
}

static PyObject *py_collective_world_size(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyLong_FromLong(tt_collective_world_size());
}

static PyObject *py_collective_set_process_layout(PyObject *m, PyObject *args) {
  (void)m;
  int index, count, local;
  if (!PyArg_ParseTuple(args, "iii", &index, &count, &local)) return NULL;
  tt_collective_set_process_layout(index, count, local);
  Py_RETURN_NONE;
}

static PyObject *py_collective_transport_attach(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_collective_transport_attach();
  Py_RETURN_NONE;
}

/* attach_direct(address): address of a tt_collective_transport_serve_fn
 * (the c10d extension's), which the leaders then call on their own threads. */
static PyObject *py_collective_transport_attach_direct(PyObject *m, PyObject *args) {
  (void)m;
  unsigned long long address;
  if (!PyArg_ParseTuple(args, "K", &address)) return NULL;
  tt_collective_transport_attach_direct((tt_collective_transport_serve_fn)(uintptr_t)address);
  Py_RETURN_NONE;
}

static PyObject *py_collective_transport_close(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_collective_transport_close();
  Py_RETURN_NONE;
}

/* The next request as a tuple (handle, op, ids, sig, desc, device, reduce,
 * dtype, send address, recv address, count, root process, xfers: the
 * permute's transfers flattened, TT_XP_XFER_LEN int64s each); None once
 * the transport is closed. Waits without the GIL. */
static PyObject *py_collective_transport_next(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_collective_transport_request_t *rq;
  Py_BEGIN_ALLOW_THREADS rq = tt_collective_transport_next();
  Py_END_ALLOW_THREADS
  if (!rq) Py_RETURN_NONE;
  PyObject *ids = PyTuple_New(rq->n), *sig = PyTuple_New(TT_XP_SIG_LEN);
  PyObject *xfers = PyTuple_New((Py_ssize_t)rq->num_xfers * TT_XP_XFER_LEN);
  if (!ids || !sig || !xfers) {
    Py_XDECREF(ids);
    Py_XDECREF(sig);
    Py_XDECREF(xfers);
    tt_collective_transport_done(rq, "out of memory (transport request)");
    return NULL;
  }
  for (int32_t i = 0; i < rq->n; ++i) PyTuple_SET_ITEM(ids, i, PyLong_FromLongLong(rq->ids[i]));
  for (int i = 0; i < TT_XP_SIG_LEN; ++i) PyTuple_SET_ITEM(sig, i, PyLong_FromLongLong(rq->sig[i]));
  for (Py_ssize_t i = 0; i < (Py_ssize_t)rq->num_xfers * TT_XP_XFER_LEN; ++i)
    PyTuple_SET_ITEM(xfers, i, PyLong_FromLongLong(rq->xfers[i]));
  return Py_BuildValue("(KiNNsiiiKKLiN)", (unsigned long long)(uintptr_t)rq, (int)rq->op, ids, sig,
                       rq->desc, (int)rq->device, (int)rq->reduce, (int)rq->dtype,
                       (unsigned long long)(uintptr_t)rq->send,
                       (unsigned long long)(uintptr_t)rq->recv, (long long)rq->count,
                       (int)rq->root_process, xfers);
}

static PyObject *py_collective_transport_done(PyObject *m, PyObject *args) {
  (void)m;
  unsigned long long handle;
  const char *error = NULL;
  if (!PyArg_ParseTuple(args, "Kz", &handle, &error)) return NULL;
  tt_collective_transport_done((tt_collective_transport_request_t *)(uintptr_t)handle, error);
  Py_RETURN_NONE;
}

PyMethodDef tt_py_methods_collective[] = {
    {"collective_abort", py_collective_abort, METH_VARARGS,
     "collective_abort(reason): fail every waiting and later collective until a reset"},
    {"collective_reset", py_collective_reset, METH_NOARGS,
     "collective_reset(): end an abort, restart the sequence numbers"},
    {"collective_set_world_size", py_collective_set_world_size, METH_VARARGS,
     "collective_set_world_size(n): replicas of the current launch (1 outside)"},
    {"collective_world_size", py_collective_world_size, METH_NOARGS,
     "collective_world_size() -> replicas of the current launch"},
    {"collective_set_process_layout", py_collective_set_process_layout, METH_VARARGS,
     "collective_set_process_layout(index, count, local_devices): this process's place"},
    {"collective_transport_attach", py_collective_transport_attach, METH_NOARGS,
     "collective_transport_attach(): a transport thread takes cross-process requests"},
    {"collective_transport_attach_direct", py_collective_transport_attach_direct, METH_VARARGS,
     "collective_transport_attach_direct(address): leaders call this serve function directly"},
    {"collective_transport_close", py_collective_transport_close, METH_NOARGS,
     "collective_transport_close(): wake the transport thread with None"},
    {"collective_transport_next", py_collective_transport_next, METH_NOARGS,
     "collective_transport_next() -> the next cross-process request, None once closed"},
    {"collective_transport_done", py_collective_transport_done, METH_VARARGS,
     "collective_transport_done(handle, error): complete a request (error None: success)"},
    {NULL, NULL, 0, NULL},
};
