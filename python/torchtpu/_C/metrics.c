/* Counters and metrics (torch_xla.debug.metrics). */
#include "binding.h"

static PyObject *lines_to_list(char *text) {
  PyObject *list = PyList_New(0);
  if (!list || !text) {
    free(text);
    return list;
  }
  for (char *p = text; *p;) {
    char *e = strchr(p, '\n');
    if (e) *e = 0;
    PyObject *s = PyUnicode_FromString(p);
    if (!s || PyList_Append(list, s)) {
      Py_XDECREF(s);
      Py_DECREF(list);
      free(text);
      return NULL;
    }
    Py_DECREF(s);
    if (!e) break;
    p = e + 1;
  }
  free(text);
  return list;
}

static PyObject *py_counter_add(PyObject *m, PyObject *args) {
  (void)m;
  const char *name;
  long long delta = 1;
  if (!PyArg_ParseTuple(args, "s|L", &name, &delta)) return NULL;
  tt_counter_add(name, delta);
  Py_RETURN_NONE;
}

static PyObject *py_counter_value(PyObject *m, PyObject *args) {
  (void)m;
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  int64_t v = 0;
  if (!tt_counter_lookup(name, &v)) Py_RETURN_NONE;
  return PyLong_FromLongLong(v);
}

static PyObject *py_metric_add(PyObject *m, PyObject *args) {
  (void)m;
  const char *name;
  int unit;
  double value;
  if (!PyArg_ParseTuple(args, "sid", &name, &unit, &value)) return NULL;
  tt_metric_add(name, (tt_metric_unit_t)unit, value);
  Py_RETURN_NONE;
}

static PyObject *py_counter_names(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return lines_to_list(tt_counter_names());
}

static PyObject *py_metric_names(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return lines_to_list(tt_metric_names());
}

static PyObject *py_metric_data(PyObject *m, PyObject *args) {
  (void)m;
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return NULL;
  enum { MAX = 1024 };
  int64_t *ts = PyMem_Malloc(sizeof(int64_t) * MAX);
  double *vs = PyMem_Malloc(sizeof(double) * MAX);
  if (!ts || !vs) {
    PyMem_Free(ts);
    PyMem_Free(vs);
    return PyErr_NoMemory();
  }
  int64_t total = 0, n = 0;
  double acc = 0;
  PyObject *r = NULL;
  if (!tt_metric_data(name, &total, &acc, &n, ts, vs, MAX)) {
    r = Py_None;
    Py_INCREF(r);
  } else {
    PyObject *samples = PyList_New((Py_ssize_t)n);
    for (int64_t i = 0; samples && i < n; ++i)
      PyList_SET_ITEM(samples, i, Py_BuildValue("(Ld)", (long long)ts[i], vs[i]));
    if (samples) r = Py_BuildValue("(LdN)", (long long)total, acc, samples);
  }
  PyMem_Free(ts);
  PyMem_Free(vs);
  return r;
}

static PyObject *py_metrics_report(PyObject *m, PyObject *args) {
  (void)m;
  const char *names = NULL;
  if (!PyArg_ParseTuple(args, "|z", &names)) return NULL;
  char *text = tt_metrics_report(names);
  PyObject *r = PyUnicode_FromString(text ? text : "");
  free(text);
  return r;
}

static PyObject *py_clear_counters(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_counters_clear();
  Py_RETURN_NONE;
}

static PyObject *py_clear_metrics(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_metrics_clear();
  tt_lazy_forget_alias_samples();
  Py_RETURN_NONE;
}

PyMethodDef tt_py_methods_metrics[] = {
    {"counter_add", py_counter_add, METH_VARARGS, "counter_add(name, delta=1)"},
    {"counter_value", py_counter_value, METH_VARARGS, "counter_value(name)"},
    {"metric_add", py_metric_add, METH_VARARGS, "metric_add(name, unit, value)"},
    {"counter_names", py_counter_names, METH_NOARGS, "counter names"},
    {"metric_names", py_metric_names, METH_NOARGS, "metric names"},
    {"metric_data", py_metric_data, METH_VARARGS, "metric_data(name)"},
    {"metrics_report", py_metrics_report, METH_VARARGS, "metrics_report(names=None)"},
    {"clear_counters", py_clear_counters, METH_NOARGS, ""},
    {"clear_metrics", py_clear_metrics, METH_NOARGS, ""},
    {NULL, NULL, 0, NULL},
};
