/* torchtpu._C: the Python binding of the C API. The only C file that
 * includes Python headers. Each function converts arguments, calls one C
 * API function, and turns a failed status into the exception PyTorch would
 * raise (RuntimeError, IndexError for out-of-range indices and dims). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torchtpu/codegen.h"
#include "torchtpu/torchtpu.h"
#include "torchtpu/debug.h"
#include "torchtpu/trace.h"
#include "binding.h"

/* Debug hooks around engine calls (defined with the debug bindings). */
static int debug_call_begin(void);
static void debug_call_end(int active);
static int debug_node_begin(void);
static void debug_node_end(int active);

typedef struct {
  PyObject_HEAD tt_tensor_t *t;
} TensorObject;

static PyTypeObject TensorType;

static PyObject *raise_status(tt_status_t st) {
  PyObject *type = PyExc_RuntimeError;
  switch (tt_status_code(st)) {
    case TT_OUT_OF_RANGE: type = PyExc_IndexError; break;
    case TT_UNIMPLEMENTED: type = PyExc_NotImplementedError; break;
    case TT_RESOURCE_EXHAUSTED: type = PyExc_MemoryError; break;
    default: break;
  }
  PyErr_SetString(type, tt_status_message(st));
  tt_status_free(st);
  return NULL;
}

static PyObject *wrap_tensor(tt_tensor_t *t) {
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

static PyObject *shape_tuple(const tt_shape_t *s) {
  PyObject *tup = PyTuple_New(s->rank);
  if (!tup) return NULL;
  for (int i = 0; i < s->rank; ++i) PyTuple_SET_ITEM(tup, i, PyLong_FromLongLong(s->dims[i]));
  return tup;
}

static PyObject *Tensor_get_shape(TensorObject *self, void *c) {
  (void)c;
  return shape_tuple(tt_tensor_shape(self->t));
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

static PyGetSetDef Tensor_getset[] = {
    {"shape", (getter)Tensor_get_shape, NULL, "dims", NULL},
    {"dtype", (getter)Tensor_get_dtype, NULL, "tt dtype code", NULL},
    {"device", (getter)Tensor_get_device, NULL, "device index", NULL},
    {"id", (getter)Tensor_get_id, NULL, "unique id", NULL},
    {"pending", (getter)Tensor_get_pending, NULL, "has pending IR", NULL},
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

static int as_tensor(PyObject *o, tt_tensor_t **out) {
  if (!PyObject_TypeCheck(o, &TensorType)) {
    PyErr_Format(PyExc_TypeError, "expected a torchtpu._C.Tensor, got %s", Py_TYPE(o)->tp_name);
    return 0;
  }
  *out = ((TensorObject *)o)->t;
  return 1;
}

static int parse_shape(PyObject *seq, tt_shape_t *s) {
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

static PyObject *py_init(PyObject *m, PyObject *args) {
  (void)m;
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  tt_status_t st = tt_runtime_init(n);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_device_count(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyLong_FromLong(tt_runtime_device_count());
}

/* from_host(device, dtype, shape, ptr, nbytes) */
static PyObject *py_from_host(PyObject *m, PyObject *args) {
  (void)m;
  int device, dtype;
  PyObject *shape_obj;
  unsigned long long ptr;
  Py_ssize_t nbytes;
  if (!PyArg_ParseTuple(args, "iiOKn", &device, &dtype, &shape_obj, &ptr, &nbytes)) return NULL;
  tt_shape_t shape;
  if (!parse_shape(shape_obj, &shape)) return NULL;
  if (dtype < 0 || dtype >= TT_DTYPE_COUNT) return PyErr_Format(PyExc_TypeError, "bad dtype %d", dtype);
  if ((size_t)nbytes != (size_t)tt_shape_numel(&shape) * tt_dtype_size((tt_dtype_t)dtype))
    return PyErr_Format(PyExc_RuntimeError, "from_host: %zd bytes for %lld elements of %s", nbytes,
                        (long long)tt_shape_numel(&shape), tt_dtype_name((tt_dtype_t)dtype));
  tt_tensor_t *t = NULL;
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS st = tt_tensor_from_host(device, (tt_dtype_t)dtype, &shape,
                                                  (const void *)(uintptr_t)ptr, &t);
  Py_END_ALLOW_THREADS if (st) return raise_status(st);
  return wrap_tensor(t);
}

/* to_host(t, ptr, nbytes): syncs what t needs, waits, copies. */
static PyObject *py_to_host(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *to;
  unsigned long long ptr;
  Py_ssize_t nbytes;
  tt_tensor_t *t;
  if (!PyArg_ParseTuple(args, "OKn", &to, &ptr, &nbytes) || !as_tensor(to, &t)) return NULL;
  tt_status_t st;
  int dbg = debug_call_begin();
  Py_BEGIN_ALLOW_THREADS st = tt_tensor_to_host(t, (void *)(uintptr_t)ptr, (size_t)nbytes);
  Py_END_ALLOW_THREADS debug_call_end(dbg);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

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
  int irdbg = debug_node_begin();
  tt_status_t st = tt_tensor_scalar(device, (tt_dtype_t)dtype, f, i, &t);
  debug_node_end(irdbg);
  if (st) return raise_status(st);
  return wrap_tensor(t);
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
    if (!as_tensor(PySequence_Fast_GET_ITEM(ops, i), &ts[i])) goto out;
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
    int irdbg = debug_node_begin();
    tt_status_t st = tt_tensor_op((tt_op_t)op, (int32_t)device, ts, (int32_t)n, ia, (int32_t)ni,
                                  fa, (int32_t)nf, &t);
    debug_node_end(irdbg);
    result = st ? raise_status(st) : wrap_tensor(t);
  }
out:
  if (ts && ts != small) PyMem_Free(ts);
  Py_DECREF(ops);
  return result;
}

static PyObject *py_to_device(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *to;
  int device;
  tt_tensor_t *t, *r = NULL;
  if (!PyArg_ParseTuple(args, "Oi", &to, &device) || !as_tensor(to, &t)) return NULL;
  tt_status_t st;
  int dbg = debug_call_begin();
  Py_BEGIN_ALLOW_THREADS st = tt_tensor_to_device(t, device, &r);
  Py_END_ALLOW_THREADS debug_call_end(dbg);
  if (st) return raise_status(st);
  return wrap_tensor(r);
}

static PyObject *py_sync(PyObject *m, PyObject *args) {
  (void)m;
  int device = -1, wait = 0;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "|ipz", &device, &wait, &name)) return NULL;
  tt_status_t st;
  int dbg = debug_call_begin();
  Py_BEGIN_ALLOW_THREADS st = tt_lazy_sync(device, wait, name);
  Py_END_ALLOW_THREADS debug_call_end(dbg);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_sync_tensors(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *seq;
  int wait = 0;
  if (!PyArg_ParseTuple(args, "O|p", &seq, &wait)) return NULL;
  PyObject *fast = PySequence_Fast(seq, "expected a sequence of tensors");
  if (!fast) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  tt_tensor_t **ts = PyMem_Malloc(sizeof(*ts) * (size_t)(n ? n : 1));
  if (!ts) {
    Py_DECREF(fast);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!as_tensor(PySequence_Fast_GET_ITEM(fast, i), &ts[i])) {
      PyMem_Free(ts);
      Py_DECREF(fast);
      return NULL;
    }
  tt_status_t st;
  int dbg = debug_call_begin();
  Py_BEGIN_ALLOW_THREADS st = tt_lazy_sync_tensors(ts, (int32_t)n, wait);
  Py_END_ALLOW_THREADS debug_call_end(dbg);
  PyMem_Free(ts);
  Py_DECREF(fast);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_wait(PyObject *m, PyObject *args) {
  (void)m;
  int device = -1;
  if (!PyArg_ParseTuple(args, "|i", &device)) return NULL;
  Py_BEGIN_ALLOW_THREADS tt_runtime_wait(device);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *py_graph_dump(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *seq;
  int fmt = 0;
  if (!PyArg_ParseTuple(args, "O|i", &seq, &fmt)) return NULL;
  PyObject *fast = PySequence_Fast(seq, "expected a sequence of tensors");
  if (!fast) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  tt_tensor_t **ts = PyMem_Malloc(sizeof(*ts) * (size_t)(n ? n : 1));
  if (!ts) {
    Py_DECREF(fast);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!as_tensor(PySequence_Fast_GET_ITEM(fast, i), &ts[i])) {
      PyMem_Free(ts);
      Py_DECREF(fast);
      return NULL;
    }
  char *text = NULL;
  tt_status_t st = tt_lazy_graph_dump(ts, (int32_t)n, fmt, &text);
  PyMem_Free(ts);
  Py_DECREF(fast);
  if (st) return raise_status(st);
  PyObject *r = PyUnicode_FromString(text ? text : "");
  free(text);
  return r;
}

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
  Py_RETURN_NONE;
}
static PyObject *py_live_tensors(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyLong_FromLongLong(tt_lazy_live_tensors());
}
static PyObject *py_cached_graphs(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return PyLong_FromLongLong(tt_lazy_cached_graphs());
}
static PyObject *py_memory_stats(PyObject *m, PyObject *args) {
  (void)m;
  int device;
  if (!PyArg_ParseTuple(args, "i", &device)) return NULL;
  int64_t in_use = 0, peak = 0;
  tt_runtime_memory_stats(device, &in_use, &peak);
  return Py_BuildValue("(LL)", (long long)in_use, (long long)peak);
}

/* ---- captured graphs (the dynamo bridge's trace-once/replay) ---- */

typedef struct {
  PyObject_HEAD tt_capture_t *c;
} CaptureObject;

static PyTypeObject CaptureType;

static void Capture_dealloc(CaptureObject *self) {
  if (self->c) tt_capture_release(self->c);
  PyObject_Free(self);
}

static PyObject *Capture_get_int(CaptureObject *self, void *which) {
  switch ((intptr_t)which) {
    case 0: return PyLong_FromLong(tt_capture_num_inputs(self->c));
    case 1: return PyLong_FromLong(tt_capture_num_outputs(self->c));
    case 2: return PyLong_FromLong(tt_capture_num_seeds(self->c));
    case 3: return PyLong_FromLong(tt_capture_num_graph_inputs(self->c));
    case 4: return PyLong_FromLong(tt_capture_num_graph_outputs(self->c));
    default: return PyLong_FromUnsignedLongLong(tt_capture_hash(self->c));
  }
}

static PyObject *Capture_graph_text(CaptureObject *self, PyObject *a) {
  (void)a;
  char *text = NULL;
  tt_status_t st = tt_capture_graph_text(self->c, &text);
  if (st) return raise_status(st);
  PyObject *r = PyUnicode_FromString(text);
  free(text);
  return r;
}

/* graph_inputs() -> [(source, index)]: source 0 = argument, 1 = constant
 * (index -1), 2 = RNG seed slot. */
static PyObject *Capture_graph_inputs(CaptureObject *self, PyObject *a) {
  (void)a;
  int32_t n = tt_capture_num_graph_inputs(self->c);
  PyObject *list = PyList_New(n);
  for (int32_t k = 0; list && k < n; ++k) {
    int32_t index = -1;
    int32_t src = tt_capture_graph_input_source(self->c, k, &index);
    PyObject *item = Py_BuildValue("(ii)", (int)src, src == 1 ? -1 : (int)index);
    if (!item) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, k, item);
  }
  return list;
}

static PyGetSetDef Capture_getset[] = {
    {"num_inputs", (getter)Capture_get_int, NULL, "tensor inputs", (void *)0},
    {"num_outputs", (getter)Capture_get_int, NULL, "outputs", (void *)1},
    {"num_seeds", (getter)Capture_get_int, NULL, "RNG key slots per replay", (void *)2},
    {"num_graph_inputs", (getter)Capture_get_int, NULL, "inputs of the compiled graph", (void *)3},
    {"num_graph_outputs", (getter)Capture_get_int, NULL, "outputs the graph computes", (void *)4},
    {"hash", (getter)Capture_get_int, NULL, "structural hash of the graph", (void *)5},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Capture_methods[] = {
    {"graph_text", (PyCFunction)Capture_graph_text, METH_NOARGS, "text of the compiled graph"},
    {"graph_inputs", (PyCFunction)Capture_graph_inputs, METH_NOARGS,
     "[(source, index)] per graph input: 0 argument, 1 constant, 2 RNG seed"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CaptureType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torchtpu._C.Capture",
    .tp_basicsize = sizeof(CaptureObject),
    .tp_dealloc = (destructor)Capture_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A captured, compiled graph that replays on new inputs.",
    .tp_getset = Capture_getset,
    .tp_methods = Capture_methods,
};

/* Tensors of a sequence into a PyMem array (*out freed by the caller). */
static int tensor_array(PyObject *seq, tt_tensor_t ***out, Py_ssize_t *n) {
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
    if (!as_tensor(PySequence_Fast_GET_ITEM(fast, i), &(*out)[i])) {
      PyMem_Free(*out);
      *out = NULL;
      Py_DECREF(fast);
      return 0;
    }
  Py_DECREF(fast);
  return 1;
}

/* capture(inputs, outputs) -> Capture; cuts and queues the outputs. */
static PyObject *py_capture(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *ins, *outs;
  if (!PyArg_ParseTuple(args, "OO", &ins, &outs)) return NULL;
  tt_tensor_t **it = NULL, **ot = NULL;
  Py_ssize_t ni = 0, no = 0;
  if (!tensor_array(ins, &it, &ni)) return NULL;
  if (!tensor_array(outs, &ot, &no)) {
    PyMem_Free(it);
    return NULL;
  }
  tt_capture_t *c = NULL;
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS st = tt_lazy_capture(it, (int32_t)ni, ot, (int32_t)no, &c);
  Py_END_ALLOW_THREADS PyMem_Free(it);
  PyMem_Free(ot);
  if (st) return raise_status(st);
  CaptureObject *o = PyObject_New(CaptureObject, &CaptureType);
  if (!o) {
    tt_capture_release(c);
    return NULL;
  }
  o->c = c;
  return (PyObject *)o;
}

static int as_capture(PyObject *o, tt_capture_t **out) {
  if (!PyObject_TypeCheck(o, &CaptureType)) {
    PyErr_Format(PyExc_TypeError, "expected a torchtpu._C.Capture, got %s", Py_TYPE(o)->tp_name);
    return 0;
  }
  *out = ((CaptureObject *)o)->c;
  return 1;
}

/* capture_mismatch(capture, inputs) -> None if inputs fit, else the reason. */
static PyObject *py_capture_mismatch(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *co, *ins;
  tt_capture_t *c;
  if (!PyArg_ParseTuple(args, "OO", &co, &ins) || !as_capture(co, &c)) return NULL;
  tt_tensor_t **it = NULL;
  Py_ssize_t ni = 0;
  if (!tensor_array(ins, &it, &ni)) return NULL;
  char why[256];
  int ok = tt_capture_matches(c, it, (int32_t)ni, why, sizeof(why));
  PyMem_Free(it);
  if (ok) Py_RETURN_NONE;
  return PyUnicode_FromString(why);
}

/* replay(capture, inputs, seeds=()) -> list of Tensor, or None when the
 * inputs do not fit the capture (the caller traces again). */
static PyObject *py_replay(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *co, *ins, *seeds_obj = NULL;
  tt_capture_t *c;
  if (!PyArg_ParseTuple(args, "OO|O", &co, &ins, &seeds_obj) || !as_capture(co, &c)) return NULL;
  tt_tensor_t **it = NULL;
  Py_ssize_t ni = 0;
  if (!tensor_array(ins, &it, &ni)) return NULL;
  if (!tt_capture_matches(c, it, (int32_t)ni, NULL, 0)) {
    PyMem_Free(it);
    Py_RETURN_NONE;
  }
  int64_t seeds_small[8];
  int64_t *seeds = seeds_small;
  Py_ssize_t ns = 0;
  int32_t no = tt_capture_num_outputs(c);
  tt_tensor_t **ot = PyMem_Malloc(sizeof(*ot) * (size_t)(no ? no : 1));
  PyObject *result = NULL;
  if (!ot) {
    PyErr_NoMemory();
    goto out;
  }
  if (seeds_obj && seeds_obj != Py_None) {
    PyObject *fast = PySequence_Fast(seeds_obj, "seeds must be a sequence of ints");
    if (!fast) goto out;
    ns = PySequence_Fast_GET_SIZE(fast);
    if (ns > 8) seeds = PyMem_Malloc(sizeof(*seeds) * (size_t)ns);
    if (!seeds) {
      Py_DECREF(fast);
      PyErr_NoMemory();
      goto out;
    }
    for (Py_ssize_t i = 0; i < ns; ++i) {
      seeds[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
      if (seeds[i] == -1 && PyErr_Occurred()) {
        Py_DECREF(fast);
        goto out;
      }
    }
    Py_DECREF(fast);
  }
  {
    tt_status_t st;
    Py_BEGIN_ALLOW_THREADS st = tt_lazy_replay(c, it, (int32_t)ni, seeds, (int32_t)ns, ot);
    Py_END_ALLOW_THREADS if (st) {
      raise_status(st);
      goto out;
    }
  }
  result = PyList_New(no);
  for (int32_t i = 0; i < no; ++i) {
    PyObject *w = result ? wrap_tensor(ot[i]) : NULL; /* wrap_tensor owns ot[i] */
    if (!result) {
      tt_tensor_release(ot[i]);
    } else if (!w) {
      for (int32_t k = i + 1; k < no; ++k) tt_tensor_release(ot[k]);
      Py_CLEAR(result);
      break;
    } else {
      PyList_SET_ITEM(result, i, w);
    }
  }
out:
  if (seeds != seeds_small) PyMem_Free(seeds);
  PyMem_Free(ot);
  PyMem_Free(it);
  return result;
}

static PyObject *py_persistent_cache_init(PyObject *m, PyObject *args) {
  (void)m;
  const char *path = NULL;
  int readonly = 0;
  if (!PyArg_ParseTuple(args, "z|p", &path, &readonly)) return NULL;
  tt_status_t st = tt_persistent_cache_init(path, readonly);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_blas_install(PyObject *m, PyObject *args) {
  (void)m;
  const char *path = NULL;
  int all = 0;
  if (!PyArg_ParseTuple(args, "z|p", &path, &all)) return NULL;
  tt_blas_set_policy(all ? TT_BLAS_POLICY_ALL : TT_BLAS_POLICY_AUTO);
  return PyBool_FromLong(tt_blas_install(path));
}

static PyObject *py_blas_info(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  return Py_BuildValue("(OL)", tt_blas_active() ? Py_True : Py_False,
                       (long long)tt_blas_calls());
}

static PyObject *py_blas_packed_info(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  int64_t entries = 0, bytes = 0, calls = 0;
  tt_blas_packed_info(&entries, &bytes, &calls);
  return Py_BuildValue("(LLL)", (long long)entries, (long long)bytes, (long long)calls);
}

static PyObject *py_blas_set_packed_limit(PyObject *m, PyObject *args) {
  (void)m;
  long long bytes = 0;
  if (!PyArg_ParseTuple(args, "L", &bytes)) return NULL;
  tt_blas_set_packed_limit((int64_t)bytes);
  Py_RETURN_NONE;
}

static PyObject *py_tier1_wait(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  Py_BEGIN_ALLOW_THREADS tt_tier1_wait_idle();
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* ---- debug service and trace recorder (PT_XLA_DEBUG, XLA_IR_DEBUG,
 * XLA_SAVE_TENSORS_FILE, profiler spans) ----
 * Engine calls that may cut a graph hand the engine the Python frames of
 * the caller (a thread-local context), and op recording hands it the frames
 * for XLA_IR_DEBUG. Both cost one flag test when debugging is off. Frames
 * are classified by path prefixes that torchtpu.debugging sets. */

typedef struct {
  char **items;
  Py_ssize_t n;
} prefix_list_t;

static prefix_list_t dbg_skip_analysis_; /* hidden in analysis frames */
static prefix_list_t dbg_skip_ir_;       /* hidden in IR node frames */
static prefix_list_t dbg_library_;       /* not the user's code */
static _Thread_local char *dbg_cause_;   /* explicit cause for this thread */

static int prefix_match(const prefix_list_t *l, const char *file) {
  for (Py_ssize_t i = 0; i < l->n; ++i)
    if (strncmp(file, l->items[i], strlen(l->items[i])) == 0) return 1;
  return 0;
}

#define DBG_MAX_FRAMES 64

typedef struct {
  tt_debug_frame_t f[DBG_MAX_FRAMES];
  PyObject *code[DBG_MAX_FRAMES]; /* keep the UTF-8 of names alive */
  int n;
} frames_t;

/* The calling Python thread's frames, innermost first, minus skipped ones. */
static void frames_capture(frames_t *out, const prefix_list_t *skip, int max) {
  out->n = 0;
  PyFrameObject *f = PyEval_GetFrame(); /* borrowed */
  Py_XINCREF(f);
  while (f && out->n < max) {
    PyCodeObject *code = PyFrame_GetCode(f);
    const char *file = PyUnicode_AsUTF8(code->co_filename);
    const char *fn = PyUnicode_AsUTF8(code->co_name);
    if (!file || !fn) PyErr_Clear();
    if (file && fn && !prefix_match(skip, file)) {
      tt_debug_frame_t *d = &out->f[out->n];
      d->function = fn;
      d->file = file;
      d->line = PyFrame_GetLineNumber(f);
      d->library = prefix_match(&dbg_library_, file);
      out->code[out->n++] = (PyObject *)code;
    } else {
      Py_DECREF(code);
    }
    PyFrameObject *back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
}

static void frames_release(frames_t *fr) {
  for (int i = 0; i < fr->n; ++i) Py_DECREF(fr->code[i]);
  fr->n = 0;
}

/* Around engine calls that may cut a graph (GIL held). */
static int debug_call_begin(void) {
  if (!tt_debug_wants_frames()) return 0;
  frames_t fr;
  frames_capture(&fr, &dbg_skip_analysis_, DBG_MAX_FRAMES);
  tt_debug_set_context(fr.f, fr.n, dbg_cause_);
  frames_release(&fr);
  return 1;
}

static void debug_call_end(int active) {
  if (active) tt_debug_clear_context();
}

/* Around op recording (XLA_IR_DEBUG). */
static int debug_node_begin(void) {
  if (!(tt_debug_flags() & TT_DEBUG_IR_FRAMES)) return 0;
  frames_t fr;
  frames_capture(&fr, &dbg_skip_ir_, 16);
  tt_debug_set_node_frames(fr.f, fr.n);
  frames_release(&fr);
  return 1;
}

static void debug_node_end(int active) {
  if (active) tt_debug_clear_node_frames();
}

static int prefix_list_set(prefix_list_t *l, PyObject *seq) {
  PyObject *fast = PySequence_Fast(seq, "expected a sequence of path prefixes");
  if (!fast) return 0;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  char **items = calloc((size_t)n + 1, sizeof(*items));
  int ok = items != NULL;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    const char *s = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fast, i));
    ok = s && (items[i] = strdup(s)) != NULL;
  }
  Py_DECREF(fast);
  if (!ok) {
    for (Py_ssize_t i = 0; items && i < n; ++i) free(items[i]);
    free(items);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return 0;
  }
  for (Py_ssize_t i = 0; i < l->n; ++i) free(l->items[i]);
  free(l->items);
  l->items = items;
  l->n = n;
  return 1;
}

/* debug_set_frame_filters(skip_analysis, skip_ir, library) */
static PyObject *py_debug_set_frame_filters(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *a, *b, *c;
  if (!PyArg_ParseTuple(args, "OOO", &a, &b, &c)) return NULL;
  if (!prefix_list_set(&dbg_skip_analysis_, a) || !prefix_list_set(&dbg_skip_ir_, b) ||
      !prefix_list_set(&dbg_library_, c))
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *py_debug_config(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_debug_config_t c;
  tt_debug_get_config(&c);
  return Py_BuildValue("{s:i,s:i,s:i,s:O,s:s,s:z,s:z,s:z}", "level", c.level, "max_frames",
                       c.max_frames, "local_rank", c.local_rank, "ir_debug",
                       c.ir_debug ? Py_True : Py_False, "save_tensors_fmt",
                       c.save_tensors_fmt ? "dot" : "text", "debug_file", c.debug_file,
                       "save_tensors_file", c.save_tensors_file, "dump_dir", c.dump_dir);
}

/* debug_configure(level, max_frames, local_rank, ir_debug, fmt, debug_file,
 * save_tensors_file, dump_dir); fmt is 0 (text) or 1 (dot). */
static PyObject *py_debug_configure(PyObject *m, PyObject *args) {
  (void)m;
  tt_debug_config_t c;
  memset(&c, 0, sizeof(c));
  int ir = 0;
  if (!PyArg_ParseTuple(args, "iiipizzz", &c.level, &c.max_frames, &c.local_rank, &ir,
                        &c.save_tensors_fmt, &c.debug_file, &c.save_tensors_file, &c.dump_dir))
    return NULL;
  c.ir_debug = ir;
  tt_status_t st = tt_debug_configure(&c);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_config_reload(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_config_reload();
  Py_RETURN_NONE;
}

static PyObject *py_debug_configure_from_env(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_debug_config_t c;
  tt_debug_config_from_env(&c);
  tt_status_t st = tt_debug_configure(&c);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_set_graph_name(PyObject *m, PyObject *args) {
  (void)m;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "z", &name)) return NULL;
  tt_debug_set_graph_name(name);
  Py_RETURN_NONE;
}

static PyObject *py_graph_name(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  const char *name = tt_debug_graph_name();
  if (!name) Py_RETURN_NONE;
  return PyUnicode_FromString(name);
}

static PyObject *py_debug_set_cause(PyObject *m, PyObject *args) {
  (void)m;
  const char *cause = NULL;
  if (!PyArg_ParseTuple(args, "z", &cause)) return NULL;
  char *copy = cause && *cause ? strdup(cause) : NULL;
  if (cause && *cause && !copy) return PyErr_NoMemory();
  free(dbg_cause_);
  dbg_cause_ = copy;
  Py_RETURN_NONE;
}

static PyObject *py_debug_last_recompile(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  char *text = tt_debug_last_recompile();
  if (!text) Py_RETURN_NONE;
  PyObject *r = PyUnicode_FromString(text);
  free(text);
  return r;
}

/* debug_dump(graph_hash, stage, ext, text) */
static PyObject *py_debug_dump(PyObject *m, PyObject *args) {
  (void)m;
  unsigned long long hash;
  const char *stage, *ext, *text;
  if (!PyArg_ParseTuple(args, "Ksss", &hash, &stage, &ext, &text)) return NULL;
  tt_status_t st = tt_debug_dump((uint64_t)hash, stage, ext, text);
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_trace_start(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_status_t st = tt_trace_start();
  if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_trace_stop(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_status_t st = tt_trace_stop();
  if (st) return raise_status(st);
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
  if (st) return raise_status(st);
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
  Py_END_ALLOW_THREADS if (st) return raise_status(st);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"persistent_cache_init", py_persistent_cache_init, METH_VARARGS,
     "persistent_cache_init(path, readonly=False)"},
    {"tier1_wait", py_tier1_wait, METH_NOARGS, "wait for background tier-1 compiles"},
    {"blas_install", py_blas_install, METH_VARARGS,
     "blas_install(path, all=False): MKL's sgemm from that loaded library for large f32 GEMMs (all: every one it can take, else the CPU's default share)"},
    {"blas_info", py_blas_info, METH_NOARGS, "(active, products run by the external BLAS)"},
    {"blas_set_packed_limit", py_blas_set_packed_limit, METH_VARARGS,
     "bytes of packed weight copies kept at most (0: none)"},
    {"blas_packed_info", py_blas_packed_info, METH_NOARGS,
     "(packed weight copies kept, their bytes, products run on them)"},
    {"init", py_init, METH_VARARGS, "init(num_devices)"},
    {"device_count", py_device_count, METH_NOARGS, "number of devices"},
    {"from_host", py_from_host, METH_VARARGS, "from_host(device, dtype, shape, ptr, nbytes)"},
    {"to_host", py_to_host, METH_VARARGS, "to_host(t, ptr, nbytes)"},
    {"scalar", py_scalar, METH_VARARGS, "scalar(device, dtype, value)"},
    {"op", (PyCFunction)(void (*)(void))py_op, METH_FASTCALL, "op(opcode, operands, iattrs, fattrs)"},
    {"to_device", py_to_device, METH_VARARGS, "to_device(t, device)"},
    {"sync", py_sync, METH_VARARGS, "sync(device=-1, wait=False, name=None)"},
    {"sync_tensors", py_sync_tensors, METH_VARARGS, "sync_tensors(tensors, wait=False)"},
    {"wait", py_wait, METH_VARARGS, "wait(device=-1)"},
    {"graph_dump", py_graph_dump, METH_VARARGS, "graph_dump(tensors, fmt=0)"},
    {"counter_add", py_counter_add, METH_VARARGS, "counter_add(name, delta=1)"},
    {"counter_value", py_counter_value, METH_VARARGS, "counter_value(name)"},
    {"metric_add", py_metric_add, METH_VARARGS, "metric_add(name, unit, value)"},
    {"counter_names", py_counter_names, METH_NOARGS, "counter names"},
    {"metric_names", py_metric_names, METH_NOARGS, "metric names"},
    {"metric_data", py_metric_data, METH_VARARGS, "metric_data(name)"},
    {"metrics_report", py_metrics_report, METH_VARARGS, "metrics_report(names=None)"},
    {"clear_counters", py_clear_counters, METH_NOARGS, ""},
    {"clear_metrics", py_clear_metrics, METH_NOARGS, ""},
    {"live_tensors", py_live_tensors, METH_NOARGS, ""},
    {"cached_graphs", py_cached_graphs, METH_NOARGS, ""},
    {"memory_stats", py_memory_stats, METH_VARARGS, "memory_stats(device) -> (in_use, peak)"},
    {"debug_set_frame_filters", py_debug_set_frame_filters, METH_VARARGS,
     "debug_set_frame_filters(skip_analysis, skip_ir, library): path prefixes"},
    {"debug_config", py_debug_config, METH_NOARGS, "the debug configuration (dict)"},
    {"debug_configure", py_debug_configure, METH_VARARGS,
     "debug_configure(level, max_frames, local_rank, ir_debug, fmt, debug_file, save_file, dump_dir)"},
    {"config_reload", py_config_reload, METH_NOARGS, "re-read the engine's environment settings"},
    {"debug_configure_from_env", py_debug_configure_from_env, METH_NOARGS, "re-read the environment"},
    {"set_graph_name", py_set_graph_name, METH_VARARGS, "set_graph_name(name or None), this thread"},
    {"graph_name", py_graph_name, METH_NOARGS, "this thread's graph name or None"},
    {"debug_set_cause", py_debug_set_cause, METH_VARARGS, "debug_set_cause(text or None), this thread"},
    {"debug_last_recompile", py_debug_last_recompile, METH_NOARGS, "last recompilation diff or None"},
    {"debug_dump", py_debug_dump, METH_VARARGS, "debug_dump(graph_hash, stage, ext, text)"},
    {"trace_start", py_trace_start, METH_NOARGS, "start recording trace spans"},
    {"trace_stop", py_trace_stop, METH_NOARGS, "stop recording trace spans"},
    {"trace_active", py_trace_active, METH_NOARGS, "True while recording"},
    {"trace_begin", py_trace_begin, METH_VARARGS, "trace_begin(name, cat='user', args_json=None)"},
    {"trace_end", py_trace_end, METH_NOARGS, "close this thread's innermost span"},
    {"trace_set_thread_name", py_trace_set_thread_name, METH_VARARGS, "name this thread"},
    {"trace_json", py_trace_json, METH_NOARGS, "the recorded spans as Chrome trace JSON"},
    {"trace_write", py_trace_write, METH_VARARGS, "trace_write(path): atomic JSON write"},
    {"capture", py_capture, METH_VARARGS, "capture(inputs, outputs) -> Capture"},
    {"replay", py_replay, METH_VARARGS, "replay(capture, inputs, seeds=()) -> [Tensor] | None"},
    {"capture_mismatch", py_capture_mismatch, METH_VARARGS,
     "capture_mismatch(capture, inputs) -> None | reason"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "torchtpu._C",
                                       "torchtpu C engine binding", -1, methods,
                                       NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__C(void) {
  if (PyType_Ready(&TensorType) < 0) return NULL;
  if (PyType_Ready(&CaptureType) < 0) return NULL;
  PyObject *mod = PyModule_Create(&moduledef);
  if (!mod) return NULL;
  Py_INCREF(&TensorType);
  PyModule_AddObject(mod, "Tensor", (PyObject *)&TensorType);
  Py_INCREF(&CaptureType);
  PyModule_AddObject(mod, "Capture", (PyObject *)&CaptureType);
  if (PyModule_AddFunctions(mod, tt_py_extra_methods_stablehlo) < 0 ||
      PyModule_AddFunctions(mod, tt_py_extra_methods_pjrt) < 0 ||
      PyModule_AddFunctions(mod, tt_py_extra_methods_spmd) < 0) {
    Py_DECREF(mod);
    return NULL;
  }
  return mod;
}

/* Shared with the other binding files (binding.h). */
PyObject *tt_py_raise_status(tt_status_t st) { return raise_status(st); }
PyObject *tt_py_wrap_tensor(tt_tensor_t *t) { return wrap_tensor(t); }
int tt_py_as_tensor(PyObject *o, tt_tensor_t **out) { return as_tensor(o, out); }
int tt_py_tensor_array(PyObject *seq, tt_tensor_t ***out, Py_ssize_t *n) {
  return tensor_array(seq, out, n);
}
