/* torchtpu._C bindings of partitioned SPMD execution (torchtpu/spmd_exec.h):
 *   spmd_set_partitioning(on), spmd_partitioning() -> bool
 *   spmd_set_virtual_device(on), spmd_virtual_device() -> bool: SPMD mode
 *       itself (deferred uploads, replicated executions)
 *   tensor_storage_layout(t) -> spec or None: the layout of t's shards
 *       (syncs t when pending; None when it is held as one buffer)
 *   tensor_result_layout(t) -> spec or None: the layout a synced value
 *       reports (its shards' layout; replicated for one buffer a cut
 *       wrote; None when pending or uploaded); never syncs
 *   tensor_shard_to_host(t, p, ptr, nbytes): partition p's padded shard
 *   tensor_load_shards(t, spec, [ptr, ...], shard_bytes): t's value
 *       becomes these shards, one per partition (device p holds shard p) */
#include "binding.h"

static PyObject *py_spmd_set_partitioning(PyObject *m, PyObject *arg) {
  (void)m;
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  tt_lazy_set_spmd_partitioning(on);
  Py_RETURN_NONE;
}

static PyObject *py_spmd_set_virtual_device(PyObject *m, PyObject *arg) {
  (void)m;
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  tt_lazy_set_virtual_device(on);
  Py_RETURN_NONE;
}

static PyObject *py_spmd_virtual_device(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyBool_FromLong(tt_lazy_virtual_device());
}

static PyObject *py_spmd_partitioning(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyBool_FromLong(tt_lazy_spmd_partitioning());
}

static PyObject *py_tensor_storage_layout(PyObject *m, PyObject *arg) {
  (void)m;
  tt_tensor_t *t;
  if (!tt_py_as_tensor(arg, &t)) return NULL;
  tt_sharding_t *s = NULL;
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS st = tt_tensor_storage_layout(t, &s);
  Py_END_ALLOW_THREADS if (st) return tt_py_raise_status(st);
  PyObject *r = tt_py_sharding_to_python(s);
  free(s);
  return r;
}

static PyObject *py_tensor_result_layout(PyObject *m, PyObject *arg) {
  (void)m;
  tt_tensor_t *t;
  if (!tt_py_as_tensor(arg, &t)) return NULL;
  tt_sharding_t *s = NULL;
  tt_status_t st = tt_tensor_result_layout(t, &s);
  if (st) return tt_py_raise_status(st);
  PyObject *r = tt_py_sharding_to_python(s);
  free(s);
  return r;
}

static PyObject *py_tensor_shard_to_host(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *to;
  int p;
  unsigned long long ptr;
  Py_ssize_t nbytes;
  tt_tensor_t *t;
  if (!PyArg_ParseTuple(args, "OiKn", &to, &p, &ptr, &nbytes) || !tt_py_as_tensor(to, &t))
    return NULL;
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS st = tt_tensor_shard_to_host(t, p, (void *)(uintptr_t)ptr, (size_t)nbytes);
  Py_END_ALLOW_THREADS if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_tensor_load_shards(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *to, *spec, *ptrs;
  Py_ssize_t nbytes;
  tt_tensor_t *t;
  if (!PyArg_ParseTuple(args, "OOOn", &to, &spec, &ptrs, &nbytes) || !tt_py_as_tensor(to, &t))
    return NULL;
  tt_sharding_t *s = NULL;
  if (!tt_py_sharding_from_python(spec, &s)) return NULL;
  PyObject *fast = s ? PySequence_Fast(ptrs, "shard pointers must be a sequence") : NULL;
  if (!fast) {
    if (!s) PyErr_SetString(PyExc_ValueError, "tensor_load_shards: a tiled spec is needed");
    free(s);
    return NULL;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n != s->num_devices) {
    PyErr_Format(PyExc_RuntimeError, "Expected %d shards (one per device of the sharding), got %zd",
                 (int)s->num_devices, n);
    Py_DECREF(fast);
    free(s);
    return NULL;
  }
  const void **hosts = calloc((size_t)n + 1, sizeof(*hosts));
  for (Py_ssize_t i = 0; hosts && i < n; ++i)
    hosts[i] = (const void *)(uintptr_t)PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(fast, i));
  Py_DECREF(fast);
  if (!hosts || PyErr_Occurred()) {
    free(hosts);
    free(s);
    return hosts ? NULL : PyErr_NoMemory();
  }
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS st = tt_tensor_load_shards(t, s, hosts, (size_t)nbytes);
  Py_END_ALLOW_THREADS free(hosts);
  free(s);
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

PyMethodDef tt_py_methods_spmd_exec[] = {
    {"spmd_set_partitioning", py_spmd_set_partitioning, METH_O,
     "spmd_set_partitioning(on): SPMD mode's partitioned execution on/off"},
    {"spmd_partitioning", py_spmd_partitioning, METH_NOARGS, "spmd_partitioning() -> bool"},
    {"spmd_set_virtual_device", py_spmd_set_virtual_device, METH_O,
     "spmd_set_virtual_device(on): SPMD mode's virtual device on/off"},
    {"spmd_virtual_device", py_spmd_virtual_device, METH_NOARGS,
     "spmd_virtual_device() -> bool"},
    {"tensor_storage_layout", py_tensor_storage_layout, METH_O,
     "tensor_storage_layout(t) -> spec of t's shards, or None"},
    {"tensor_result_layout", py_tensor_result_layout, METH_O,
     "tensor_result_layout(t) -> spec a synced value reports, or None"},
    {"tensor_shard_to_host", py_tensor_shard_to_host, METH_VARARGS,
     "tensor_shard_to_host(t, p, ptr, nbytes): partition p's shard"},
    {"tensor_load_shards", py_tensor_load_shards, METH_VARARGS,
     "tensor_load_shards(t, spec, [ptr, ...], shard_bytes)"},
    {NULL, NULL, 0, NULL},
};
