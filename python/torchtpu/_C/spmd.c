/* torchtpu._C bindings of sharding annotations (issue 7).
 *
 *   sharding_set(tensor, spec) -> None: spec None clears; else
 *       (kind, tile_dims, devices, last_tile_dim_replicate, num_devices),
 *       kind "replicated" | "tiled" | "manual". ValueError when it does not
 *       fit the tensor (tt_sharding_validate's message).
 *   sharding_get(tensor) -> spec or None
 *   sharding_text(spec, rank) -> XLA's HloSharding text of spec
 *   op_names() -> [name of each tt_op_t, in enum order]
 */
#include <stdlib.h>
#include <string.h>

#include "binding.h"

static const char *tt_py_kind_name(tt_sharding_kind_t k) {
  return k == TT_SHARDING_TILED ? "tiled" : k == TT_SHARDING_MANUAL ? "manual" : "replicated";
}

PyObject *tt_py_sharding_to_python(const tt_sharding_t *s) {
  if (!s) Py_RETURN_NONE;
  PyObject *dims = PyTuple_New(s->num_tile_dims);
  int32_t nd = s->kind == TT_SHARDING_TILED ? s->num_devices : 0;
  PyObject *devs = PyTuple_New(nd);
  if (!dims || !devs) {
    Py_XDECREF(dims);
    Py_XDECREF(devs);
    return NULL;
  }
  for (int32_t d = 0; d < s->num_tile_dims; ++d)
    PyTuple_SET_ITEM(dims, d, PyLong_FromLongLong(s->tile_dims[d]));
  for (int32_t i = 0; i < nd; ++i) PyTuple_SET_ITEM(devs, i, PyLong_FromLong(s->devices[i]));
  return Py_BuildValue("(sNNOi)", tt_py_kind_name(s->kind), dims, devs,
                       s->last_tile_dim_replicate ? Py_True : Py_False, (int)s->num_devices);
}

/* Parses spec into a malloc'd sharding (*out NULL for None). */
int tt_py_sharding_from_python(PyObject *spec, tt_sharding_t **out) {
  *out = NULL;
  if (spec == Py_None) return 1;
  const char *kind;
  PyObject *dims, *devs;
  int last = 0, num_devices = 0;
  if (!PyArg_ParseTuple(spec, "sOOpi", &kind, &dims, &devs, &last, &num_devices)) return 0;
  tt_sharding_kind_t k;
  if (!strcmp(kind, "replicated")) k = TT_SHARDING_REPLICATED;
  else if (!strcmp(kind, "tiled")) k = TT_SHARDING_TILED;
  else if (!strcmp(kind, "manual")) k = TT_SHARDING_MANUAL;
  else {
    PyErr_Format(PyExc_ValueError, "sharding kind must be replicated, tiled or manual, got %s",
                 kind);
    return 0;
  }
  PyObject *fd = PySequence_Fast(dims, "tile_dims must be a sequence");
  PyObject *fv = fd ? PySequence_Fast(devs, "devices must be a sequence") : NULL;
  if (!fv) {
    Py_XDECREF(fd);
    return 0;
  }
  Py_ssize_t ndims = PySequence_Fast_GET_SIZE(fd), ndev = PySequence_Fast_GET_SIZE(fv);
  tt_sharding_t *s = NULL;
  if (ndims > TT_MAX_RANK + 1 || ndev > TT_SHARDING_MAX_DEVICES) {
    PyErr_Format(PyExc_ValueError, "sharding: %zd tile dims / %zd devices exceed the limits "
                 "(%d / %d)", ndims, ndev, TT_MAX_RANK + 1, TT_SHARDING_MAX_DEVICES);
    goto fail;
  }
  s = calloc(1, tt_sharding_size((int32_t)ndev));
  if (!s) {
    PyErr_NoMemory();
    goto fail;
  }
  s->kind = k;
  s->num_tile_dims = (int32_t)ndims;
  s->last_tile_dim_replicate = last;
  s->num_devices = num_devices;
  for (Py_ssize_t d = 0; d < ndims; ++d) {
    s->tile_dims[d] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fd, d));
    if (PyErr_Occurred()) goto fail;
  }
  if (k == TT_SHARDING_TILED && ndev != num_devices) {
    PyErr_Format(PyExc_ValueError, "sharding: %zd devices listed for num_devices %d", ndev,
                 num_devices);
    goto fail;
  }
  for (Py_ssize_t i = 0; i < ndev && k == TT_SHARDING_TILED; ++i) {
    s->devices[i] = (int32_t)PyLong_AsLong(PySequence_Fast_GET_ITEM(fv, i));
    if (PyErr_Occurred()) goto fail;
  }
  Py_DECREF(fd);
  Py_DECREF(fv);
  *out = s;
  return 1;
fail:
  free(s);
  Py_DECREF(fd);
  Py_DECREF(fv);
  return 0;
}

static PyObject *py_sharding_set(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *t_obj, *spec;
  if (!PyArg_ParseTuple(args, "OO", &t_obj, &spec)) return NULL;
  tt_tensor_t *t;
  if (!tt_py_as_tensor(t_obj, &t)) return NULL;
  tt_sharding_t *s;
  if (!tt_py_sharding_from_python(spec, &s)) return NULL;
  tt_status_t st = tt_tensor_set_sharding(t, s);
  free(s);
  if (st) return tt_py_raise_status(st);
  Py_RETURN_NONE;
}

static PyObject *py_sharding_get(PyObject *m, PyObject *arg) {
  (void)m;
  tt_tensor_t *t;
  if (!tt_py_as_tensor(arg, &t)) return NULL;
  return tt_py_sharding_to_python(tt_tensor_sharding(t));
}

static PyObject *py_sharding_text(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *spec;
  int rank;
  if (!PyArg_ParseTuple(args, "Oi", &spec, &rank)) return NULL;
  tt_sharding_t *s;
  if (!tt_py_sharding_from_python(spec, &s)) return NULL;
  if (!s) return PyUnicode_FromString("{replicated}");
  tt_shape_t shape = {0};
  shape.rank = rank;
  for (int d = 0; d < rank && d < TT_MAX_RANK; ++d) shape.dims[d] = 1;
  tt_status_t st = rank < 0 || rank > TT_MAX_RANK
                       ? tt_status_make(TT_INVALID_ARGUMENT, "sharding: rank %d", rank)
                       : tt_sharding_validate(s, &shape);
  char *text = st ? NULL : tt_sharding_to_text(s);
  free(s);
  if (st) return tt_py_raise_status(st);
  if (!text) return PyErr_NoMemory();
  PyObject *r = PyUnicode_FromString(text);
  free(text);
  return r;
}

static PyObject *py_op_names(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  PyObject *list = PyList_New(TT_OP_COUNT);
  if (!list) return NULL;
  for (int op = 0; op < TT_OP_COUNT; ++op) {
    PyObject *v = PyUnicode_FromString(tt_op_name((tt_op_t)op));
    if (!v) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, op, v);
  }
  return list;
}

PyMethodDef tt_py_methods_spmd[] = {
    {"sharding_set", py_sharding_set, METH_VARARGS,
     "sharding_set(tensor, spec): annotate (spec None clears)"},
    {"sharding_get", py_sharding_get, METH_O, "sharding_get(tensor) -> spec or None"},
    {"sharding_text", py_sharding_text, METH_VARARGS,
     "sharding_text(spec, rank) -> HloSharding text"},
    {"op_names", py_op_names, METH_NOARGS, "names of the IR ops, in tt_op_t order"},
    {NULL, NULL, 0, NULL},
};
