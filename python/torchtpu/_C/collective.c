/* The collective layer's process-wide controls (torchtpu/collective.h):
 * the launcher sets the replica count around its replicas and aborts the
 * collectives when a replica fails, so its peers stop waiting. */
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

PyMethodDef tt_py_methods_collective[] = {
    {"collective_abort", py_collective_abort, METH_VARARGS,
     "collective_abort(reason): fail every waiting and later collective until a reset"},
    {"collective_reset", py_collective_reset, METH_NOARGS,
     "collective_reset(): end an abort, restart the sequence numbers"},
    {"collective_set_world_size", py_collective_set_world_size, METH_VARARGS,
     "collective_set_world_size(n): replicas of the current launch (1 outside)"},
    {"collective_world_size", py_collective_world_size, METH_NOARGS,
     "collective_world_size() -> replicas of the current launch"},
    {NULL, NULL, 0, NULL},
};
