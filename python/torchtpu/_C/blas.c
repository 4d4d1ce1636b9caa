/* The external BLAS (MKL's sgemm) for large float32 GEMMs. */
#include "binding.h"

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

PyMethodDef tt_py_methods_blas[] = {
    {"blas_install", py_blas_install, METH_VARARGS,
     "blas_install(path, all=False): MKL's sgemm from that loaded library for large f32 GEMMs (all: every one it can take, else the CPU's default share)"},
    {"blas_info", py_blas_info, METH_NOARGS, "(active, products run by the external BLAS)"},
    {"blas_set_packed_limit", py_blas_set_packed_limit, METH_VARARGS,
     "bytes of packed weight copies kept at most (0: none)"},
    {"blas_packed_info", py_blas_packed_info, METH_NOARGS,
     "(packed weight copies kept, their bytes, products run on them)"},
    {NULL, NULL, 0, NULL},
};
