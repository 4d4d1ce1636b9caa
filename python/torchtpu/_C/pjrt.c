/* torchtpu._C bindings of the PJRT backend (issue 7): open a plugin, list
 * its devices, compile StableHLO text, run it on host arrays. Clients and
 * executables are PyCapsules; an executable keeps its client alive on the C
 * side (include/torchtpu/pjrt.h), so the capsules may die in any order.
 * python/torchtpu/pjrt.py wraps these in classes and numpy conversion. */
#include "binding.h"
#include "torchtpu/pjrt.h"

#define TT_PY_PJRT_CLIENT "torchtpu._C.pjrt_client"
#define TT_PY_PJRT_EXECUTABLE "torchtpu._C.pjrt_executable"

static void client_capsule_free(PyObject *capsule) {
  tt_pjrt_client_release(PyCapsule_GetPointer(capsule, TT_PY_PJRT_CLIENT));
}

static void executable_capsule_free(PyObject *capsule) {
  tt_pjrt_executable_destroy(PyCapsule_GetPointer(capsule, TT_PY_PJRT_EXECUTABLE));
}

static tt_pjrt_client_t *as_client(PyObject *o) {
  if (!PyCapsule_IsValid(o, TT_PY_PJRT_CLIENT)) {
    PyErr_SetString(PyExc_TypeError, "expected a PJRT client (from _C.pjrt_open)");
    return NULL;
  }
  return PyCapsule_GetPointer(o, TT_PY_PJRT_CLIENT);
}

static tt_pjrt_executable_t *as_executable(PyObject *o) {
  if (!PyCapsule_IsValid(o, TT_PY_PJRT_EXECUTABLE)) {
    PyErr_SetString(PyExc_TypeError, "expected a PJRT executable (from _C.pjrt_compile)");
    return NULL;
  }
  return PyCapsule_GetPointer(o, TT_PY_PJRT_EXECUTABLE);
}

/* Fills one option from a dict item; the strings stay owned by the dict. */
static int option_from_item(PyObject *key, PyObject *value, tt_pjrt_option_t *out) {
  memset(out, 0, sizeof(*out));
  if (!PyUnicode_Check(key)) {
    PyErr_SetString(PyExc_TypeError, "PJRT client option names must be str");
    return 0;
  }
  out->name = PyUnicode_AsUTF8(key);
  if (!out->name) return 0;
  if (PyBool_Check(value)) {
    out->kind = TT_PJRT_OPTION_BOOL;
    out->bool_value = value == Py_True;
  } else if (PyLong_Check(value)) {
    out->kind = TT_PJRT_OPTION_INT64;
    out->int64_value = PyLong_AsLongLong(value);
    if (PyErr_Occurred()) return 0;
  } else if (PyFloat_Check(value)) {
    out->kind = TT_PJRT_OPTION_FLOAT;
    out->float_value = PyFloat_AsDouble(value);
  } else if (PyUnicode_Check(value)) {
    out->kind = TT_PJRT_OPTION_STRING;
    out->string_value = PyUnicode_AsUTF8(value);
    if (!out->string_value) return 0;
  } else {
    PyErr_Format(PyExc_TypeError, "PJRT client option '%s': value must be bool, int, float or "
                 "str, not %s", out->name, Py_TYPE(value)->tp_name);
    return 0;
  }
  return 1;
}

/* pjrt_open(path, options=None) -> client */
static PyObject *py_pjrt_open(PyObject *m, PyObject *args) {
  (void)m;
  const char *path;
  PyObject *options = Py_None;
  if (!PyArg_ParseTuple(args, "s|O", &path, &options)) return NULL;
  if (options != Py_None && !PyDict_Check(options)) {
    PyErr_SetString(PyExc_TypeError, "pjrt_open: options must be a dict or None");
    return NULL;
  }
  Py_ssize_t n = options == Py_None ? 0 : PyDict_Size(options);
  tt_pjrt_option_t *opts = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*opts));
  if (!opts) return PyErr_NoMemory();
  Py_ssize_t pos = 0, i = 0;
  PyObject *key, *value;
  while (n && PyDict_Next(options, &pos, &key, &value)) {
    if (!option_from_item(key, value, &opts[i++])) {
      PyMem_Free(opts);
      return NULL;
    }
  }
  tt_pjrt_client_t *client = NULL;
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tt_pjrt_client_create(path, opts, (size_t)n, &client);
  Py_END_ALLOW_THREADS
  PyMem_Free(opts);
  if (st) return tt_py_raise_status(st);
  PyObject *capsule = PyCapsule_New(client, TT_PY_PJRT_CLIENT, client_capsule_free);
  if (!capsule) tt_pjrt_client_release(client);
  return capsule;
}

/* pjrt_client_info(client) -> dict */
static PyObject *py_pjrt_client_info(PyObject *m, PyObject *arg) {
  (void)m;
  tt_pjrt_client_t *c = as_client(arg);
  if (!c) return NULL;
  int major, minor;
  tt_pjrt_client_api_version(c, &major, &minor);
  return Py_BuildValue("{s:s,s:s,s:s,s:(ii),s:n}", "library_path",
                       tt_pjrt_client_library_path(c), "platform_name",
                       tt_pjrt_client_platform_name(c), "platform_version",
                       tt_pjrt_client_platform_version(c), "api_version", major, minor,
                       "device_count", (Py_ssize_t)tt_pjrt_client_device_count(c));
}

/* pjrt_devices(client) -> [ {"index", "id", "kind"} ] */
static PyObject *py_pjrt_devices(PyObject *m, PyObject *arg) {
  (void)m;
  tt_pjrt_client_t *c = as_client(arg);
  if (!c) return NULL;
  size_t n = tt_pjrt_client_device_count(c);
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  for (size_t i = 0; i < n; i++) {
    tt_pjrt_device_info_t info;
    tt_status_t st = tt_pjrt_client_device_info(c, i, &info);
    if (st) {
      Py_DECREF(list);
      return tt_py_raise_status(st);
    }
    PyObject *d = Py_BuildValue("{s:n,s:i,s:s}", "index", (Py_ssize_t)i, "id", info.id, "kind",
                                info.kind);
    if (!d) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, d);
  }
  return list;
}

/* pjrt_compile(client, program, format="mlir", num_replicas=1,
 *              num_partitions=1, device_ordinal=-1, portable=False) -> exe
 * program: str or bytes (StableHLO text or bytecode). */
static PyObject *py_pjrt_compile(PyObject *m, PyObject *args, PyObject *kwargs) {
  (void)m;
  static char *kwlist[] = {"client", "program", "format", "num_replicas", "num_partitions",
                           "device_ordinal", "portable", "use_spmd_partitioning",
                           "device_assignment", NULL};
  PyObject *client_obj, *program, *assignment = Py_None;
  const char *format = "mlir";
  tt_pjrt_compile_config_t config = tt_pjrt_compile_config_default();
  long long replicas = config.num_replicas, partitions = config.num_partitions,
            ordinal = config.device_ordinal;
  int portable = 0, spmd = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|sLLLppO", kwlist, &client_obj, &program,
                                   &format, &replicas, &partitions, &ordinal, &portable, &spmd,
                                   &assignment))
    return NULL;
  int64_t ids[TT_SHARDING_MAX_DEVICES];
  if (assignment != Py_None) {
    PyObject *fa = PySequence_Fast(assignment, "pjrt_compile: device_assignment must be a "
                                   "sequence of device ids");
    if (!fa) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fa);
    if (replicas < 1 || partitions < 1 || n != replicas * partitions ||
        n > TT_SHARDING_MAX_DEVICES) {
      Py_DECREF(fa);
      PyErr_Format(PyExc_ValueError, "pjrt_compile: device_assignment has %zd ids for %lld "
                   "replicas x %lld partitions", n, replicas, partitions);
      return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) ids[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fa, i));
    Py_DECREF(fa);
    if (PyErr_Occurred()) return NULL;
    config.device_assignment = ids;
  }
  config.use_spmd_partitioning = spmd;
  tt_pjrt_client_t *c = as_client(client_obj);
  if (!c) return NULL;
  const char *text;
  Py_ssize_t size;
  if (PyUnicode_Check(program)) {
    text = PyUnicode_AsUTF8AndSize(program, &size);
    if (!text) return NULL;
  } else if (PyBytes_Check(program)) {
    text = PyBytes_AS_STRING(program);
    size = PyBytes_GET_SIZE(program);
  } else {
    PyErr_Format(PyExc_TypeError, "pjrt_compile: program must be str or bytes, not %s",
                 Py_TYPE(program)->tp_name);
    return NULL;
  }
  config.num_replicas = replicas;
  config.num_partitions = partitions;
  config.device_ordinal = ordinal;
  config.portable = portable;
  tt_pjrt_executable_t *exe = NULL;
  tt_status_t st;
  /* `program` is kept alive by the caller's reference for the call. */
  Py_BEGIN_ALLOW_THREADS
  st = tt_pjrt_compile(c, text, (size_t)size, format, &config, &exe);
  Py_END_ALLOW_THREADS
  if (st) return tt_py_raise_status(st);
  PyObject *capsule = PyCapsule_New(exe, TT_PY_PJRT_EXECUTABLE, executable_capsule_free);
  if (!capsule) tt_pjrt_executable_destroy(exe);
  return capsule;
}

/* pjrt_num_outputs(exe) -> int */
static PyObject *py_pjrt_num_outputs(PyObject *m, PyObject *arg) {
  (void)m;
  tt_pjrt_executable_t *e = as_executable(arg);
  if (!e) return NULL;
  return PyLong_FromSize_t(tt_pjrt_executable_num_outputs(e));
}

/* Parses one (data, shape, dtype) input; on success `view` must be released. */
static int parse_input(PyObject *item, Py_ssize_t index, Py_buffer *view, tt_shape_t *shape,
                       int *dtype) {
  PyObject *data, *dims;
  if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "OOi", &data, &dims, dtype)) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "pjrt_execute: input %zd must be a (buffer, shape, dtype) "
                 "tuple", index);
    return 0;
  }
  PyObject *seq = PySequence_Fast(dims, "pjrt_execute: shape must be a sequence of ints");
  if (!seq) return 0;
  Py_ssize_t rank = PySequence_Fast_GET_SIZE(seq);
  if (rank > TT_MAX_RANK) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "pjrt_execute: input %zd has rank %zd > %d", index, rank,
                 TT_MAX_RANK);
    return 0;
  }
  shape->rank = (int32_t)rank;
  for (Py_ssize_t d = 0; d < rank; d++) {
    shape->dims[d] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, d));
    if (PyErr_Occurred()) {
      Py_DECREF(seq);
      return 0;
    }
    if (shape->dims[d] < 0) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "pjrt_execute: input %zd has negative dimension %lld",
                   index, (long long)shape->dims[d]);
      return 0;
    }
  }
  Py_DECREF(seq);
  return PyObject_GetBuffer(data, view, PyBUF_C_CONTIGUOUS) == 0;
}

/* pjrt_execute(exe, inputs, device=0) -> [(bytearray, shape, dtype)]
 * inputs: a sequence of (C-contiguous buffer, shape, dtype code). */
static PyObject *py_pjrt_execute(PyObject *m, PyObject *args, PyObject *kwargs) {
  (void)m;
  static char *kwlist[] = {"executable", "inputs", "device", NULL};
  PyObject *exe_obj, *inputs;
  Py_ssize_t device = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|n", kwlist, &exe_obj, &inputs, &device))
    return NULL;
  tt_pjrt_executable_t *e = as_executable(exe_obj);
  if (!e) return NULL;
  if (device < 0) {
    PyErr_Format(PyExc_IndexError, "pjrt_execute: device %zd out of range", device);
    return NULL;
  }
  PyObject *seq = PySequence_Fast(inputs, "pjrt_execute: inputs must be a sequence");
  if (!seq) return NULL;
  Py_ssize_t n_in = PySequence_Fast_GET_SIZE(seq);
  size_t n_out = tt_pjrt_executable_num_outputs(e);
  Py_buffer *views = PyMem_Calloc(n_in ? (size_t)n_in : 1, sizeof(*views));
  tt_pjrt_buffer_t **in_bufs = PyMem_Calloc(n_in ? (size_t)n_in : 1, sizeof(*in_bufs));
  tt_pjrt_buffer_t **out_bufs = PyMem_Calloc(n_out ? n_out : 1, sizeof(*out_bufs));
  tt_shape_t *shapes = PyMem_Calloc(n_in ? (size_t)n_in : 1, sizeof(*shapes));
  int *dtypes = PyMem_Calloc(n_in ? (size_t)n_in : 1, sizeof(*dtypes));
  PyObject *result = NULL;
  Py_ssize_t n_views = 0;
  if (!views || !in_bufs || !out_bufs || !shapes || !dtypes) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n_in; i++) {
    if (!parse_input(PySequence_Fast_GET_ITEM(seq, i), i, &views[i], &shapes[i], &dtypes[i]))
      goto done;
    n_views++;
  }
  tt_status_t st = NULL;
  tt_pjrt_client_t *c = tt_pjrt_executable_client(e);
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t i = 0; i < n_in && !st; i++)
    st = tt_pjrt_buffer_from_host(c, (size_t)device, (tt_dtype_t)dtypes[i], &shapes[i],
                                  views[i].buf, (size_t)views[i].len, &in_bufs[i]);
  if (!st) st = tt_pjrt_execute(e, (size_t)device, in_bufs, (size_t)n_in, out_bufs);
  Py_END_ALLOW_THREADS
  if (st) {
    tt_py_raise_status(st);
    goto done;
  }
  result = PyList_New((Py_ssize_t)n_out);
  if (!result) goto done;
  for (size_t i = 0; i < n_out; i++) {
    tt_pjrt_buffer_t *b = out_bufs[i];
    size_t nbytes = tt_pjrt_buffer_nbytes(b);
    PyObject *data = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)nbytes);
    if (!data) goto fail;
    Py_BEGIN_ALLOW_THREADS
    st = tt_pjrt_buffer_to_host(b, PyByteArray_AS_STRING(data), nbytes);
    Py_END_ALLOW_THREADS
    if (st) {
      Py_DECREF(data);
      tt_py_raise_status(st);
      goto fail;
    }
    const tt_shape_t *s = tt_pjrt_buffer_shape(b);
    PyObject *dims = PyTuple_New(s->rank);
    if (!dims) {
      Py_DECREF(data);
      goto fail;
    }
    for (int32_t d = 0; d < s->rank; d++)
      PyTuple_SET_ITEM(dims, d, PyLong_FromLongLong(s->dims[d]));
    PyObject *entry = Py_BuildValue("(NNi)", data, dims, (int)tt_pjrt_buffer_dtype(b));
    if (!entry) goto fail;
    PyList_SET_ITEM(result, (Py_ssize_t)i, entry);
  }
  goto done;
fail:
  Py_CLEAR(result);
done:
  for (Py_ssize_t i = 0; i < n_views; i++) PyBuffer_Release(&views[i]);
  for (Py_ssize_t i = 0; in_bufs && i < n_in; i++) tt_pjrt_buffer_destroy(in_bufs[i]);
  for (size_t i = 0; out_bufs && i < n_out; i++) tt_pjrt_buffer_destroy(out_bufs[i]);
  PyMem_Free(views);
  PyMem_Free(in_bufs);
  PyMem_Free(out_bufs);
  PyMem_Free(shapes);
  PyMem_Free(dtypes);
  Py_DECREF(seq);
  return result;
}

/* (bytearray, shape, dtype) of a buffer's contents; NULL with an exception. */
static PyObject *buffer_to_python(tt_pjrt_buffer_t *b) {
  size_t nbytes = tt_pjrt_buffer_nbytes(b);
  PyObject *data = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)nbytes);
  if (!data) return NULL;
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tt_pjrt_buffer_to_host(b, PyByteArray_AS_STRING(data), nbytes);
  Py_END_ALLOW_THREADS
  if (st) {
    Py_DECREF(data);
    return tt_py_raise_status(st);
  }
  const tt_shape_t *s = tt_pjrt_buffer_shape(b);
  PyObject *dims = PyTuple_New(s->rank);
  if (!dims) {
    Py_DECREF(data);
    return NULL;
  }
  for (int32_t d = 0; d < s->rank; d++) PyTuple_SET_ITEM(dims, d, PyLong_FromLongLong(s->dims[d]));
  return Py_BuildValue("(NNi)", data, dims, (int)tt_pjrt_buffer_dtype(b));
}

/* pjrt_executable_devices(exe) -> [device index] */
static PyObject *py_pjrt_executable_devices(PyObject *m, PyObject *arg) {
  (void)m;
  tt_pjrt_executable_t *e = as_executable(arg);
  if (!e) return NULL;
  size_t idx[TT_SHARDING_MAX_DEVICES], n = 0;
  tt_status_t st = tt_pjrt_executable_devices(e, idx, TT_SHARDING_MAX_DEVICES, &n);
  if (st) return tt_py_raise_status(st);
  if (n > TT_SHARDING_MAX_DEVICES) n = TT_SHARDING_MAX_DEVICES;
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  for (size_t i = 0; i < n; i++) PyList_SET_ITEM(list, (Py_ssize_t)i, PyLong_FromSize_t(idx[i]));
  return list;
}

/* pjrt_execute_devices(exe, per_device_inputs): every device's inputs are
 * copied to it (the order of pjrt_executable_devices), one execute runs
 * them all, every output comes back. */
static PyObject *py_pjrt_execute_devices(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *exe_obj, *lists;
  if (!PyArg_ParseTuple(args, "OO", &exe_obj, &lists)) return NULL;
  tt_pjrt_executable_t *e = as_executable(exe_obj);
  if (!e) return NULL;
  size_t order[TT_SHARDING_MAX_DEVICES], n_dev = 0;
  tt_status_t st = tt_pjrt_executable_devices(e, order, TT_SHARDING_MAX_DEVICES, &n_dev);
  if (st) return tt_py_raise_status(st);
  PyObject *outer = PySequence_Fast(lists, "pjrt_execute_devices: a sequence of input lists");
  if (!outer) return NULL;
  if ((size_t)PySequence_Fast_GET_SIZE(outer) != n_dev || n_dev > TT_SHARDING_MAX_DEVICES) {
    PyErr_Format(PyExc_ValueError, "pjrt_execute_devices: %zd input lists for an executable "
                 "on %zu devices", PySequence_Fast_GET_SIZE(outer), n_dev);
    Py_DECREF(outer);
    return NULL;
  }
  size_t n_out = tt_pjrt_executable_num_outputs(e);
  Py_ssize_t n_in = -1;
  PyObject *result = NULL;
  Py_buffer *views = NULL;
  tt_shape_t *shapes = NULL;
  int *dtypes = NULL;
  tt_pjrt_buffer_t **in_bufs = NULL, **out_bufs = NULL;
  size_t n_views = 0;
  for (size_t d = 0; d < n_dev; d++) {
    PyObject *inner = PySequence_Fast(PySequence_Fast_GET_ITEM(outer, d),
                                      "pjrt_execute_devices: each device's inputs must be a "
                                      "sequence");
    if (!inner) goto done;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(inner);
    if (n_in < 0) {
      n_in = k;
      size_t total = n_dev * (size_t)(n_in ? n_in : 1);
      views = PyMem_Calloc(total, sizeof(*views));
      shapes = PyMem_Calloc(total, sizeof(*shapes));
      dtypes = PyMem_Calloc(total, sizeof(*dtypes));
      in_bufs = PyMem_Calloc(total, sizeof(*in_bufs));
      out_bufs = PyMem_Calloc(n_dev * (n_out ? n_out : 1), sizeof(*out_bufs));
      if (!views || !shapes || !dtypes || !in_bufs || !out_bufs) {
        Py_DECREF(inner);
        PyErr_NoMemory();
        goto done;
      }
    }
    if (k != n_in) {
      Py_DECREF(inner);
      PyErr_Format(PyExc_ValueError, "pjrt_execute_devices: device %zu has %zd inputs, "
                   "device 0 has %zd", d, k, n_in);
      goto done;
    }
    for (Py_ssize_t i = 0; i < n_in; i++) {
      size_t j = d * (size_t)n_in + (size_t)i;
      if (!parse_input(PySequence_Fast_GET_ITEM(inner, i), i, &views[j], &shapes[j],
                       &dtypes[j])) {
        Py_DECREF(inner);
        goto done;
      }
      n_views = j + 1;
    }
    Py_DECREF(inner);
  }
  tt_pjrt_client_t *c = tt_pjrt_executable_client(e);
  Py_BEGIN_ALLOW_THREADS
  for (size_t d = 0; d < n_dev && !st; d++)
    for (Py_ssize_t i = 0; i < n_in && !st; i++) {
      size_t j = d * (size_t)n_in + (size_t)i;
      st = tt_pjrt_buffer_from_host(c, order[d], (tt_dtype_t)dtypes[j], &shapes[j],
                                    views[j].buf, (size_t)views[j].len, &in_bufs[j]);
    }
  if (!st) st = tt_pjrt_execute_devices(e, n_dev, in_bufs, (size_t)n_in, out_bufs);
  Py_END_ALLOW_THREADS
  if (st) {
    tt_py_raise_status(st);
    goto done;
  }
  result = PyList_New((Py_ssize_t)n_dev);
  for (size_t d = 0; result && d < n_dev; d++) {
    PyObject *row = PyList_New((Py_ssize_t)n_out);
    if (!row) {
      Py_CLEAR(result);
      break;
    }
    PyList_SET_ITEM(result, (Py_ssize_t)d, row);
    for (size_t k = 0; k < n_out; k++) {
      PyObject *entry = buffer_to_python(out_bufs[d * n_out + k]);
      if (!entry) {
        Py_CLEAR(result);
        break;
      }
      PyList_SET_ITEM(row, (Py_ssize_t)k, entry);
    }
  }
done:
  for (size_t i = 0; i < n_views; i++) PyBuffer_Release(&views[i]);
  for (size_t i = 0; in_bufs && i < n_dev * (size_t)(n_in > 0 ? n_in : 0); i++)
    tt_pjrt_buffer_destroy(in_bufs[i]);
  for (size_t i = 0; out_bufs && i < n_dev * n_out; i++) tt_pjrt_buffer_destroy(out_bufs[i]);
  PyMem_Free(views);
  PyMem_Free(shapes);
  PyMem_Free(dtypes);
  PyMem_Free(in_bufs);
  PyMem_Free(out_bufs);
  Py_DECREF(outer);
  return result;
}

/* pjrt_engine_enable(client, fallback=False): route the engine's executions
 * through client (docs/pjrt.md); before the runtime starts. */
static PyObject *py_pjrt_engine_enable(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *capsule;
  int fallback = 0;
  if (!PyArg_ParseTuple(args, "O|p", &capsule, &fallback)) return NULL;
  tt_pjrt_client_t *c = as_client(capsule);
  if (!c) return NULL;
  tt_pjrt_engine_enable(c, fallback);
  Py_RETURN_NONE;
}

/* pjrt_engine_info() -> None, or dict(library_path, platform_name,
 * device_count, cached_graphs) of the routed client. */
static PyObject *py_pjrt_engine_info(PyObject *m, PyObject *a) {
  (void)m;
  (void)a;
  tt_pjrt_client_t *c = tt_pjrt_engine_enabled() ? tt_pjrt_engine_client() : NULL;
  if (!c) Py_RETURN_NONE;
  return Py_BuildValue("{s:s,s:s,s:n,s:n}", "library_path", tt_pjrt_client_library_path(c),
                       "platform_name", tt_pjrt_client_platform_name(c), "device_count",
                       (Py_ssize_t)tt_pjrt_client_device_count(c), "cached_graphs",
                       (Py_ssize_t)tt_pjrt_engine_cache_size());
}

/* ---- ahead-of-time compile for a topology (src/backends/pjrt/topology.c) ---- */

#define TT_PY_PJRT_TOPOLOGY "torchtpu._C.pjrt_topology"

static void topology_capsule_free(PyObject *capsule) {
  tt_pjrt_topology_destroy(PyCapsule_GetPointer(capsule, TT_PY_PJRT_TOPOLOGY));
}

static tt_pjrt_topology_t *as_topology(PyObject *o) {
  if (!PyCapsule_IsValid(o, TT_PY_PJRT_TOPOLOGY)) {
    PyErr_SetString(PyExc_TypeError, "expected a PJRT topology (from _C.pjrt_topology_open)");
    return NULL;
  }
  return PyCapsule_GetPointer(o, TT_PY_PJRT_TOPOLOGY);
}

/* pjrt_topology_open(path, name, options=None) -> topology; no client. */
static PyObject *py_pjrt_topology_open(PyObject *m, PyObject *args) {
  (void)m;
  const char *path, *name;
  PyObject *options = Py_None;
  if (!PyArg_ParseTuple(args, "ss|O", &path, &name, &options)) return NULL;
  if (options != Py_None && !PyDict_Check(options)) {
    PyErr_SetString(PyExc_TypeError, "pjrt_topology_open: options must be a dict or None");
    return NULL;
  }
  Py_ssize_t n = options == Py_None ? 0 : PyDict_Size(options);
  tt_pjrt_option_t *opts = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*opts));
  if (!opts) return PyErr_NoMemory();
  Py_ssize_t pos = 0, i = 0;
  PyObject *key, *value;
  while (n && PyDict_Next(options, &pos, &key, &value)) {
    if (!option_from_item(key, value, &opts[i++])) {
      PyMem_Free(opts);
      return NULL;
    }
  }
  tt_pjrt_topology_t *topology = NULL;
  tt_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tt_pjrt_topology_create(path, name, opts, (size_t)n, &topology);
  Py_END_ALLOW_THREADS
  PyMem_Free(opts);
  if (st) return tt_py_raise_status(st);
  PyObject *capsule = PyCapsule_New(topology, TT_PY_PJRT_TOPOLOGY, topology_capsule_free);
  if (!capsule) tt_pjrt_topology_destroy(topology);
  return capsule;
}

/* pjrt_topology_info(topology) -> dict(name, library_path, platform_name,
 * platform_version, api_version, device_kinds) */
static PyObject *py_pjrt_topology_info(PyObject *m, PyObject *arg) {
  (void)m;
  tt_pjrt_topology_t *t = as_topology(arg);
  if (!t) return NULL;
  size_t n = tt_pjrt_topology_device_count(t);
  PyObject *kinds = PyList_New((Py_ssize_t)n);
  if (!kinds) return NULL;
  for (size_t i = 0; i < n; i++) {
    const char *kind;
    tt_status_t st = tt_pjrt_topology_device_kind(t, i, &kind);
    PyObject *s = st ? NULL : PyUnicode_FromString(kind);
    if (!s) {
      Py_DECREF(kinds);
      return st ? tt_py_raise_status(st) : NULL;
    }
    PyList_SET_ITEM(kinds, (Py_ssize_t)i, s);
  }
  int major, minor;
  tt_pjrt_topology_api_version(t, &major, &minor);
  return Py_BuildValue("{s:s,s:s,s:s,s:s,s:(ii),s:N}", "name", tt_pjrt_topology_name(t),
                       "library_path", tt_pjrt_topology_library_path(t), "platform_name",
                       tt_pjrt_topology_platform_name(t), "platform_version",
                       tt_pjrt_topology_platform_version(t), "api_version", major, minor,
                       "device_kinds", kinds);
}

/* pjrt_topology_compile(topology, program, format="mlir", num_replicas=1,
 *                       num_partitions=1) -> bytes (serialized executable) */
static PyObject *py_pjrt_topology_compile(PyObject *m, PyObject *args, PyObject *kwargs) {
  (void)m;
  static char *kwlist[] = {"topology", "program", "format", "num_replicas", "num_partitions",
                           "use_spmd_partitioning", NULL};
  PyObject *topology_obj, *program;
  const char *format = "mlir";
  tt_pjrt_compile_config_t config = tt_pjrt_compile_config_default();
  long long replicas = config.num_replicas, partitions = config.num_partitions;
  int spmd = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|sLLp", kwlist, &topology_obj, &program,
                                   &format, &replicas, &partitions, &spmd))
    return NULL;
  config.use_spmd_partitioning = spmd;
  tt_pjrt_topology_t *t = as_topology(topology_obj);
  if (!t) return NULL;
  const char *text;
  Py_ssize_t size;
  if (PyUnicode_Check(program)) {
    text = PyUnicode_AsUTF8AndSize(program, &size);
    if (!text) return NULL;
  } else if (PyBytes_Check(program)) {
    text = PyBytes_AS_STRING(program);
    size = PyBytes_GET_SIZE(program);
  } else {
    PyErr_Format(PyExc_TypeError, "pjrt_topology_compile: program must be str or bytes, not %s",
                 Py_TYPE(program)->tp_name);
    return NULL;
  }
  config.num_replicas = replicas;
  config.num_partitions = partitions;
  uint8_t *bytes = NULL;
  size_t nbytes = 0;
  tt_status_t st;
  /* `program` is kept alive by the caller's reference for the call. */
  Py_BEGIN_ALLOW_THREADS
  st = tt_pjrt_topology_compile(t, text, (size_t)size, format, &config, &bytes, &nbytes);
  Py_END_ALLOW_THREADS
  if (st) return tt_py_raise_status(st);
  PyObject *out = PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)nbytes);
  free(bytes);
  return out;
}

PyMethodDef tt_py_methods_pjrt[] = {
    {"pjrt_engine_enable", py_pjrt_engine_enable, METH_VARARGS,
     "pjrt_engine_enable(client, fallback=False): run the lazy engine's graphs through client"},
    {"pjrt_engine_info", py_pjrt_engine_info, METH_NOARGS,
     "pjrt_engine_info() -> None or dict(library_path, platform_name, device_count, "
     "cached_graphs)"},
    {"pjrt_open", py_pjrt_open, METH_VARARGS,
     "pjrt_open(path, options=None) -> client: load a PJRT C API plugin and create a client"},
    {"pjrt_client_info", py_pjrt_client_info, METH_O,
     "pjrt_client_info(client) -> dict(library_path, platform_name, platform_version, "
     "api_version, device_count)"},
    {"pjrt_devices", py_pjrt_devices, METH_O,
     "pjrt_devices(client) -> list of dict(index, id, kind), addressable devices"},
    {"pjrt_compile", (PyCFunction)(void (*)(void))py_pjrt_compile, METH_VARARGS | METH_KEYWORDS,
     "pjrt_compile(client, program, format='mlir', num_replicas=1, num_partitions=1, "
     "device_ordinal=-1, portable=False, use_spmd_partitioning=False, device_assignment=None) "
     "-> executable"},
    {"pjrt_executable_devices", py_pjrt_executable_devices, METH_O,
     "pjrt_executable_devices(executable) -> [client device index], in execution order"},
    {"pjrt_execute_devices", py_pjrt_execute_devices, METH_VARARGS,
     "pjrt_execute_devices(executable, [[(buffer, shape, dtype)] per device]) -> "
     "[[(bytearray, shape, dtype)] per device]"},
    {"pjrt_num_outputs", py_pjrt_num_outputs, METH_O, "pjrt_num_outputs(executable) -> int"},
    {"pjrt_execute", (PyCFunction)(void (*)(void))py_pjrt_execute, METH_VARARGS | METH_KEYWORDS,
     "pjrt_execute(executable, [(buffer, shape, dtype)], device=0) -> [(bytearray, shape, "
     "dtype)]"},
    {"pjrt_topology_open", py_pjrt_topology_open, METH_VARARGS,
     "pjrt_topology_open(path, name, options=None) -> topology: load a PJRT plugin (no client) "
     "and create the topology description `name` (e.g. libtpu's 'v5e:2x2')"},
    {"pjrt_topology_info", py_pjrt_topology_info, METH_O,
     "pjrt_topology_info(topology) -> dict(name, library_path, platform_name, platform_version, "
     "api_version, device_kinds)"},
    {"pjrt_topology_compile", (PyCFunction)(void (*)(void))py_pjrt_topology_compile,
     METH_VARARGS | METH_KEYWORDS,
     "pjrt_topology_compile(topology, program, format='mlir', num_replicas=1, num_partitions=1, "
     "use_spmd_partitioning=False) -> bytes: PJRT_Compile for the topology, then "
     "PJRT_Executable_Serialize"},
    {NULL, NULL, 0, NULL},
};
