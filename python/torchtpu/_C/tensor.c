/* torchtpu._C.Tensor, the lazy tensor handle, and the bindings that move
 * tensors between the host and devices. */
#include "binding.h"

typedef struct {
  PyObject_HEAD tt_tensor_t *t;
} TensorObject;

static PyTypeObject TensorType;

PyObject *tt_py_wrap_tensor(tt_tensor_t *t) {
  TensorObject *o = PyObject_New(TensorObject, &TensorType);
  if (!o) {
    tt_tensor_release(t);
    return NULL;
  }
  o->t = t;
  return (PyObject *)o;
}

static void Tensor_dealloc(TensorObject *self) {
  if (self->t) tt_tensor_release(self->t);
  PyObject_Free(self);
}

PyObject *tt_py_shape_tuple(const tt_shape_t *s) {
  PyObject *tup = PyTuple_New(s->rank);
  if (!tup) return NULL;
  for (int i = 0; i < s->rank; ++i) PyTuple_SET_ITEM(tup, i, PyLong_FromLongLong(s->dims[i]));
  return tup;
}

static PyObject *Tensor_get_shape(TensorObject *self, void *c) {
  (void)c;
  return tt_py_shape_tuple(tt_tensor_shape(self->t));
}

static PyObject *Tensor_get_dtype(TensorObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(tt_tensor_dtype(self->t));
}
static PyObject *Tensor_get_device(TensorObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(tt_tensor_device(self->t));
}
static PyObject *Tensor_get_id(TensorObject *self, void *c) {
  (void)c;
  return PyLong_FromLongLong(tt_tensor_id(self->t));
}
static PyObject *Tensor_get_pending(TensorObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(tt_tensor_is_pending(self->t));
}

static PyObject *Tensor_get_placeholder(TensorObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(tt_tensor_is_placeholder(self->t));
}

static PyObject *Tensor_get_on_host(TensorObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(tt_tensor_on_host(self->t));
}

static PyObject *Tensor_get_data_node(TensorObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(tt_tensor_has_data_node(self->t));
}

static PyGetSetDef Tensor_getset[] = {
    {"shape", (getter)Tensor_get_shape, NULL, "dims", NULL},
    {"dtype", (getter)Tensor_get_dtype, NULL, "tt dtype code", NULL},
    {"device", (getter)Tensor_get_device, NULL, "device index", NULL},
    {"id", (getter)Tensor_get_id, NULL, "unique id", NULL},
    {"pending", (getter)Tensor_get_pending, NULL, "has pending IR", NULL},
    {"on_host", (getter)Tensor_get_on_host, NULL,
     "its value is still held on the host (SPMD mode, tt_tensor_from_host_deferred)", NULL},
    {"data_node", (getter)Tensor_get_data_node, NULL,
     "its data is read through a node (tt_tensor_has_data_node)", NULL},
    {"placeholder", (getter)Tensor_get_placeholder, NULL,
     "its data was donated and deleted (tt_tensor_is_placeholder)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torchtpu._C.Tensor",
    .tp_basicsize = sizeof(TensorObject),
    .tp_dealloc = (destructor)Tensor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A lazy tensor handle of the torchtpu engine.",
    .tp_getset = Tensor_getset,
};

int tt_py_as_tensor(PyObject *o, tt_tensor_t **out) {
  if (!PyObject_TypeCheck(o, &TensorType)) {
    PyErr_Format(PyExc_TypeError, "expected a torchtpu._C.Tensor, got %s", Py_TYPE(o)->tp_name);
    return 0;
  }
  *out = ((TensorObject *)o)->t;
  return 1;
}

int tt_py_parse_shape(PyObject *seq, tt_shape_t *s) {
  PyObject *fast = PySequence_Fast(seq, "shape must be a sequence of ints");
  if (!fast) return 0;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n > TT_MAX_RANK) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_RuntimeError, "rank %zd exceeds the maximum %d", n, TT_MAX_RANK);
    return 0;
  }
  s->rank = (int32_t)n;
  for (Py_ssize_t i = 0; i < n; ++i) {
    s->dims[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (s->dims[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return 0;
    }
  }
  Py_DECREF(fast);
  return 1;
}

/* from_host(device, dtype, shape, ptr, nbytes, defer=False): defer keeps
 * the copy on the host in SPMD mode (tt_tensor_from_host_deferred). */
static PyObject *py_from_host(PyObject *m, PyObject *args) {
  (void)m;
  int device, dtype, defer = 0;
  PyObject *shape_obj;
  unsigned long long ptr;
  Py_ssize_t nbytes;
  if (!PyArg_ParseTuple(args, "iiOKn|p", &device, &dtype, &shape_obj, &ptr, &nbytes, &defer))
    return NULL;
  tt_shape_t shape;
  if (!tt_py_parse_shape(shape_obj, &shape)) return NULL;
  if (dtype < 0 || dtype >= TT_DTYPE_COUNT) return PyErr_Format(PyExc_TypeError, "bad dtype %d", dtype);
  if ((size_t)nbytes != (size_t)tt_shape_numel(&shape) * tt_dtype_size((tt_dtype_t)dtype))
    return PyErr_Format(PyExc_RuntimeError, "from_host: %zd bytes for %lld elements of %s", nbytes,
                        (long long)tt_shape_numel(&shape), tt_dtype_name((tt_dtype_t)dtype));
  tt_tensor_t *t = NULL;
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS st = (defer ? tt_tensor_from_host_deferred : tt_tensor_from_host)(
      device, (tt_dtype_t)dtype, &shape, (const void *)(uintptr_t)ptr, &t);
  Py_END_ALLOW_THREADS if (st) return tt_py_raise_status(st);
  return tt_py_wrap_tensor(t);
}

/* to_host(t, ptr, nbytes): syncs what t needs, waits, copies. */
static PyObject *py_to_host(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *to;
  unsigned long long ptr;
  Py_ssize_t nbytes;
  tt_tensor_t *t;
  if (!PyArg_ParseTuple(args, "OKn", &to, &ptr, &nbytes) || !tt_py_as_tensor(to, &t)) return NULL;
  tt_status_t st;
  int dbg = tt_py_debug_call_begin();
  Py_BEGIN_ALLOW_THREADS st = tt_tensor_to_host(t, (void *)(uintptr_t)ptr, (size_t)nbytes);
  Py_END_ALLOW_THREADS tt_py_debug_call_end(dbg);
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_to_device(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *to;
  int device;
  tt_tensor_t *t, *r = NULL;
  if (!PyArg_ParseTuple(args, "Oi", &to, &device) || !tt_py_as_tensor(to, &t)) return NULL;
  tt_status_t st;
  int dbg = tt_py_debug_call_begin();
  Py_BEGIN_ALLOW_THREADS st = tt_tensor_to_device(t, device, &r);
  Py_END_ALLOW_THREADS tt_py_debug_call_end(dbg);
  if (st) return tt_py_raise_status(st);
  return tt_py_wrap_tensor(r);
}

static PyObject *py_buffer_address(PyObject *m, PyObject *a) {
  (void)m;
  tt_tensor_t *t;
  if (!tt_py_as_tensor(a, &t)) return NULL;
  uintptr_t addr = 0;
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS st = tt_tensor_buffer_address(t, &addr);
  Py_END_ALLOW_THREADS if (st) return tt_py_raise_status(st);
  return PyLong_FromUnsignedLongLong((unsigned long long)addr);
}

static PyObject *py_propagate_alias(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *a, *b;
  tt_tensor_t *input, *output;
  if (!PyArg_ParseTuple(args, "OO", &a, &b) || !tt_py_as_tensor(a, &input) ||
      !tt_py_as_tensor(b, &output))
    return NULL;
  tt_tensor_propagate_alias(input, output);
  Py_RETURN_NONE;
}

static PyObject *py_set_donation(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *a;
  int donate;
  tt_tensor_t *t;
  if (!PyArg_ParseTuple(args, "Op", &a, &donate) || !tt_py_as_tensor(a, &t)) return NULL;
  return PyBool_FromLong(tt_tensor_set_donation(t, donate));
}

static PyObject *py_get_donation(PyObject *m, PyObject *a) {
  (void)m;
  tt_tensor_t *t;
  if (!tt_py_as_tensor(a, &t)) return NULL;
  return PyBool_FromLong(tt_tensor_donation(t));
}

static PyObject *py_set_alias_with_donor(PyObject *m, PyObject *a) {
  (void)m;
  int enable = PyObject_IsTrue(a);
  if (enable < 0) return NULL;
  tt_lazy_set_alias_with_donor(enable);
  Py_RETURN_NONE;
}

static PyObject *py_live_tensors(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyLong_FromLongLong(tt_lazy_live_tensors());
}

/* Tensors of a sequence into a PyMem array (*out freed by the caller). */
int tt_py_tensor_array(PyObject *seq, tt_tensor_t ***out, Py_ssize_t *n) {
  PyObject *fast = PySequence_Fast(seq, "expected a sequence of torchtpu._C.Tensor");
  if (!fast) return 0;
  *n = PySequence_Fast_GET_SIZE(fast);
  *out = PyMem_Malloc(sizeof(**out) * (size_t)(*n ? *n : 1));
  if (!*out) {
    Py_DECREF(fast);
    PyErr_NoMemory();
    return 0;
  }
  for (Py_ssize_t i = 0; i < *n; ++i)
    if (!tt_py_as_tensor(PySequence_Fast_GET_ITEM(fast, i), &(*out)[i])) {
      PyMem_Free(*out);
      *out = NULL;
      Py_DECREF(fast);
      return 0;
    }
  Py_DECREF(fast);
  return 1;
}

PyMethodDef tt_py_methods_tensor[] = {
    {"from_host", py_from_host, METH_VARARGS, "from_host(device, dtype, shape, ptr, nbytes, defer=False)"},
    {"to_host", py_to_host, METH_VARARGS, "to_host(t, ptr, nbytes)"},
    {"to_device", py_to_device, METH_VARARGS, "to_device(t, device)"},
    {"live_tensors", py_live_tensors, METH_NOARGS, ""},
    {"buffer_address", py_buffer_address, METH_O,
     "buffer_address(t) -> int: address of t's data once ready (pending t: RuntimeError)"},
    {"set_donation", py_set_donation, METH_VARARGS,
     "set_donation(t, donate) -> bool: marks t's data for donation; False when t is pending"},
    {"get_donation", py_get_donation, METH_O, "get_donation(t) -> bool"},
    {"set_alias_with_donor", py_set_alias_with_donor, METH_O,
     "set_alias_with_donor(enable): marked data counts as donated at every sync"},
    {"propagate_alias", py_propagate_alias, METH_VARARGS,
     "propagate_alias(input, output): output is an in-place update of input"},
    {NULL, NULL, 0, NULL},
};

int tt_py_add_tensor_type(PyObject *mod) {
  if (PyType_Ready(&TensorType) < 0) return -1;
  Py_INCREF(&TensorType);
  return PyModule_AddObject(mod, "Tensor", (PyObject *)&TensorType);
}
