/* Compiled graphs: the in-memory cache, the persistent cache and tier-1
 * libraries. */
#include "binding.h"
#include "torchtpu/codegen.h"

static PyObject *py_cached_graphs(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyLong_FromLongLong(tt_lazy_cached_graphs());
}

static PyObject *py_persistent_cache_init(PyObject *m, PyObject *args) {
  (void)m;
  const char *path = NULL;
  int readonly = 0;
  if (!PyArg_ParseTuple(args, "z|p", &path, &readonly)) return NULL;
  tt_status_t st = tt_persistent_cache_init(path, readonly);
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_tier1_wait(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  Py_BEGIN_ALLOW_THREADS tt_tier1_wait_idle();
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

PyMethodDef tt_py_methods_cache[] = {
    {"persistent_cache_init", py_persistent_cache_init, METH_VARARGS,
     "persistent_cache_init(path, readonly=False)"},
    {"tier1_wait", py_tier1_wait, METH_NOARGS, "wait for background tier-1 compiles"},
    {"cached_graphs", py_cached_graphs, METH_NOARGS, ""},
    {NULL, NULL, 0, NULL},
};
