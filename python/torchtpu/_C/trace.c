/* The trace recorder: profiler spans as Chrome trace JSON. */
#include "binding.h"
#include "torchtpu/trace.h"

static PyObject *py_trace_start(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_status_t st = tt_trace_start();
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_trace_stop(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_status_t st = tt_trace_stop();
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_trace_active(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyBool_FromLong(tt_trace_active());
}

/* trace_begin(name, cat="user", args_json=None) */
static PyObject *py_trace_begin(PyObject *m, PyObject *args) {
  (void)m;
  const char *name, *cat = "user", *json = NULL;
  if (!PyArg_ParseTuple(args, "s|sz", &name, &cat, &json)) return NULL;
  tt_trace_begin(name, cat, json);
  Py_RETURN_NONE;
}

static PyObject *py_trace_end(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_trace_end();
  Py_RETURN_NONE;
}

static PyObject *py_trace_set_thread_name(PyObject *m, PyObject *args) {
  (void)m;
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  tt_trace_set_thread_name(name);
  Py_RETURN_NONE;
}

static PyObject *py_trace_json(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  char *json = NULL;
  tt_status_t st = tt_trace_to_json(&json);
  if (st) return tt_py_raise_status(st);
  PyObject *r = PyUnicode_FromString(json);
  free(json);
  return r;
}

static PyObject *py_trace_write(PyObject *m, PyObject *args) {
  (void)m;
  const char *path;
  if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS st = tt_trace_write_json(path);
  Py_END_ALLOW_THREADS if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

PyMethodDef tt_py_methods_trace[] = {
    {"trace_start", py_trace_start, METH_NOARGS, "start recording trace spans"},
    {"trace_stop", py_trace_stop, METH_NOARGS, "stop recording trace spans"},
    {"trace_active", py_trace_active, METH_NOARGS, "True while recording"},
    {"trace_begin", py_trace_begin, METH_VARARGS, "trace_begin(name, cat='user', args_json=None)"},
    {"trace_end", py_trace_end, METH_NOARGS, "close this thread's innermost span"},
    {"trace_set_thread_name", py_trace_set_thread_name, METH_VARARGS, "name this thread"},
    {"trace_json", py_trace_json, METH_NOARGS, "the recorded spans as Chrome trace JSON"},
    {"trace_write", py_trace_write, METH_VARARGS, "trace_write(path): atomic JSON write"},
    {NULL, NULL, 0, NULL},
};
