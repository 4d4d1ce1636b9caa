/* Graph text of pending tensors (torch_xla._XLAC._get_xla_tensors_text/dot). */
#include "binding.h"

static PyObject *py_graph_dump(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *seq;
  int fmt = 0;
  if (!PyArg_ParseTuple(args, "O|i", &seq, &fmt)) return NULL;
  tt_tensor_t **ts = NULL;
  Py_ssize_t n = 0;
  if (!tt_py_tensor_array(seq, &ts, &n)) return NULL;
  char *text = NULL;
  tt_status_t st = tt_lazy_graph_dump(ts, (int32_t)n, fmt, &text);
  PyMem_Free(ts);
  if (st) return tt_py_raise_status(st);
  PyObject *r = PyUnicode_FromString(text ? text : "");
  free(text);
  return r;
}

PyMethodDef tt_py_methods_graph[] = {
    {"graph_dump", py_graph_dump, METH_VARARGS, "graph_dump(tensors, fmt=0)"},
    {NULL, NULL, 0, NULL},
};
