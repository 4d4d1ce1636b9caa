/* Recording IR: op(...) and scalar(...) add nodes to the lazy graph (with
 * the XLA_IR_DEBUG frames of the Python caller). */
#include "binding.h"

/* scalar(device, dtype, value) */
static PyObject *py_scalar(PyObject *m, PyObject *args) {
  (void)m;
  int device, dtype;
  PyObject *value;
  if (!PyArg_ParseTuple(args, "iiO", &device, &dtype, &value)) return NULL;
  double f = 0;
  long long i = 0;
  if (PyFloat_Check(value)) {
    f = PyFloat_AS_DOUBLE(value);
    i = (long long)f;
  } else {
    int overflow = 0;
    i = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (overflow) {
      /* Large unsigned values (e.g. uint64 seeds) keep their bit pattern. */
      unsigned long long u = PyLong_AsUnsignedLongLongMask(value);
      if (PyErr_Occurred()) return NULL;
      i = (long long)u;
    }
    f = PyLong_AsDouble(value);
    if (PyErr_Occurred()) PyErr_Clear();
  }
  if (dtype < 0 || dtype >= TT_DTYPE_COUNT) return PyErr_Format(PyExc_TypeError, "bad dtype %d", dtype);
  tt_tensor_t *t = NULL;
  int irdbg = tt_py_debug_node_begin();
  tt_status_t st = tt_tensor_scalar(device, (tt_dtype_t)dtype, f, i, &t);
  tt_py_debug_node_end(irdbg);
  if (st) return tt_py_raise_status(st);
  return tt_py_wrap_tensor(t);
}

/* op(opcode, operands, iattrs=(), fattrs=(), device=0) */
static PyObject *py_op(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
  (void)m;
  if (nargs < 2 || nargs > 5)
    return PyErr_Format(PyExc_TypeError, "op(opcode, operands, iattrs=(), fattrs=(), device=0)");
  long device = 0;
  if (nargs > 4) {
    device = PyLong_AsLong(args[4]);
    if (device == -1 && PyErr_Occurred()) return NULL;
  }
  long op = PyLong_AsLong(args[0]);
  if (op == -1 && PyErr_Occurred()) return NULL;
  PyObject *ops = PySequence_Fast(args[1], "operands must be a sequence");
  if (!ops) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(ops);
  tt_tensor_t *small[8];
  tt_tensor_t **ts = n <= 8 ? small : PyMem_Malloc(sizeof(*ts) * (size_t)n);
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS] = {0, 0, 0, 0};
  Py_ssize_t ni = 0, nf = 0;
  PyObject *result = NULL;
  if (!ts) goto out;
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!tt_py_as_tensor(PySequence_Fast_GET_ITEM(ops, i), &ts[i])) goto out;
  if (nargs > 2) {
    PyObject *f = PySequence_Fast(args[2], "iattrs must be a sequence");
    if (!f) goto out;
    ni = PySequence_Fast_GET_SIZE(f);
    if (ni > TT_MAX_IATTRS) {
      Py_DECREF(f);
      PyErr_Format(PyExc_RuntimeError, "too many int attributes (%zd)", ni);
      goto out;
    }
    for (Py_ssize_t i = 0; i < ni; ++i) {
      ia[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(f, i));
      if (ia[i] == -1 && PyErr_Occurred()) {
        Py_DECREF(f);
        goto out;
      }
    }
    Py_DECREF(f);
  }
  if (nargs > 3) {
    PyObject *f = PySequence_Fast(args[3], "fattrs must be a sequence");
    if (!f) goto out;
    nf = PySequence_Fast_GET_SIZE(f);
    if (nf > TT_MAX_FATTRS) {
      Py_DECREF(f);
      PyErr_Format(PyExc_RuntimeError, "too many float attributes (%zd)", nf);
      goto out;
    }
    for (Py_ssize_t i = 0; i < nf; ++i) {
      fa[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(f, i));
      if (fa[i] == -1.0 && PyErr_Occurred()) {
        Py_DECREF(f);
        goto out;
      }
    }
    Py_DECREF(f);
  }
  {
    tt_tensor_t *t = NULL;
    int irdbg = tt_py_debug_node_begin();
    tt_status_t st = tt_tensor_op((tt_op_t)op, (int32_t)device, ts, (int32_t)n, ia, (int32_t)ni,
                                  fa, (int32_t)nf, &t);
    tt_py_debug_node_end(irdbg);
    result = st ? tt_py_raise_status(st) : tt_py_wrap_tensor(t);
  }
out:
  if (ts && ts != small) PyMem_Free(ts);
  Py_DECREF(ops);
  return result;
}

PyMethodDef tt_py_methods_record[] = {
    {"scalar", py_scalar, METH_VARARGS, "scalar(device, dtype, value)"},
    {"op", (PyCFunction)(void (*)(void))py_op, METH_FASTCALL, "op(opcode, operands, iattrs, fattrs)"},
    {NULL, NULL, 0, NULL},
};
