/* The op table and the engine's enumerations as Python data, so the
 * Python front end takes op codes, attribute schemas, kernel op codes and
 * dtype codes from the engine instead of restating them
 * (python/torchtpu/ir.py builds its typed builders from these).
 *
 *   op_table() -> list indexed by tt_op_t of
 *       (name, min_operands, max_operands, flags, fields)
 *     fields: tuple of (name, kind, count, flags), kind "int" | "ints" |
 *     "list" | "float", flags the TT_ATTR_* bits.
 *   enums() -> {enumeration: {python name: value}} for the kernel op
 *     enumerations the lowering passes as attributes, and "dtype".
 *   op_flags() -> {flag name: bit} (TT_OPF_*), attr_flags() likewise. */
#include "binding.h"
#include "torchtpu/op_table.h"

typedef struct tt_py_enum_entry_s {
  const char *name; /* as the Python lowering spells it */
  int64_t value;
} tt_py_enum_entry_t;

/* The elementwise functions' names come from their rows in
 * torchtpu/kernels.h (dict order = code order). */
#define TT_PY_EW_ENTRY_(prefix, suffix, name) {name, prefix##suffix},
#define TT_PY_UNARY_(suffix, name, stablehlo, tier1) TT_PY_EW_ENTRY_(TT_UN_, suffix, name)
#define TT_PY_BINARY_(suffix, name, stablehlo, tier1) TT_PY_EW_ENTRY_(TT_BIN_, suffix, name)
static const tt_py_enum_entry_t unary_[] = {TT_UNARY_OPS(TT_PY_UNARY_)};
static const tt_py_enum_entry_t binary_[] = {TT_BINARY_OPS(TT_PY_BINARY_)};
#undef TT_PY_UNARY_
#undef TT_PY_BINARY_
#undef TT_PY_EW_ENTRY_

static const tt_py_enum_entry_t reduce_[] = {
    {"sum", TT_RED_SUM}, {"mean", TT_RED_MEAN},     {"prod", TT_RED_PROD},
    {"max", TT_RED_MAX}, {"min", TT_RED_MIN},       {"argmax", TT_RED_ARGMAX},
    {"argmin", TT_RED_ARGMIN}, {"any", TT_RED_ANY}, {"all", TT_RED_ALL},
};
_Static_assert(sizeof(reduce_) / sizeof(reduce_[0]) == TT_RED_COUNT,
               "a reduce op has no Python name");

static const tt_py_enum_entry_t scan_[] = {{"sum", TT_SCAN_SUM}, {"prod", TT_SCAN_PROD}};
static const tt_py_enum_entry_t rng_[] = {
    {"uniform", TT_RNG_UNIFORM}, {"normal", TT_RNG_NORMAL}, {"bernoulli", TT_RNG_BERNOULLI}};
static const tt_py_enum_entry_t scatter_reduce_[] = {
    {"sum", TT_SCATTER_REDUCE_SUM},   {"prod", TT_SCATTER_REDUCE_PROD},
    {"mean", TT_SCATTER_REDUCE_MEAN}, {"amax", TT_SCATTER_REDUCE_AMAX},
    {"amin", TT_SCATTER_REDUCE_AMIN},
};
_Static_assert(sizeof(scatter_reduce_) / sizeof(scatter_reduce_[0]) == TT_SCATTER_REDUCE_COUNT,
               "a scatter reduction has no Python name");
static const tt_py_enum_entry_t cumulative_[] = {
    {"max", TT_CUM_MAX}, {"max_index", TT_CUM_MAX_INDEX}, {"min", TT_CUM_MIN},
    {"min_index", TT_CUM_MIN_INDEX}, {"logsumexp", TT_CUM_LOGSUMEXP},
};
_Static_assert(sizeof(cumulative_) / sizeof(cumulative_[0]) == TT_CUM_COUNT,
               "a cumulative op has no Python name");
static const tt_py_enum_entry_t linalg_[] = {
    {"cholesky", TT_LINALG_CHOLESKY}, {"lu", TT_LINALG_LU},       {"trsm", TT_LINALG_TRSM},
    {"geqrf", TT_LINALG_GEQRF},       {"orgqr", TT_LINALG_ORGQR}, {"ormqr", TT_LINALG_ORMQR},
    {"eigh", TT_LINALG_EIGH},         {"svd", TT_LINALG_SVD},
};
_Static_assert(sizeof(linalg_) / sizeof(linalg_[0]) == TT_LINALG_COUNT,
               "a linalg op has no Python name");
static const tt_py_enum_entry_t special_[] = {
    {"zeta", TT_SP_ZETA},
    {"chebyshev_polynomial_t", TT_SP_CHEB_T},
    {"chebyshev_polynomial_u", TT_SP_CHEB_U},
    {"chebyshev_polynomial_v", TT_SP_CHEB_V},
    {"chebyshev_polynomial_w", TT_SP_CHEB_W},
    {"shifted_chebyshev_polynomial_t", TT_SP_SHIFTED_CHEB_T},
    {"shifted_chebyshev_polynomial_u", TT_SP_SHIFTED_CHEB_U},
    {"shifted_chebyshev_polynomial_v", TT_SP_SHIFTED_CHEB_V},
    {"shifted_chebyshev_polynomial_w", TT_SP_SHIFTED_CHEB_W},
    {"hermite_polynomial_h", TT_SP_HERMITE_H},
    {"hermite_polynomial_he", TT_SP_HERMITE_HE},
    {"laguerre_polynomial_l", TT_SP_LAGUERRE_L},
    {"legendre_polynomial_p", TT_SP_LEGENDRE_P},
};
_Static_assert(sizeof(special_) / sizeof(special_[0]) == TT_SP_COUNT,
               "a special function has no Python name");
static const tt_py_enum_entry_t fft_[] = {
    {"c2c_forward", TT_FFT_C2C_FORWARD}, {"c2c_inverse", TT_FFT_C2C_INVERSE},
    {"r2c", TT_FFT_R2C}, {"c2r", TT_FFT_C2R},
};
_Static_assert(sizeof(fft_) / sizeof(fft_[0]) == TT_FFT_COUNT, "an fft kind has no Python name");
static const tt_py_enum_entry_t dtype_[] = {
    {"float32", TT_F32}, {"float64", TT_F64}, {"float16", TT_F16}, {"bfloat16", TT_BF16},
    {"int8", TT_I8},     {"uint8", TT_U8},    {"int16", TT_I16},   {"int32", TT_I32},
    {"int64", TT_I64},   {"bool", TT_BOOL},   {"complex64", TT_C64},
};
_Static_assert(sizeof(dtype_) / sizeof(dtype_[0]) == TT_DTYPE_COUNT, "a dtype has no Python name");
static const tt_py_enum_entry_t fused_kind_[] = {{"reduce", TT_FUSED_REDUCE}};

static const tt_py_enum_entry_t op_flags_[] = {
    {"input", TT_OPF_INPUT},           {"elementwise", TT_OPF_ELEMENTWISE},
    {"movement", TT_OPF_MOVEMENT},     {"complex_ok", TT_OPF_COMPLEX_OK},
    {"fusible", TT_OPF_FUSIBLE},       {"collective", TT_OPF_COLLECTIVE},
    {"spmd_manual", TT_OPF_SPMD_MANUAL}, {"random", TT_OPF_RANDOM},
};
static const tt_py_enum_entry_t attr_flags_[] = {
    {"optional", TT_ATTR_OPTIONAL}, {"reserved", TT_ATTR_RESERVED},
    {"pass_only", TT_ATTR_PASS_ONLY}};

#define TT_PY_ENUM(table) table, (Py_ssize_t)(sizeof(table) / sizeof(table[0]))

static PyObject *tt_py_enum_dict(const tt_py_enum_entry_t *e, Py_ssize_t n) {
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *v = PyLong_FromLongLong(e[i].value);
    if (!v || PyDict_SetItemString(d, e[i].name, v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
  }
  return d;
}

static PyObject *py_enums(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  struct {
    const char *name;
    const tt_py_enum_entry_t *entries;
    Py_ssize_t n;
  } tables[] = {
      {"unary", TT_PY_ENUM(unary_)},
      {"binary", TT_PY_ENUM(binary_)},
      {"reduce", TT_PY_ENUM(reduce_)},
      {"scan", TT_PY_ENUM(scan_)},
      {"rng", TT_PY_ENUM(rng_)},
      {"scatter_reduce", TT_PY_ENUM(scatter_reduce_)},
      {"cumulative", TT_PY_ENUM(cumulative_)},
      {"linalg", TT_PY_ENUM(linalg_)},
      {"special", TT_PY_ENUM(special_)},
      {"fft", TT_PY_ENUM(fft_)},
      {"dtype", TT_PY_ENUM(dtype_)},
      {"fused_kind", TT_PY_ENUM(fused_kind_)},
  };
  PyObject *out = PyDict_New();
  if (!out) return NULL;
  for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); ++t) {
    PyObject *d = tt_py_enum_dict(tables[t].entries, tables[t].n);
    if (!d || PyDict_SetItemString(out, tables[t].name, d) < 0) {
      Py_XDECREF(d);
      Py_DECREF(out);
      return NULL;
    }
    Py_DECREF(d);
  }
  return out;
}

static PyObject *py_op_flags(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  return tt_py_enum_dict(TT_PY_ENUM(op_flags_));
}

static PyObject *py_attr_flags(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  return tt_py_enum_dict(TT_PY_ENUM(attr_flags_));
}

static const char *const tt_py_attr_kind_names_[] = {
    [TT_ATTR_INT] = "int", [TT_ATTR_INTS] = "ints", [TT_ATTR_LIST] = "list",
    [TT_ATTR_FLOAT] = "float"};

static PyObject *py_op_table(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  PyObject *out = PyList_New(TT_OP_COUNT);
  if (!out) return NULL;
  for (int op = 0; op < TT_OP_COUNT; ++op) {
    const tt_op_info_t *info = tt_op_info((tt_op_t)op);
    if (!info) {
      Py_DECREF(out);
      return PyErr_Format(PyExc_SystemError, "op %d has no op table entry", op);
    }
    PyObject *fields = PyTuple_New(info->num_fields);
    if (!fields) {
      Py_DECREF(out);
      return NULL;
    }
    for (int32_t f = 0; f < info->num_fields; ++f) {
      const tt_attr_field_t *fd = &info->fields[f];
      PyObject *t = Py_BuildValue("(ssiI)", fd->name, tt_py_attr_kind_names_[fd->kind],
                                  (int)fd->count, (unsigned)fd->flags);
      if (!t) {
        Py_DECREF(fields);
        Py_DECREF(out);
        return NULL;
      }
      PyTuple_SET_ITEM(fields, f, t);
    }
    PyObject *entry = Py_BuildValue("(siiIN)", info->name, (int)info->min_operands,
                                    (int)info->max_operands, (unsigned)info->flags, fields);
    if (!entry) {
      Py_DECREF(out);
      return NULL;
    }
    PyList_SET_ITEM(out, op, entry);
  }
  return out;
}

PyMethodDef tt_py_methods_op_table[] = {
    {"op_table", py_op_table, METH_NOARGS,
     "op_table() -> [(name, min_operands, max_operands, flags, fields)] indexed by op code"},
    {"enums", py_enums, METH_NOARGS, "enums() -> {enumeration: {name: value}}"},
    {"op_flags", py_op_flags, METH_NOARGS, "op_flags() -> {flag: bit} (TT_OPF_*)"},
    {"attr_flags", py_attr_flags, METH_NOARGS, "attr_flags() -> {flag: bit} (TT_ATTR_*)"},
    {NULL, NULL, 0, NULL},
};
