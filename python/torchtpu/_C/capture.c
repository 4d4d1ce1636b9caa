/* Captured graphs: the dynamo bridge's trace-once/replay. */
#include "binding.h"

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
  if (st) return tt_py_raise_status(st);
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

/* capture(inputs, outputs) -> Capture; cuts and queues the outputs. */
static PyObject *py_capture(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *ins, *outs;
  if (!PyArg_ParseTuple(args, "OO", &ins, &outs)) return NULL;
  tt_tensor_t **it = NULL, **ot = NULL;
  Py_ssize_t ni = 0, no = 0;
  if (!tt_py_tensor_array(ins, &it, &ni)) return NULL;
  if (!tt_py_tensor_array(outs, &ot, &no)) {
    PyMem_Free(it);
    return NULL;
  }
  tt_capture_t *c = NULL;
  tt_status_t st;
  int dbg = tt_py_debug_call_begin(); /* the first call's analysis blocks */
  Py_BEGIN_ALLOW_THREADS st = tt_lazy_capture(it, (int32_t)ni, ot, (int32_t)no, &c);
  Py_END_ALLOW_THREADS tt_py_debug_call_end(dbg);
  PyMem_Free(it);
  PyMem_Free(ot);
  if (st) return tt_py_raise_status(st);
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
  if (!tt_py_tensor_array(ins, &it, &ni)) return NULL;
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
  if (!tt_py_tensor_array(ins, &it, &ni)) return NULL;
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
      tt_py_raise_status(st);
      goto out;
    }
  }
  result = PyList_New(no);
  for (int32_t i = 0; i < no; ++i) {
    PyObject *w = result ? tt_py_wrap_tensor(ot[i]) : NULL; /* tt_py_wrap_tensor owns ot[i] */
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

PyMethodDef tt_py_methods_capture[] = {
    {"capture", py_capture, METH_VARARGS, "capture(inputs, outputs) -> Capture"},
    {"replay", py_replay, METH_VARARGS, "replay(capture, inputs, seeds=()) -> [Tensor] | None"},
    {"capture_mismatch", py_capture_mismatch, METH_VARARGS,
     "capture_mismatch(capture, inputs) -> None | reason"},
    {NULL, NULL, 0, NULL},
};

int tt_py_add_capture_type(PyObject *mod) {
  if (PyType_Ready(&CaptureType) < 0) return -1;
  Py_INCREF(&CaptureType);
  return PyModule_AddObject(mod, "Capture", (PyObject *)&CaptureType);
}
