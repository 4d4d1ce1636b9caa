/* StableHLO emission, core: the text builder, typed values, generic ops,
 * constants, the shape and reduction helpers the lowerings share, the
 * simple ops' lowerings (and the graph inputs' registrations), graph
 * linearisation, and the module, which lowers each instruction through
 * the registrations' table (emit_table.c). The other op families'
 * lowerings live in emit_elementwise.c, emit_nn.c, emit_attention.c,
 * emit_layer_norm.c, emit_data.c and emit_spmd.c, each ending with its
 * registrations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/stablehlo/emit_internal.h"

/* ---- text ---- */

void tt_shlo_printf(tt_shlo_t *c, const char *fmt, ...) {
  va_list ap;
  if (c->err) return;
  va_start(ap, fmt);
  tt_strbuf_vprintf(&c->text, fmt, ap);
  va_end(ap);
  if (c->text.failed)
    c->err = tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory writing text");
}

void tt_shlo_line_start(tt_shlo_t *c) {
  tt_shlo_printf(c, "%*s", 2 * c->indent, "");
}

void tt_shlo_fail(tt_shlo_t *c, tt_status_t err) {
  if (c->err) {
    tt_status_free(err);
    return;
  }
  c->err = err;
}

int tt_shlo_bad(const tt_shlo_t *c, int n, const tt_shv_t *vs) {
  if (c->err) return 1;
  for (int i = 0; i < n; ++i)
    if (vs[i] < 0 || vs[i] >= c->num_vals) return 1;
  return 0;
}

const char *tt_shlo_elem(tt_dtype_t dt) {
  switch (dt) {
    case TT_F32: return "f32";
    case TT_F64: return "f64";
    case TT_F16: return "f16";
    case TT_BF16: return "bf16";
    case TT_I8: return "i8";
    case TT_U8: return "ui8";
    case TT_I16: return "i16";
    case TT_I32: return "i32";
    case TT_I64: return "i64";
    case TT_BOOL: return "i1";
    case TT_C64: return "complex<f32>";
    default:
      if (dt == TT_SHLO_U32) return "ui32";
      if (dt == TT_SHLO_U64) return "ui64";
      return "none";
  }
}

void tt_shlo_type(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s) {
  tt_shlo_printf(c, "tensor<");
  for (int d = 0; d < s->rank; ++d) tt_shlo_printf(c, "%lldx", (long long)s->dims[d]);
  tt_shlo_printf(c, "%s>", tt_shlo_elem(dt));
}

const tt_shv_info_t *tt_shlo_info(const tt_shlo_t *c, tt_shv_t v) { return &c->vals[v]; }
tt_dtype_t tt_shlo_dtype(const tt_shlo_t *c, tt_shv_t v) { return c->vals[v].dtype; }
const tt_shape_t *tt_shlo_shape(const tt_shlo_t *c, tt_shv_t v) { return &c->vals[v].shape; }

void tt_shlo_ref(tt_shlo_t *c, tt_shv_t v) {
  const tt_shv_info_t *i = &c->vals[v];
  if (i->ssa < 0) tt_shlo_printf(c, "%%arg%d", -i->ssa - 1);
  else if (i->res >= 0) tt_shlo_printf(c, "%%%d#%d", i->ssa, i->res);
  else tt_shlo_printf(c, "%%%d", i->ssa);
}

tt_shv_t tt_shlo_new_value(tt_shlo_t *c, int32_t ssa, int32_t res, tt_dtype_t dt,
                           const tt_shape_t *s) {
  if (c->err) return -1;
  if (c->num_vals == c->cap_vals) {
    int32_t ncap = c->cap_vals ? c->cap_vals * 2 : 1024;
    tt_shv_info_t *nv = realloc(c->vals, sizeof(*nv) * (size_t)ncap);
    if (!nv) {
      tt_shlo_fail(c, tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory"));
      return -1;
    }
    c->vals = nv;
    c->cap_vals = ncap;
  }
  tt_shv_info_t *i = &c->vals[c->num_vals];
  i->ssa = ssa;
  i->res = res;
  i->dtype = dt;
  i->shape = *s;
  i->unit_of = -1;
  i->sharding = NULL;
  return c->num_vals++;
}

tt_shape_t tt_shlo_dims(int32_t rank, const int64_t *dims) {
  tt_shape_t s;
  memset(&s, 0, sizeof(s));
  s.rank = rank;
  for (int d = 0; d < rank; ++d) s.dims[d] = dims[d];
  return s;
}

/* ---- attributes ---- */

void tt_shlo_attr(tt_shlo_attr_t *a, const char *fmt, ...) {
  if (a->overflow) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(a->s + a->n, sizeof(a->s) - a->n, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof(a->s) - a->n) {
    a->overflow = 1;
    return;
  }
  a->n += (size_t)n;
}

void tt_shlo_attr_list(tt_shlo_attr_t *a, const int64_t *v, int n) {
  tt_shlo_attr(a, "[");
  for (int i = 0; i < n; ++i) tt_shlo_attr(a, i ? ", %lld" : "%lld", (long long)v[i]);
  tt_shlo_attr(a, "]");
}

void tt_shlo_attr_i64s(tt_shlo_attr_t *a, const char *name, const int64_t *v, int n) {
  tt_shlo_attr(a, "%s%s = array<i64%s", a->n ? ", " : "", name, n ? ": " : "");
  for (int i = 0; i < n; ++i) tt_shlo_attr(a, i ? ", %lld" : "%lld", (long long)v[i]);
  tt_shlo_attr(a, ">");
}

void tt_shlo_attr_padding(tt_shlo_attr_t *a, const char *name, const int64_t *lo,
                          const int64_t *hi, int n) {
  tt_shlo_attr(a, "%s%s = dense<", a->n ? ", " : "", name);
  if (n == 0) {
    tt_shlo_attr(a, "0> : tensor<0x2xi64>");
    return;
  }
  tt_shlo_attr(a, "[");
  for (int i = 0; i < n; ++i)
    tt_shlo_attr(a, "%s[%lld, %lld]", i ? ", " : "", (long long)lo[i], (long long)hi[i]);
  tt_shlo_attr(a, "]> : tensor<%dx2xi64>", n);
}

/* ---- generic ops ---- */

static void tt_shlo_types(tt_shlo_t *c, int n, const tt_shv_t *args) {
  for (int i = 0; i < n; ++i) {
    if (i) tt_shlo_printf(c, ", ");
    tt_shlo_type(c, c->vals[args[i]].dtype, &c->vals[args[i]].shape);
  }
}

int32_t tt_shlo_op_begin(tt_shlo_t *c, const char *name, int nres, int nargs,
                         const tt_shv_t *args) {
  if (tt_shlo_bad(c, nargs, args)) return -1;
  int32_t ssa = c->next_ssa++;
  tt_shlo_line_start(c);
  if (nres == 1) tt_shlo_printf(c, "%%%d = ", ssa);
  else if (nres > 1) tt_shlo_printf(c, "%%%d:%d = ", ssa, nres);
  tt_shlo_printf(c, "\"%s\"(", name);
  for (int i = 0; i < nargs; ++i) {
    if (i) tt_shlo_printf(c, ", ");
    tt_shlo_ref(c, args[i]);
  }
  tt_shlo_printf(c, ")");
  return ssa;
}

void tt_shlo_region_begin(tt_shlo_t *c, int first, int nargs, const tt_dtype_t *dts,
                          tt_shv_t *out_args) {
  tt_shlo_printf(c, first ? " ({\n" : ", {\n");
  tt_shlo_line_start(c);
  tt_shlo_printf(c, "^bb0(");
  tt_shape_t scalar = {0};
  for (int i = 0; i < nargs; ++i) {
    int32_t ssa = c->next_ssa++;
    out_args[i] = tt_shlo_new_value(c, ssa, -1, dts[i], &scalar);
    tt_shlo_printf(c, "%s%%%d: ", i ? ", " : "", ssa);
    tt_shlo_type(c, dts[i], &scalar);
  }
  tt_shlo_printf(c, "):\n");
  c->indent += 1;
}

void tt_shlo_return(tt_shlo_t *c, int n, const tt_shv_t *vs) {
  if (tt_shlo_bad(c, n, vs)) return;
  tt_shlo_line_start(c);
  tt_shlo_printf(c, "\"stablehlo.return\"(");
  for (int i = 0; i < n; ++i) {
    if (i) tt_shlo_printf(c, ", ");
    tt_shlo_ref(c, vs[i]);
  }
  tt_shlo_printf(c, ") : (");
  tt_shlo_types(c, n, vs);
  tt_shlo_printf(c, ") -> ()\n");
}

void tt_shlo_region_end(tt_shlo_t *c) {
  c->indent -= 1;
  tt_shlo_line_start(c);
  tt_shlo_printf(c, "})");
}

tt_shv_t tt_shlo_op_end(tt_shlo_t *c, int32_t ssa, const char *attrs, int nargs,
                        const tt_shv_t *args, int nres, const tt_dtype_t *dts,
                        const tt_shape_t *shapes) {
  if (ssa < 0 || tt_shlo_bad(c, nargs, args)) return -1;
  if (attrs && attrs[0]) tt_shlo_printf(c, " {%s}", attrs);
  tt_shlo_printf(c, " : (");
  tt_shlo_types(c, nargs, args);
  tt_shlo_printf(c, ") -> ");
  if (nres != 1) tt_shlo_printf(c, "(");
  for (int i = 0; i < nres; ++i) {
    if (i) tt_shlo_printf(c, ", ");
    tt_shlo_type(c, dts[i], &shapes[i]);
  }
  if (nres != 1) tt_shlo_printf(c, ")");
  tt_shlo_printf(c, "\n");
  tt_shv_t first = -1;
  for (int i = 0; i < nres; ++i) {
    tt_shv_t v = tt_shlo_new_value(c, ssa, nres > 1 ? i : -1, dts[i], &shapes[i]);
    if (i == 0) first = v;
  }
  return c->err ? -1 : first;
}

tt_shv_t tt_shlo_op(tt_shlo_t *c, const char *name, int nargs, const tt_shv_t *args,
                    const char *attrs, tt_dtype_t dt, const tt_shape_t *s) {
  int32_t ssa = tt_shlo_op_begin(c, name, 1, nargs, args);
  return tt_shlo_op_end(c, ssa, attrs, nargs, args, 1, &dt, s);
}

/* ---- constants ---- */

static uint32_t tt_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* One element of dt as MLIR writes it in a dense attribute. */
static void tt_shlo_elem_text(char *buf, size_t n, tt_dtype_t dt, double f, int64_t i,
                              int is_int) {
  switch (dt) {
    case TT_F64: {
      double v = is_int ? (double)i : f;
      if (isfinite(v)) {
        snprintf(buf, n, "%.17e", v);
      } else {
        uint64_t u;
        memcpy(&u, &v, 8);
        snprintf(buf, n, "0x%016llX", (unsigned long long)u);
      }
      return;
    }
    case TT_F32: case TT_F16: case TT_BF16: {
      float v = (float)(is_int ? (double)i : f);
      uint32_t half = 0;
      if (dt == TT_F16) {
        half = tt_f32_to_f16(v);
        v = tt_f16_to_f32((uint16_t)half);
      } else if (dt == TT_BF16) {
        half = tt_f32_to_bf16(v);
        v = tt_bf16_to_f32((uint16_t)half);
      }
      if (isfinite(v)) snprintf(buf, n, "%.9e", (double)v);
      else if (dt == TT_F32) snprintf(buf, n, "0x%08X", tt_f32_bits(v));
      else snprintf(buf, n, "0x%04X", half);
      return;
    }
    case TT_BOOL:
      snprintf(buf, n, "%s", (is_int ? i != 0 : f != 0) ? "true" : "false");
      return;
    case TT_U8: {
      int64_t v = is_int ? i : (int64_t)f;
      snprintf(buf, n, "%lld", (long long)(uint8_t)v);
      return;
    }
    default: {
      int64_t v = is_int ? i : (int64_t)f;
      if (dt == TT_I8) v = (int8_t)v;
      else if (dt == TT_I16) v = (int16_t)v;
      else if (dt == TT_I32) v = (int32_t)v;
      snprintf(buf, n, "%lld", (long long)v);
      return;
    }
  }
}

static tt_shv_t tt_shlo_splat(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s, double f,
                              int64_t i, int is_int) {
  if (c->err) return -1;
  char e[64];
  tt_shlo_elem_text(e, sizeof(e), dt, f, i, is_int);
  int32_t ssa = tt_shlo_op_begin(c, "stablehlo.constant", 1, 0, NULL);
  tt_shlo_printf(c, " {value = dense<%s> : ", e);
  tt_shlo_type(c, dt, s);
  tt_shlo_printf(c, "}");
  return tt_shlo_op_end(c, ssa, NULL, 0, NULL, 1, &dt, s);
}

tt_shv_t tt_shlo_const_f(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s, double v) {
  return tt_shlo_splat(c, dt, s, v, 0, 0);
}

tt_shv_t tt_shlo_const_i(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s, int64_t v) {
  return tt_shlo_splat(c, dt, s, 0, v, 1);
}

tt_shv_t tt_shlo_scalar(tt_shlo_t *c, tt_dtype_t dt, double v) {
  tt_shape_t s = {0};
  return tt_dtype_is_float(dt) ? tt_shlo_const_f(c, dt, &s, v)
                               : tt_shlo_const_i(c, dt, &s, (int64_t)v);
}

tt_shv_t tt_shlo_like(tt_shlo_t *c, tt_shv_t v, double value) {
  if (tt_shlo_bad(c, 1, &v)) return -1;
  tt_dtype_t dt = c->vals[v].dtype;
  tt_shape_t s = c->vals[v].shape;
  return tt_dtype_is_float(dt) ? tt_shlo_const_f(c, dt, &s, value)
                               : tt_shlo_const_i(c, dt, &s, (int64_t)value);
}

static void tt_shlo_dense_rec(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s, int d,
                              const double *vals, int64_t *pos) {
  if (d == s->rank) {
    char e[64];
    tt_shlo_elem_text(e, sizeof(e), dt, vals[*pos], (int64_t)vals[*pos],
                      !tt_dtype_is_float(dt));
    tt_shlo_printf(c, "%s", e);
    ++*pos;
    return;
  }
  tt_shlo_printf(c, "[");
  for (int64_t k = 0; k < s->dims[d]; ++k) {
    if (k) tt_shlo_printf(c, ", ");
    tt_shlo_dense_rec(c, dt, s, d + 1, vals, pos);
  }
  tt_shlo_printf(c, "]");
}

tt_shv_t tt_shlo_const_array(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s,
                             const double *vals) {
  if (c->err) return -1;
  int32_t ssa = tt_shlo_op_begin(c, "stablehlo.constant", 1, 0, NULL);
  tt_shlo_printf(c, " {value = dense<");
  int64_t pos = 0;
  tt_shlo_dense_rec(c, dt, s, 0, vals, &pos);
  tt_shlo_printf(c, "> : ");
  tt_shlo_type(c, dt, s);
  tt_shlo_printf(c, "}");
  return tt_shlo_op_end(c, ssa, NULL, 0, NULL, 1, &dt, s);
}

static int64_t tt_shlo_int_limit(tt_dtype_t dt, int hi) {
  switch (dt) {
    case TT_I8: return hi ? INT8_MAX : INT8_MIN;
    case TT_U8: return hi ? UINT8_MAX : 0;
    case TT_I16: return hi ? INT16_MAX : INT16_MIN;
    case TT_I32: return hi ? INT32_MAX : INT32_MIN;
    case TT_BOOL: return hi ? 1 : 0;
    default: return hi ? INT64_MAX : INT64_MIN;
  }
}

tt_shv_t tt_shlo_lowest(tt_shlo_t *c, tt_dtype_t dt) {
  tt_shape_t s = {0};
  if (tt_dtype_is_float(dt)) return tt_shlo_const_f(c, dt, &s, -INFINITY);
  return tt_shlo_const_i(c, dt, &s, tt_shlo_int_limit(dt, 0));
}

tt_shv_t tt_shlo_highest(tt_shlo_t *c, tt_dtype_t dt) {
  tt_shape_t s = {0};
  if (tt_dtype_is_float(dt)) return tt_shlo_const_f(c, dt, &s, INFINITY);
  return tt_shlo_const_i(c, dt, &s, tt_shlo_int_limit(dt, 1));
}

/* ---- shape and type helpers ---- */

tt_shv_t tt_shlo_convert(tt_shlo_t *c, tt_shv_t v, tt_dtype_t dt) {
  if (tt_shlo_bad(c, 1, &v)) return -1;
  if (c->vals[v].dtype == dt) return v;
  /* Anything -> bool is (x != 0), as the engine's convert kernel does. */
  if (dt == TT_BOOL) return tt_shlo_cmp(c, "NE", v, tt_shlo_like(c, v, 0));
  tt_shape_t s = c->vals[v].shape;
  return tt_shlo_op(c, "stablehlo.convert", 1, &v, NULL, dt, &s);
}

tt_shv_t tt_shlo_reshape(tt_shlo_t *c, tt_shv_t v, const tt_shape_t *s) {
  if (tt_shlo_bad(c, 1, &v)) return -1;
  if (tt_shape_equal(&c->vals[v].shape, s)) return v;
  tt_shv_t u = c->vals[v].unit_of;
  if (u >= 0 && tt_shape_equal(&c->vals[u].shape, s)) return u;
  return tt_shlo_op(c, "stablehlo.reshape", 1, &v, NULL, c->vals[v].dtype, s);
}

tt_shv_t tt_shlo_bcast_dims(tt_shlo_t *c, tt_shv_t v, const tt_shape_t *s,
                            const int64_t *dims) {
  if (tt_shlo_bad(c, 1, &v)) return -1;
  tt_shlo_attr_t a = {0};
  tt_shlo_attr_i64s(&a, "broadcast_dimensions", dims, c->vals[v].shape.rank);
  tt_shv_t r = tt_shlo_op(c, "stablehlo.broadcast_in_dim", 1, &v, a.s, c->vals[v].dtype, s);
  /* Same element count and dims in order: only unit dims were added. */
  int ordered = 1;
  for (int d = 1; d < c->vals[v].shape.rank; ++d) ordered &= dims[d] > dims[d - 1];
  if (r >= 0 && ordered && tt_shape_numel(s) == tt_shape_numel(&c->vals[v].shape))
    c->vals[r].unit_of = v;
  return r;
}

tt_shv_t tt_shlo_bcast_to(tt_shlo_t *c, tt_shv_t v, const tt_shape_t *s) {
  if (tt_shlo_bad(c, 1, &v)) return -1;
  const tt_shape_t *vs = &c->vals[v].shape;
  if (tt_shape_equal(vs, s)) return v;
  if (vs->rank > s->rank) {
    tt_shlo_fail(c, tt_status_make(TT_INTERNAL, "stablehlo: cannot broadcast rank %d to %d",
                                   vs->rank, s->rank));
    return -1;
  }
  int64_t dims[TT_MAX_RANK];
  for (int d = 0; d < vs->rank; ++d) dims[d] = s->rank - vs->rank + d;
  return tt_shlo_bcast_dims(c, v, s, dims);
}

tt_shv_t tt_shlo_transpose(tt_shlo_t *c, tt_shv_t v, const int64_t *perm) {
  if (tt_shlo_bad(c, 1, &v)) return -1;
  const tt_shape_t *vs = &c->vals[v].shape;
  tt_shape_t s = *vs;
  int ident = 1;
  for (int d = 0; d < vs->rank; ++d) {
    s.dims[d] = vs->dims[perm[d]];
    ident &= perm[d] == d;
  }
  if (ident) return v;
  tt_shlo_attr_t a = {0};
  tt_shlo_attr_i64s(&a, "permutation", perm, vs->rank);
  return tt_shlo_op(c, "stablehlo.transpose", 1, &v, a.s, c->vals[v].dtype, &s);
}

tt_shv_t tt_shlo_slice(tt_shlo_t *c, tt_shv_t v, const int64_t *start, const int64_t *limit,
                       const int64_t *step) {
  if (tt_shlo_bad(c, 1, &v)) return -1;
  const tt_shape_t *vs = &c->vals[v].shape;
  tt_shape_t s = *vs;
  int ident = 1;
  for (int d = 0; d < vs->rank; ++d) {
    s.dims[d] = limit[d] > start[d] ? (limit[d] - start[d] + step[d] - 1) / step[d] : 0;
    ident &= start[d] == 0 && limit[d] == vs->dims[d] && step[d] == 1;
  }
  if (ident) return v;
  tt_shlo_attr_t a = {0};
  tt_shlo_attr_i64s(&a, "start_indices", start, vs->rank);
  tt_shlo_attr_i64s(&a, "limit_indices", limit, vs->rank);
  tt_shlo_attr_i64s(&a, "strides", step, vs->rank);
  return tt_shlo_op(c, "stablehlo.slice", 1, &v, a.s, c->vals[v].dtype, &s);
}

tt_shv_t tt_shlo_concat(tt_shlo_t *c, int n, const tt_shv_t *vs, int64_t dim) {
  if (tt_shlo_bad(c, n, vs)) return -1;
  if (n == 1) return vs[0];
  tt_shape_t s = c->vals[vs[0]].shape;
  s.dims[dim] = 0;
  for (int i = 0; i < n; ++i) s.dims[dim] += c->vals[vs[i]].shape.dims[dim];
  tt_shlo_attr_t a = {0};
  tt_shlo_attr(&a, "dimension = %lld : i64", (long long)dim);
  return tt_shlo_op(c, "stablehlo.concatenate", n, vs, a.s, c->vals[vs[0]].dtype, &s);
}

tt_shv_t tt_shlo_iota(tt_shlo_t *c, tt_dtype_t dt, const tt_shape_t *s, int64_t dim) {
  tt_shlo_attr_t a = {0};
  tt_shlo_attr(&a, "iota_dimension = %lld : i64", (long long)dim);
  return tt_shlo_op(c, "stablehlo.iota", 0, NULL, a.s, dt, s);
}

/* ---- elementwise ---- */

tt_shv_t tt_shlo_un(tt_shlo_t *c, const char *name, tt_shv_t a) {
  if (tt_shlo_bad(c, 1, &a)) return -1;
  char full[96];
  snprintf(full, sizeof(full), "%s%s", strchr(name, '.') ? "" : "stablehlo.", name);
  tt_shape_t s = c->vals[a].shape;
  return tt_shlo_op(c, full, 1, &a, NULL, c->vals[a].dtype, &s);
}

tt_shv_t tt_shlo_bin(tt_shlo_t *c, const char *name, tt_shv_t a, tt_shv_t b) {
  tt_shv_t ab[2] = {a, b};
  if (tt_shlo_bad(c, 2, ab)) return -1;
  char full[96];
  snprintf(full, sizeof(full), "%s%s", strchr(name, '.') ? "" : "stablehlo.", name);
  tt_shape_t s = c->vals[a].shape;
  return tt_shlo_op(c, full, 2, ab, NULL, c->vals[a].dtype, &s);
}

tt_shv_t tt_shlo_bin_k(tt_shlo_t *c, const char *name, tt_shv_t a, double k) {
  return tt_shlo_bin(c, name, a, tt_shlo_like(c, a, k));
}

static const char *tt_shlo_compare_type(tt_dtype_t dt) {
  if (tt_dtype_is_float(dt)) return "FLOAT";
  if (dt == TT_U8 || dt == TT_BOOL || dt == TT_SHLO_U32 || dt == TT_SHLO_U64) return "UNSIGNED";
  return "SIGNED";
}

tt_shv_t tt_shlo_cmp(tt_shlo_t *c, const char *dir, tt_shv_t a, tt_shv_t b) {
  tt_shv_t ab[2] = {a, b};
  if (tt_shlo_bad(c, 2, ab)) return -1;
  tt_shlo_attr_t at = {0};
  tt_shlo_attr(&at,
               "comparison_direction = #stablehlo<comparison_direction %s>, "
               "compare_type = #stablehlo<comparison_type %s>",
               dir, tt_shlo_compare_type(c->vals[a].dtype));
  tt_shape_t s = c->vals[a].shape;
  return tt_shlo_op(c, "stablehlo.compare", 2, ab, at.s, TT_BOOL, &s);
}

tt_shv_t tt_shlo_select(tt_shlo_t *c, tt_shv_t p, tt_shv_t a, tt_shv_t b) {
  tt_shv_t pab[3] = {p, a, b};
  if (tt_shlo_bad(c, 3, pab)) return -1;
  tt_shape_t s = c->vals[a].shape;
  return tt_shlo_op(c, "stablehlo.select", 3, pab, NULL, c->vals[a].dtype, &s);
}

tt_shv_t tt_shlo_isnan(tt_shlo_t *c, tt_shv_t a) {
  if (tt_shlo_bad(c, 1, &a)) return -1;
  if (!tt_dtype_is_float(c->vals[a].dtype)) {
    tt_shape_t s = c->vals[a].shape;
    return tt_shlo_const_i(c, TT_BOOL, &s, 0);
  }
  return tt_shlo_cmp(c, "NE", a, a);
}

/* ---- reductions ---- */

void tt_shlo_region_binary(tt_shlo_t *c, int first, const char *name, tt_dtype_t dt) {
  tt_dtype_t dts[2] = {dt, dt};
  tt_shv_t args[2];
  tt_shlo_region_begin(c, first, 2, dts, args);
  tt_shv_t r = tt_shlo_bin(c, name, args[0], args[1]);
  tt_shlo_return(c, 1, &r);
  tt_shlo_region_end(c);
}

tt_shv_t tt_shlo_reduce(tt_shlo_t *c, tt_shv_t v, uint32_t mask, const char *name,
                        tt_shv_t init) {
  tt_shv_t args[2] = {v, init};
  if (tt_shlo_bad(c, 2, args)) return -1;
  const tt_shape_t *vs = &c->vals[v].shape;
  tt_shape_t out = {0};
  int64_t dims[TT_MAX_RANK];
  int nd = 0;
  for (int d = 0; d < vs->rank; ++d) {
    if (mask & (1u << d)) dims[nd++] = d;
    else out.dims[out.rank++] = vs->dims[d];
  }
  if (nd == 0) return v;
  tt_dtype_t dt = c->vals[v].dtype;
  int32_t ssa = tt_shlo_op_begin(c, "stablehlo.reduce", 1, 2, args);
  tt_shlo_region_binary(c, 1, name, dt);
  tt_shlo_attr_t a = {0};
  tt_shlo_attr_i64s(&a, "dimensions", dims, nd);
  return tt_shlo_op_end(c, ssa, a.s, 2, args, 1, &dt, &out);
}

tt_shv_t tt_shlo_reduce_window(tt_shlo_t *c, tt_shv_t v, tt_shv_t init, const char *name,
                               const int64_t *window, const int64_t *stride,
                               const int64_t *dilation, const int64_t *lo,
                               const int64_t *hi, const tt_shape_t *out_shape) {
  tt_shv_t args[2] = {v, init};
  if (tt_shlo_bad(c, 2, args)) return -1;
  int r = c->vals[v].shape.rank;
  tt_dtype_t dt = c->vals[v].dtype;
  int32_t ssa = tt_shlo_op_begin(c, "stablehlo.reduce_window", 1, 2, args);
  tt_shlo_region_binary(c, 1, name, dt);
  tt_shlo_attr_t a = {0};
  tt_shlo_attr_i64s(&a, "window_dimensions", window, r);
  tt_shlo_attr_i64s(&a, "window_strides", stride, r);
  tt_shlo_attr_i64s(&a, "window_dilations", dilation, r);
  tt_shlo_attr_padding(&a, "padding", lo, hi, r);
  return tt_shlo_op_end(c, ssa, a.s, 2, args, 1, &dt, out_shape);
}

void tt_shlo_region_select_index(tt_shlo_t *c, int first, int kind, tt_dtype_t vdt,
                                 tt_dtype_t idt) {
  tt_dtype_t dts[4] = {vdt, idt, vdt, idt};
  tt_shv_t p[4];
  tt_shlo_region_begin(c, first, 4, dts, p);
  tt_shv_t av = p[0], ai = p[1], bv = p[2], bi = p[3];
  int is_max = kind == 0 || kind == 2;
  int later_wins = kind >= 2;
  tt_shv_t better = tt_shlo_cmp(c, is_max ? "GT" : "LT", av, bv);
  tt_shv_t tie = tt_shlo_cmp(c, "EQ", av, bv);
  tt_shv_t idx_pref = tt_shlo_cmp(c, later_wins ? "GT" : "LT", ai, bi);
  tt_shv_t take_a = tt_shlo_bin(c, "or", better, tt_shlo_bin(c, "and", tie, idx_pref));
  if (tt_dtype_is_float(vdt)) {
    /* NaN beats every number; between two NaNs the index rule decides. */
    tt_shv_t a_nan = tt_shlo_isnan(c, av), b_nan = tt_shlo_isnan(c, bv);
    tt_shv_t b_num = tt_shlo_un(c, "not", b_nan);
    tt_shv_t if_a_nan = tt_shlo_bin(c, "or", b_num, idx_pref);
    tt_shv_t if_a_num = tt_shlo_bin(c, "and", b_num, take_a);
    take_a = tt_shlo_select(c, a_nan, if_a_nan, if_a_num);
  }
  tt_shv_t r[2] = {tt_shlo_select(c, take_a, av, bv), tt_shlo_select(c, take_a, ai, bi)};
  tt_shlo_return(c, 2, r);
  tt_shlo_region_end(c);
}

/* ---- the simple ops (one StableHLO op or a few each) ---- */

static tt_shv_t tt_shlo_lower_simple(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_shv_t x0 = in->num_operands > 0 ? ins->x[0] : -1;
  switch (in->op) {
    case TT_OP_WHERE: {
      tt_shv_t p = tt_shlo_bcast_to(c, ins->x[0], &in->shape);
      tt_shv_t a = tt_shlo_bcast_to(c, ins->x[1], &in->shape);
      tt_shv_t b = tt_shlo_bcast_to(c, ins->x[2], &in->shape);
      return tt_shlo_select(c, p, a, b);
    }
    case TT_OP_CONVERT: {
      tt_convert_attrs_t a;
      TT_ATTRS(in, &a);
      return tt_shlo_convert(c, x0, (tt_dtype_t)a.dtype);
    }
    case TT_OP_BROADCAST:
      return tt_shlo_bcast_to(c, x0, &in->shape);
    case TT_OP_RESHAPE:
      return tt_shlo_reshape(c, x0, &in->shape);
    case TT_OP_IOTA: {
      tt_iota_attrs_t a;
      TT_ATTRS(in, &a);
      double start = a.start, step = a.step;
      int is_float = tt_dtype_is_float(in->dtype);
      int integral = start == floor(start) && step == floor(step);
      tt_dtype_t work = (is_float || integral) ? in->dtype : TT_F64;
      if (in->dtype == TT_BOOL) work = TT_I64;
      tt_shv_t v = tt_shlo_iota(c, work, &in->shape, 0);
      if (step != 1) v = tt_shlo_bin_k(c, "multiply", v, step);
      if (start != 0) v = tt_shlo_bin_k(c, "add", v, start);
      if (work != in->dtype && in->dtype != TT_BOOL && tt_dtype_is_float(work))
        v = tt_shlo_un(c, "floor", v); /* the kernel truncates; iotas are >= 0 */
      return tt_shlo_convert(c, v, in->dtype);
    }
    case TT_OP_TRANSPOSE: {
      tt_transpose_attrs_t a;
      TT_ATTRS(in, &a);
      return tt_shlo_transpose(c, x0, a.perm.v);
    }
    case TT_OP_SLICE: {
      tt_slice_attrs_t a;
      TT_ATTRS(in, &a);
      return tt_shlo_slice(c, x0, a.start.v, a.limit.v, a.step.v);
    }
    case TT_OP_CONCAT: {
      tt_concat_attrs_t a;
      TT_ATTRS(in, &a);
      return tt_shlo_concat(c, in->num_operands, ins->x, a.dim);
    }
    case TT_OP_PAD: {
      tt_pad_attrs_t pad;
      TT_ATTRS(in, &pad);
      int r = in->shape.rank;
      tt_shv_t pv = tt_shlo_scalar(c, in->dtype, pad.value);
      tt_shv_t args[2] = {x0, pv};
      int64_t interior[TT_MAX_RANK] = {0};
      tt_shlo_attr_t a = {0};
      tt_shlo_attr_i64s(&a, "edge_padding_low", pad.lo.v, r);
      tt_shlo_attr_i64s(&a, "edge_padding_high", pad.hi.v, r);
      tt_shlo_attr_i64s(&a, "interior_padding", interior, r);
      return tt_shlo_op(c, "stablehlo.pad", 2, args, a.s, in->dtype, &in->shape);
    }
    case TT_OP_FLIP: {
      tt_flip_attrs_t fl;
      TT_ATTRS(in, &fl);
      int64_t dims[TT_MAX_RANK];
      int nd = 0;
      for (int d = 0; d < in->shape.rank; ++d)
        if ((uint64_t)fl.dims_mask & (1ull << d)) dims[nd++] = d;
      if (nd == 0) return x0;
      tt_shlo_attr_t a = {0};
      tt_shlo_attr_i64s(&a, "dimensions", dims, nd);
      return tt_shlo_op(c, "stablehlo.reverse", 1, &x0, a.s, in->dtype, &in->shape);
    }
    default:
      tt_shlo_fail(c, tt_status_make(TT_INTERNAL, "stablehlo: %s is not a simple op",
                                     tt_op_name(in->op)));
      return -1;
  }
}

/* ---- the module ---- */

static void tt_shlo_free(tt_shlo_t *c) {
  tt_strbuf_release(&c->text);
  free(c->vals);
  free(c->barrier_instr);
  free(c->barrier_val);
  for (int32_t i = 0; i < c->num_owned; ++i) free(c->owned[i]);
  free(c->owned);
  tt_status_free(c->err);
}

static void tt_shlo_type_text(char *buf, size_t n, tt_dtype_t dt, const tt_shape_t *s) {
  size_t used = (size_t)snprintf(buf, n, "tensor<");
  for (int d = 0; d < s->rank && used < n; ++d)
    used += (size_t)snprintf(buf + used, n - used, "%lldx", (long long)s->dims[d]);
  if (used < n) snprintf(buf + used, n - used, "%s>", tt_shlo_elem(dt));
}

tt_status_t tt_stablehlo_emit_graph(const tt_graph_t *g, const char *module_name,
                                    char **out_text) {
  *out_text = NULL;
  /* Unsound registrations (an op lowered twice): nothing is emitted. */
  const tt_shlo_table_t *lowerings = tt_shlo_table();
  if (!lowerings) return tt_shlo_table_check();
  tt_shlo_t c;
  memset(&c, 0, sizeof(c));
  tt_shv_t *vals = malloc(sizeof(*vals) * (size_t)(g->num_instrs ? g->num_instrs : 1));
  if (!vals) return tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory");
  for (int32_t i = 0; i < g->num_instrs; ++i) vals[i] = -1;
  const char *name = module_name ? module_name : "torchtpu";
  tt_shlo_spmd_t spmd;
  tt_status_t sst = tt_shlo_spmd_scan(g, &spmd);
  if (sst) {
    free(vals);
    return sst;
  }
  tt_shlo_printf(&c, "module @\"");
  for (const char *p = name; *p; ++p)
    tt_shlo_printf(&c, (*p == '"' || *p == '\\' || (unsigned char)*p < 32) ? "_" : "%c", *p);
  tt_shlo_printf(&c, "\"");
  if (spmd.num_partitions > 1 || spmd.num_replicas > 1)
    tt_shlo_printf(&c, " attributes {mhlo.num_partitions = %d : i32, mhlo.num_replicas = %d : i32}",
                   (int)spmd.num_partitions, (int)spmd.num_replicas);
  tt_shlo_printf(&c, " {\n  func.func @main(");
  for (int32_t k = 0; k < g->num_inputs; ++k) {
    const tt_instr_t *in = &g->instrs[g->input_instr[k]];
    tt_shlo_printf(&c, "%s%%arg%d: ", k ? ", " : "", k);
    tt_shlo_type(&c, in->dtype, &in->shape);
    if (spmd.sharded) tt_shlo_sharding_attr(&c, in->sharding);
    vals[g->input_instr[k]] = tt_shlo_new_value(&c, -k - 1, -1, in->dtype, &in->shape);
    if (spmd.sharded && vals[g->input_instr[k]] >= 0)
      c.vals[vals[g->input_instr[k]]].sharding = in->sharding;
  }
  tt_shlo_printf(&c, ") -> ");
  int paren = g->num_outputs != 1 || spmd.sharded;
  if (paren) tt_shlo_printf(&c, "(");
  for (int32_t r = 0; r < g->num_outputs; ++r) {
    const tt_instr_t *in = &g->instrs[g->output_instr[r]];
    if (r) tt_shlo_printf(&c, ", ");
    tt_shlo_type(&c, in->dtype, &in->shape);
    if (spmd.sharded) tt_shlo_sharding_attr(&c, in->sharding);
  }
  if (paren) tt_shlo_printf(&c, ")");
  tt_shlo_printf(&c, " {\n");
  c.indent = 2;
  for (int32_t i = 0; i < g->num_instrs && !c.err; ++i) {
    const tt_instr_t *in = &g->instrs[i];
    if (in->op == TT_OP_PARAM || in->op == TT_OP_SCALAR) continue;
    tt_shv_t small[16];
    tt_shv_t *xs = in->num_operands <= 16 ? small : malloc(sizeof(*xs) * (size_t)in->num_operands);
    if (!xs) {
      tt_shlo_fail(&c, tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory"));
      break;
    }
    for (int32_t k = 0; k < in->num_operands; ++k) xs[k] = vals[in->operands[k]];
    tt_shlo_instr_t ins = {in, xs};
    tt_shlo_lower_fn lower = (unsigned)in->op < TT_OP_COUNT ? lowerings->fn[in->op] : NULL;
    tt_shv_t v = -1;
    if (lower)
      v = lower(&c, &ins);
    else
      tt_shlo_fail(&c, tt_status_make(TT_UNIMPLEMENTED, "stablehlo: no lowering for op %s (%d)",
                                      tt_op_name(in->op), (int)in->op));
    if (xs != small) free(xs);
    if (v < 0 || c.err) {
      if (!c.err)
        c.err = tt_status_make(TT_INTERNAL, "stablehlo: lowering %s failed", tt_op_name(in->op));
      break;
    }
    /* Every lowering must produce exactly the IR's type: a mismatch is an
     * emitter bug, reported rather than written out. */
    const tt_shv_info_t *vi = tt_shlo_info(&c, v);
    if (vi->dtype != in->dtype || !tt_shape_equal(&vi->shape, &in->shape)) {
      char have[256], want[256];
      tt_shlo_type_text(have, sizeof(have), vi->dtype, &vi->shape);
      tt_shlo_type_text(want, sizeof(want), in->dtype, &in->shape);
      c.err = tt_status_make(TT_INTERNAL,
                             "stablehlo: the lowering of %s (instruction %%%d) made %s, the "
                             "IR says %s",
                             tt_op_name(in->op), i, have, want);
      break;
    }
    /* An annotated intermediate: the annotation is an identity custom call
     * the partitioner reads (as XLA's own frontends write it), unless the
     * lowering's last call already carries it (a manual region's target:
     * PyTorch/XLA puts the annotation on that call). */
    if (in->sharding && !tt_shlo_carries(tt_shlo_info(&c, v)->sharding, in->sharding))
      v = tt_shlo_sharding_call(&c, v, in->sharding);
    if (v < 0) break;
    vals[i] = v;
  }
  if (!c.err) {
    tt_shlo_line_start(&c);
    tt_shlo_printf(&c, "return");
    for (int32_t r = 0; r < g->num_outputs; ++r) {
      tt_shlo_printf(&c, r ? ", " : " ");
      tt_shlo_ref(&c, vals[g->output_instr[r]]);
    }
    for (int32_t r = 0; r < g->num_outputs; ++r) {
      const tt_instr_t *in = &g->instrs[g->output_instr[r]];
      tt_shlo_printf(&c, r ? ", " : " : ");
      tt_shlo_type(&c, in->dtype, &in->shape);
    }
    tt_shlo_printf(&c, "\n  }\n}\n");
  }
  free(vals);
  if (c.err) {
    tt_status_t st = c.err;
    c.err = NULL;
    tt_shlo_free(&c);
    return st;
  }
  *out_text = tt_strbuf_take(&c.text);
  tt_shlo_free(&c);
  return NULL;
}

/* ---- linearising nodes without the engine's visit marks ---- */

typedef struct tt_shlo_map_s {
  const tt_node_t **keys;
  int32_t *idx;
  size_t cap, count;
} tt_shlo_map_t;

static size_t tt_shlo_hash_ptr(const void *p, size_t cap) {
  return (size_t)tt_hash_finish((uint64_t)(uintptr_t)p) & (cap - 1);
}

static int32_t tt_shlo_map_get(const tt_shlo_map_t *m, const tt_node_t *n) {
  if (!m->cap) return -2;
  for (size_t i = tt_shlo_hash_ptr(n, m->cap);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i]) return -2;
    if (m->keys[i] == n) return m->idx[i];
  }
}

static int tt_shlo_map_put(tt_shlo_map_t *m, const tt_node_t *n, int32_t v) {
  if ((m->count + 1) * 2 > m->cap) {
    size_t ncap = m->cap ? m->cap * 2 : 256;
    const tt_node_t **nk = calloc(ncap, sizeof(*nk));
    int32_t *ni = calloc(ncap, sizeof(*ni));
    if (!nk || !ni) {
      free(nk);
      free(ni);
      return 0;
    }
    for (size_t i = 0; i < m->cap; ++i) {
      if (!m->keys[i]) continue;
      size_t j = tt_shlo_hash_ptr(m->keys[i], ncap);
      while (nk[j]) j = (j + 1) & (ncap - 1);
      nk[j] = m->keys[i];
      ni[j] = m->idx[i];
    }
    free(m->keys);
    free(m->idx);
    m->keys = nk;
    m->idx = ni;
    m->cap = ncap;
  }
  size_t i = tt_shlo_hash_ptr(n, m->cap);
  while (m->keys[i] && m->keys[i] != n) i = (i + 1) & (m->cap - 1);
  if (!m->keys[i]) m->count++;
  m->keys[i] = n;
  m->idx[i] = v;
  return 1;
}

tt_status_t tt_stablehlo_emit(tt_node_t *const *roots, int32_t num_roots, char **out_text,
                              tt_node_t ***out_inputs, int32_t *out_num_inputs) {
  *out_text = NULL;
  if (out_inputs) *out_inputs = NULL;
  if (out_num_inputs) *out_num_inputs = 0;
  tt_shlo_map_t map = {0};
  size_t cap = 64, count = 0, scap = 64, top = 0;
  tt_node_t **order = malloc(cap * sizeof(*order));
  struct tt_shlo_frame { tt_node_t *n; int32_t next; } *stack = malloc(scap * sizeof(*stack));
  tt_status_t st = NULL;
  tt_graph_t *g = NULL;
  tt_node_t **inputs = NULL;
  if (!order || !stack) goto oom;
  /* Iterative post-order; -1 marks "on the stack", >= 0 the final index. */
  for (int32_t r = 0; r < num_roots; ++r) {
    if (tt_shlo_map_get(&map, roots[r]) != -2) continue;
    if (!tt_shlo_map_put(&map, roots[r], -1)) goto oom;
    stack[0].n = roots[r];
    stack[0].next = 0;
    top = 1;
    while (top) {
      struct tt_shlo_frame *f = &stack[top - 1];
      if (f->next < f->n->num_operands) {
        tt_node_t *ch = f->n->operands[f->next++];
        if (tt_shlo_map_get(&map, ch) != -2) continue;
        if (!tt_shlo_map_put(&map, ch, -1)) goto oom;
        if (top == scap) {
          scap *= 2;
          void *ns = realloc(stack, scap * sizeof(*stack));
          if (!ns) goto oom;
          stack = ns;
        }
        stack[top].n = ch;
        stack[top].next = 0;
        ++top;
      } else {
        if (count == cap) {
          cap *= 2;
          void *no = realloc(order, cap * sizeof(*order));
          if (!no) goto oom;
          order = no;
        }
        if (!tt_shlo_map_put(&map, f->n, (int32_t)count)) goto oom;
        order[count++] = f->n;
        --top;
      }
    }
  }
  size_t total_operands = 0;
  for (size_t i = 0; i < count; ++i) total_operands += (size_t)order[i]->num_operands;
  g = calloc(1, sizeof(*g));
  if (!g) goto oom;
  g->arena = calloc(1, count * sizeof(tt_instr_t) + (total_operands + 2 * count +
                                                     (size_t)num_roots + 4) * sizeof(int32_t));
  if (!g->arena) goto oom;
  g->instrs = (tt_instr_t *)g->arena;
  int32_t *pool = (int32_t *)(g->instrs + count);
  g->input_instr = pool + total_operands;
  g->output_instr = g->input_instr + count;
  g->num_instrs = (int32_t)count;
  inputs = malloc(sizeof(*inputs) * (count ? count : 1));
  if (!inputs) goto oom;
  for (size_t i = 0; i < count; ++i) {
    tt_node_t *n = order[i];
    tt_instr_t *in = &g->instrs[i];
    in->op = n->op;
    in->dtype = n->dtype;
    in->shape = n->shape;
    in->num_operands = n->num_operands;
    in->operands = pool;
    pool += n->num_operands;
    for (int32_t k = 0; k < n->num_operands; ++k)
      in->operands[k] = tt_shlo_map_get(&map, n->operands[k]);
    in->num_iattrs = n->num_iattrs;
    memcpy(in->iattrs, n->iattrs, sizeof(in->iattrs));
    memcpy(in->fattrs, n->fattrs, sizeof(in->fattrs));
    in->sharding = n->sharding;
    in->input_index = -1;
    if (n->op == TT_OP_PARAM || n->op == TT_OP_SCALAR) {
      in->input_index = g->num_inputs;
      g->input_instr[g->num_inputs] = (int32_t)i;
      inputs[g->num_inputs++] = n;
    }
  }
  g->num_outputs = num_roots;
  for (int32_t r = 0; r < num_roots; ++r) g->output_instr[r] = tt_shlo_map_get(&map, roots[r]);
  st = tt_stablehlo_emit_graph(g, NULL, out_text);
  if (!st && out_inputs && g->num_inputs) {
    *out_inputs = inputs;
    inputs = NULL;
  }
  if (!st && out_num_inputs) *out_num_inputs = g->num_inputs;
  goto done;
oom:
  st = tt_status_make(TT_RESOURCE_EXHAUSTED, "stablehlo: out of memory linearising the graph");
done:
  free(inputs);
  free(order);
  free(stack);
  free(map.keys);
  free(map.idx);
  if (g) {
    free(g->arena);
    free(g);
  }
  return st;
}

/* ---- registrations: the graph inputs and the simple ops ---- */

const tt_shlo_row_t tt_shlo_rows_core[] = {
    {TT_OP_PARAM, NULL, "function argument"},
    {TT_OP_SCALAR, NULL, "function argument (0-d tensor)"},
    {TT_OP_WHERE, tt_shlo_lower_simple, "broadcast_in_dim + select"},
    {TT_OP_CONVERT, tt_shlo_lower_simple, "convert (compare NE 0 for bool)"},
    {TT_OP_BROADCAST, tt_shlo_lower_simple, "broadcast_in_dim"},
    {TT_OP_RESHAPE, tt_shlo_lower_simple, "reshape"},
    {TT_OP_IOTA, tt_shlo_lower_simple, "iota (+ multiply/add for start and step)"},
    {TT_OP_TRANSPOSE, tt_shlo_lower_simple, "transpose"},
    {TT_OP_SLICE, tt_shlo_lower_simple, "slice"},
    {TT_OP_CONCAT, tt_shlo_lower_simple, "concatenate"},
    {TT_OP_PAD, tt_shlo_lower_simple, "pad"},
    {TT_OP_FLIP, tt_shlo_lower_simple, "reverse"},
    TT_SHLO_ROWS_END,
};
