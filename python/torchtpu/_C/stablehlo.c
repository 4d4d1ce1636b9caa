/* torchtpu._C bindings of StableHLO emission (issue 7).
 *
 *   stablehlo_text(tensors, name=None) -> str
 *   stablehlo_emit(tensors, with_values=False) -> (text, inputs)
 *       inputs: one tuple per @main argument, in order:
 *       (key, kind, dtype, shape, value) with kind "param" (device data) or
 *       "scalar" (runtime scalar); value is the scalar's number, a param's
 *       bytes when with_values, else None. key matches stablehlo_tensor_key.
 *   stablehlo_emit_spmd(tensors, with_values=False) -> (text, inputs,
 *       (in_shardings, out_shardings)): as stablehlo_emit, plus the sharding
 *       of every argument and result (None where unannotated).
 *   stablehlo_tensor_key(tensor) -> int or None: the key of the device data
 *       a tensor holds (materialized, or pending as plain device data).
 *   stablehlo_lowering_table() -> list: per opcode, how it is lowered (None
 *       where an op has none).
 */
#include <stdint.h>
#include <stdlib.h>

#include "binding.h"
#include "torchtpu/stablehlo.h"

/* A referenced node standing for t: its pending IR, or for a materialized
 * tensor the PARAM node the engine uses for its data (found through a
 * throwaway identity reshape, the engine's public way to make it). */
static tt_status_t tt_py_shlo_node(tt_tensor_t *t, tt_node_t **out) {
  *out = NULL;
  tt_node_t *n = tt_tensor_node(t);
  if (n) {
    tt_node_retain(n);
    *out = n;
    return NULL;
  }
  const tt_shape_t *s = tt_tensor_shape(t);
  tt_tensor_t *tmp = NULL;
  TT_RETURN_IF_ERROR(tt_tensor_op(TT_OP_RESHAPE, tt_tensor_device(t), &t, 1, s->dims, s->rank,
                                  NULL, 0, &tmp));
  tt_node_t *r = tt_tensor_node(tmp);
  if (r && r->num_operands == 1) {
    *out = r->operands[0];
    tt_node_retain(*out);
  }
  tt_tensor_release(tmp);
  if (!*out) return tt_status_make(TT_INTERNAL, "stablehlo: no data node for a tensor");
  return NULL;
}

static int64_t tt_py_shlo_key(const tt_node_t *n) {
  return n->op == TT_OP_PARAM ? (int64_t)(intptr_t)n->buffer : (int64_t)(intptr_t)n;
}

/* Nodes of tensors (referenced; release with tt_py_shlo_release). */
static int tt_py_shlo_nodes(PyObject *seq, tt_node_t ***out, Py_ssize_t *n) {
  tt_tensor_t **ts = NULL;
  if (!tt_py_tensor_array(seq, &ts, n)) return 0;
  tt_node_t **nodes = PyMem_Malloc(sizeof(*nodes) * (size_t)(*n ? *n : 1));
  if (!nodes) {
    PyMem_Free(ts);
    PyErr_NoMemory();
    return 0;
  }
  for (Py_ssize_t i = 0; i < *n; ++i) {
    tt_status_t st = tt_py_shlo_node(ts[i], &nodes[i]);
    if (st) {
      for (Py_ssize_t k = 0; k < i; ++k) tt_node_release(nodes[k]);
      PyMem_Free(nodes);
      PyMem_Free(ts);
      tt_py_raise_status(st);
      return 0;
    }
  }
  PyMem_Free(ts);
  *out = nodes;
  return 1;
}

static void tt_py_shlo_release(tt_node_t **nodes, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; ++i) tt_node_release(nodes[i]);
  PyMem_Free(nodes);
}

static PyObject *tt_py_shlo_shape(const tt_shape_t *s) {
  PyObject *t = PyTuple_New(s->rank);
  if (!t) return NULL;
  for (int d = 0; d < s->rank; ++d) PyTuple_SET_ITEM(t, d, PyLong_FromLongLong(s->dims[d]));
  return t;
}

static PyObject *tt_py_shlo_input(const tt_node_t *n, int with_values) {
  PyObject *value = NULL;
  if (n->op == TT_OP_SCALAR) {
    value = tt_dtype_is_float(n->dtype) ? PyFloat_FromDouble(n->scalar_f)
                                        : PyLong_FromLongLong(n->scalar_i);
  } else if (with_values && (n->buffer || n->shards)) {
    size_t nbytes = (size_t)tt_shape_numel(&n->shape) * tt_dtype_size(n->dtype);
    value = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)nbytes);
    if (value && nbytes) {
      tt_status_t st;
      /* Sharded storage (SPMD mode, spmd_exec.h) is assembled here. */
      Py_BEGIN_ALLOW_THREADS st = n->shards ? tt_shard_set_to_host(n->shards, &n->shape, n->dtype,
                                                                   PyBytes_AS_STRING(value), nbytes)
                                            : tt_buffer_to_host(n->buffer,
                                                                PyBytes_AS_STRING(value), nbytes);
      Py_END_ALLOW_THREADS if (st) {
        Py_DECREF(value);
        return tt_py_raise_status(st);
      }
    }
  } else {
    value = Py_NewRef(Py_None);
  }
  if (!value) return NULL;
  PyObject *shape = tt_py_shlo_shape(&n->shape);
  if (!shape) {
    Py_DECREF(value);
    return NULL;
  }
  return Py_BuildValue("(LsiNN)", (long long)tt_py_shlo_key(n),
                       n->op == TT_OP_SCALAR ? "scalar" : "param", (int)n->dtype, shape, value);
}

/* (in_shardings, out_shardings): the sharding (tt_py_sharding_to_python)
 * of every @main argument and result. */
static PyObject *tt_py_shlo_shardings(tt_node_t **inputs, int32_t ni, tt_node_t **roots,
                                      Py_ssize_t nr) {
  PyObject *ins = PyList_New(ni), *outs = PyList_New(nr);
  if (!ins || !outs) goto fail;
  for (int32_t i = 0; i < ni; ++i) {
    PyObject *v = tt_py_sharding_to_python(inputs[i]->sharding);
    if (!v) goto fail;
    PyList_SET_ITEM(ins, i, v);
  }
  for (Py_ssize_t r = 0; r < nr; ++r) {
    PyObject *v = tt_py_sharding_to_python(roots[r]->sharding);
    if (!v) goto fail;
    PyList_SET_ITEM(outs, r, v);
  }
  return Py_BuildValue("(NN)", ins, outs);
fail:
  Py_XDECREF(ins);
  Py_XDECREF(outs);
  return NULL;
}

static PyObject *tt_py_shlo_emit_common(PyObject *seq, int with_values, int want_inputs,
                                        int want_shardings) {
  tt_node_t **nodes = NULL;
  Py_ssize_t n = 0;
  if (!tt_py_shlo_nodes(seq, &nodes, &n)) return NULL;
  char *text = NULL;
  tt_node_t **inputs = NULL;
  int32_t ni = 0;
  tt_status_t st = tt_stablehlo_emit(nodes, (int32_t)n, &text, &inputs, &ni);
  if (st) {
    tt_py_shlo_release(nodes, n);
    return tt_py_raise_status(st);
  }
  PyObject *py_text = PyUnicode_FromString(text);
  free(text);
  PyObject *list = want_inputs ? PyList_New(ni) : NULL;
  if (py_text && list) {
    for (int32_t i = 0; i < ni; ++i) {
      PyObject *item = tt_py_shlo_input(inputs[i], with_values);
      if (!item) {
        Py_CLEAR(list);
        break;
      }
      PyList_SET_ITEM(list, i, item);
    }
  }
  PyObject *shardings = NULL;
  if (want_shardings && py_text && list) shardings = tt_py_shlo_shardings(inputs, ni, nodes, n);
  free(inputs);
  tt_py_shlo_release(nodes, n);
  if (!py_text || (want_inputs && !list) || (want_shardings && !shardings)) {
    Py_XDECREF(py_text);
    Py_XDECREF(list);
    Py_XDECREF(shardings);
    return NULL;
  }
  if (!want_inputs) return py_text;
  if (want_shardings) return Py_BuildValue("(NNN)", py_text, list, shardings);
  return Py_BuildValue("(NN)", py_text, list);
}

static PyObject *py_stablehlo_text(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *seq;
  if (!PyArg_ParseTuple(args, "O", &seq)) return NULL;
  return tt_py_shlo_emit_common(seq, 0, 0, 0);
}

static PyObject *py_stablehlo_emit(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *seq;
  int with_values = 0;
  if (!PyArg_ParseTuple(args, "O|p", &seq, &with_values)) return NULL;
  return tt_py_shlo_emit_common(seq, with_values, 1, 0);
}

static PyObject *py_stablehlo_emit_spmd(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *seq;
  int with_values = 0;
  if (!PyArg_ParseTuple(args, "O|p", &seq, &with_values)) return NULL;
  return tt_py_shlo_emit_common(seq, with_values, 1, 1);
}

static PyObject *py_stablehlo_tensor_key(PyObject *m, PyObject *arg) {
  (void)m;
  tt_tensor_t *t;
  if (!tt_py_as_tensor(arg, &t)) return NULL;
  tt_node_t *n = tt_tensor_node(t);
  if (n && n->op != TT_OP_PARAM) Py_RETURN_NONE;
  if (n) return PyLong_FromLongLong(tt_py_shlo_key(n));
  tt_status_t st = tt_py_shlo_node(t, &n);
  if (st) return tt_py_raise_status(st);
  PyObject *r = PyLong_FromLongLong(tt_py_shlo_key(n));
  tt_node_release(n);
  return r;
}

static PyObject *py_stablehlo_lowering_table(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  PyObject *list = PyList_New(TT_OP_COUNT);
  if (!list) return NULL;
  for (int op = 0; op < TT_OP_COUNT; ++op) {
    const char *s = tt_stablehlo_op_lowering((tt_op_t)op);
    PyObject *v = s ? PyUnicode_FromString(s) : Py_NewRef(Py_None);
    if (!v) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, op, v);
  }
  return list;
}

PyMethodDef tt_py_methods_stablehlo[] = {
    {"stablehlo_text", py_stablehlo_text, METH_VARARGS,
     "stablehlo_text(tensors) -> StableHLO text of the graph computing tensors"},
    {"stablehlo_emit", py_stablehlo_emit, METH_VARARGS,
     "stablehlo_emit(tensors, with_values=False) -> (text, [(key, kind, dtype, shape, value)])"},
    {"stablehlo_emit_spmd", py_stablehlo_emit_spmd, METH_VARARGS,
     "stablehlo_emit_spmd(tensors, with_values=False) -> (text, inputs, (in_shardings, "
     "out_shardings))"},
    {"stablehlo_tensor_key", py_stablehlo_tensor_key, METH_O,
     "stablehlo_tensor_key(tensor) -> key of its device data, or None"},
    {"stablehlo_lowering_table", py_stablehlo_lowering_table, METH_NOARGS,
     "per opcode: how StableHLO emission lowers it (None: no lowering)"},
    {NULL, NULL, 0, NULL},
};
