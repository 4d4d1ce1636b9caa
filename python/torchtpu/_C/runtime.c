/* The runtime: devices, syncs and waits, memory statistics, the engine's
 * configuration. */
#include "binding.h"

static PyObject *py_init(PyObject *m, PyObject *args) {
  (void)m;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  tt_status_t st = tt_runtime_init(n);
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_device_count(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyLong_FromLong(tt_runtime_device_count());
}

static PyObject *py_sync(PyObject *m, PyObject *args) {
  (void)m;
  int device = -1, wait = 0;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "|ipz", &device, &wait, &name)) return NULL;
  tt_status_t st;
  int dbg = tt_py_debug_call_begin();
  Py_BEGIN_ALLOW_THREADS st = tt_lazy_sync(device, wait, name);
  Py_END_ALLOW_THREADS tt_py_debug_call_end(dbg);
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_sync_tensors(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *seq;
  int wait = 0;
  if (!PyArg_ParseTuple(args, "O|p", &seq, &wait)) return NULL;
  tt_tensor_t **ts = NULL;
  Py_ssize_t n = 0;
  if (!tt_py_tensor_array(seq, &ts, &n)) return NULL;
  tt_status_t st;
  int dbg = tt_py_debug_call_begin();
  Py_BEGIN_ALLOW_THREADS st = tt_lazy_sync_tensors(ts, (int32_t)n, wait);
  Py_END_ALLOW_THREADS tt_py_debug_call_end(dbg);
  PyMem_Free(ts);
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_wait(PyObject *m, PyObject *args) {
  (void)m;
  int device = -1;
  if (!PyArg_ParseTuple(args, "|i", &device)) return NULL;
  Py_BEGIN_ALLOW_THREADS tt_runtime_wait(device);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *py_memory_stats(PyObject *m, PyObject *args) {
  (void)m;
  int device;
  if (!PyArg_ParseTuple(args, "i", &device)) return NULL;
  int64_t in_use = 0, peak = 0;
  tt_runtime_memory_stats(device, &in_use, &peak);
  return Py_BuildValue("(LL)", (long long)in_use, (long long)peak);
}

static PyObject *py_config_reload(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_config_reload();
  Py_RETURN_NONE;
}

/* set_eager_mode(bool): the engine's eager setting (runtime.h), which picks
 * the Eager* metrics for compiles and executions. */
static PyObject *py_set_eager_mode(PyObject *m, PyObject *args) {
  (void)m;
  int on = 0;
  if (!PyArg_ParseTuple(args, "p", &on)) return NULL;
  tt_set_eager_mode(on);
  Py_RETURN_NONE;
}

static PyObject *py_eager_mode(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyBool_FromLong(tt_eager_mode());
}

PyMethodDef tt_py_methods_runtime[] = {
    {"init", py_init, METH_VARARGS, "init(num_devices)"},
    {"device_count", py_device_count, METH_NOARGS, "number of devices"},
    {"sync", py_sync, METH_VARARGS, "sync(device=-1, wait=False, name=None)"},
    {"sync_tensors", py_sync_tensors, METH_VARARGS, "sync_tensors(tensors, wait=False)"},
    {"wait", py_wait, METH_VARARGS, "wait(device=-1)"},
    {"memory_stats", py_memory_stats, METH_VARARGS, "memory_stats(device) -> (in_use, peak)"},
    {"set_eager_mode", py_set_eager_mode, METH_VARARGS,
     "set_eager_mode(bool): compiles/executions sampled as eager ops"},
    {"eager_mode", py_eager_mode, METH_NOARGS, "the engine's eager setting"},
    {"config_reload", py_config_reload, METH_NOARGS, "re-read the engine's environment settings"},
    {NULL, NULL, 0, NULL},
};
