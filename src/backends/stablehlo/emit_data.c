/* StableHLO lowerings of the data-movement and indexing ops: SLICE_SCATTER,
 * the index ops (gather / scatter with full coordinates), ARGSORT (sort),
 * SEARCHSORTED, BITCAST, and the ops with no StableHLO form (LINALG and
 * SPECIAL, as chlo.zeta or stablehlo.custom_call). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/stablehlo/emit_internal.h"

/* ---- SLICE_SCATTER ---- */

static tt_shv_t tt_shlo_lower_slice_scatter(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_slice_attrs_t sa;
  TT_ATTRS(in, &sa);
  tt_shv_t base = ins->x[0], src = ins->x[1];
  tt_shv_t bs[2] = {base, src};
  if (tt_shlo_bad(c, 2, bs)) return -1;
  int r = in->shape.rank;
  const int64_t *start = sa.start.v, *step = sa.step.v;
  int unit = 1;
  for (int d = 0; d < r; ++d) unit &= step[d] == 1;
  if (unit) {
    tt_shv_t args[2 + TT_MAX_RANK] = {base, src};
    tt_shape_t s0 = {0};
    for (int d = 0; d < r; ++d) args[2 + d] = tt_shlo_const_i(c, TT_I64, &s0, start[d]);
    return tt_shlo_op(c, "stablehlo.dynamic_update_slice", 2 + r, args, NULL, in->dtype, &in->shape);
  }
  /* Strided: spread src into base's shape with interior padding, and a
   * mask spread the same way selects it. */
  const tt_shape_t *ss = tt_shlo_shape(c, src);
  int64_t lo[TT_MAX_RANK], hi[TT_MAX_RANK], inner[TT_MAX_RANK];
  for (int d = 0; d < r; ++d) {
    int64_t n = ss->dims[d];
    lo[d] = start[d];
    inner[d] = n > 0 ? step[d] - 1 : 0;
    hi[d] = in->shape.dims[d] - start[d] - (n > 0 ? (n - 1) * step[d] + 1 : 0);
  }
  tt_shlo_attr_t a = {0};
  tt_shlo_attr_i64s(&a, "edge_padding_low", lo, r);
  tt_shlo_attr_i64s(&a, "edge_padding_high", hi, r);
  tt_shlo_attr_i64s(&a, "interior_padding", inner, r);
  tt_shape_t sshape = *ss;
  tt_shv_t pargs[2] = {src, tt_shlo_scalar(c, in->dtype, 0)};
  tt_shv_t spread = tt_shlo_op(c, "stablehlo.pad", 2, pargs, a.s, in->dtype, &in->shape);
  tt_shv_t margs[2] = {tt_shlo_const_i(c, TT_BOOL, &sshape, 1), tt_shlo_scalar(c, TT_BOOL, 0)};
  tt_shv_t mask = tt_shlo_op(c, "stablehlo.pad", 2, margs, a.s, TT_BOOL, &in->shape);
  return tt_shlo_select(c, mask, spread, base);
}

/* ---- gather / scatter ---- */

/* idx as I64 with negative values wrapped once by size. */
static tt_shv_t tt_shlo_index_i64(tt_shlo_t *c, tt_shv_t idx, int64_t size) {
  tt_shv_t i = tt_shlo_convert(c, idx, TT_I64);
  tt_shv_t neg = tt_shlo_cmp(c, "LT", i, tt_shlo_like(c, i, 0));
  return tt_shlo_select(c, neg, tt_shlo_bin_k(c, "add", i, (double)size), i);
}

/* Full coordinates [S..., r] for torch.gather/scatter along dim: component
 * dim is idx, every other component the position's own coordinate. */
static tt_shv_t tt_shlo_coords(tt_shlo_t *c, tt_shv_t idx, int64_t dim, int r, int64_t size) {
  if (tt_shlo_bad(c, 1, &idx)) return -1;
  const tt_shape_t s = *tt_shlo_shape(c, idx);
  tt_shape_t s1 = s;
  s1.dims[s1.rank++] = 1;
  tt_shv_t parts[TT_MAX_RANK];
  for (int d = 0; d < r; ++d) {
    tt_shv_t comp = d == dim ? tt_shlo_index_i64(c, idx, size) : tt_shlo_iota(c, TT_I64, &s, d);
    parts[d] = tt_shlo_reshape(c, comp, &s1);
  }
  return tt_shlo_concat(c, r, parts, r);
}

static void tt_shlo_attr_range(tt_shlo_attr_t *a, int n, int skip) {
  int64_t v[TT_MAX_RANK];
  int k = 0;
  for (int d = 0; d < n; ++d)
    if (d != skip) v[k++] = d;
  tt_shlo_attr_list(a, v, k);
}

/* A scatter of updates into base at indices (index_vector_dim ivd), the
 * dimension numbers given as text, with combiner body (NULL: replace). */
static tt_shv_t tt_shlo_scatter(tt_shlo_t *c, tt_shv_t base, tt_shv_t indices, tt_shv_t updates,
                                const char *dnums, const char *body) {
  tt_shv_t args[3] = {base, indices, updates};
  if (tt_shlo_bad(c, 3, args)) return -1;
  tt_dtype_t dt = tt_shlo_dtype(c, base);
  tt_shape_t s = *tt_shlo_shape(c, base);
  int32_t ssa = tt_shlo_op_begin(c, "stablehlo.scatter", 1, 3, args);
  tt_dtype_t dts[2] = {dt, dt};
  tt_shv_t p[2];
  tt_shlo_region_begin(c, 1, 2, dts, p);
  tt_shv_t rv = p[1];
  if (body) {
    const char *name = body;
    if (dt == TT_BOOL && !strcmp(body, "stablehlo.add")) name = "stablehlo.or";
    else if (dt == TT_BOOL && !strcmp(body, "stablehlo.multiply")) name = "stablehlo.and";
    rv = tt_shlo_bin(c, name, p[0], p[1]);
  }
  tt_shlo_return(c, 1, &rv);
  tt_shlo_region_end(c);
  tt_shlo_attr_t a = {0};
  tt_shlo_attr(&a, "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<%s>, "
               "unique_indices = false", dnums);
  return tt_shlo_op_end(c, ssa, a.s, 3, args, 1, &dt, &s);
}

tt_shv_t tt_shlo_scatter_dim(tt_shlo_t *c, tt_shv_t base, int64_t dim, tt_shv_t idx,
                             tt_shv_t src, const char *body) {
  tt_shv_t bis[3] = {base, idx, src};
  if (tt_shlo_bad(c, 3, bis)) return -1;
  const tt_shape_t bs = *tt_shlo_shape(c, base), is = *tt_shlo_shape(c, idx);
  int r = bs.rank;
  if (r == 0) return body ? tt_shlo_bin(c, body, base, src) : src;
  int64_t start[TT_MAX_RANK] = {0}, step[TT_MAX_RANK];
  for (int d = 0; d < r; ++d) step[d] = 1;
  tt_shv_t upd = tt_shlo_slice(c, src, start, is.dims, step);
  tt_shv_t coords = tt_shlo_coords(c, idx, dim, r, bs.dims[dim]);
  tt_shlo_attr_t dn = {0};
  tt_shlo_attr(&dn, "inserted_window_dims = ");
  tt_shlo_attr_range(&dn, r, -1);
  tt_shlo_attr(&dn, ", scatter_dims_to_operand_dims = ");
  tt_shlo_attr_range(&dn, r, -1);
  tt_shlo_attr(&dn, ", index_vector_dim = %d", r);
  return tt_shlo_scatter(c, base, coords, upd, dn.s, body);
}

static tt_shv_t tt_shlo_gather(tt_shlo_t *c, tt_shv_t x, tt_shv_t indices, const char *dnums,
                               const int64_t *slice_sizes, const tt_shape_t *out) {
  tt_shv_t args[2] = {x, indices};
  if (tt_shlo_bad(c, 2, args)) return -1;
  tt_shlo_attr_t a = {0};
  tt_shlo_attr(&a, "dimension_numbers = #stablehlo.gather<%s>, indices_are_sorted = false", dnums);
  tt_shlo_attr_i64s(&a, "slice_sizes", slice_sizes, tt_shlo_shape(c, x)->rank);
  return tt_shlo_op(c, "stablehlo.gather", 2, args, a.s, tt_shlo_dtype(c, x), out);
}

/* The identity element of a scatter_reduce combiner, as a constant of
 * shape s. */
static tt_shv_t tt_shlo_identity(tt_shlo_t *c, tt_scatter_reduce_t op, tt_dtype_t dt,
                                 const tt_shape_t *s) {
  tt_shape_t s0 = {0};
  tt_shv_t k;
  switch (op) {
    case TT_SCATTER_REDUCE_PROD: k = tt_shlo_scalar(c, dt, 1); break;
    case TT_SCATTER_REDUCE_AMAX: k = tt_shlo_lowest(c, dt); break;
    case TT_SCATTER_REDUCE_AMIN: k = tt_shlo_highest(c, dt); break;
    default: k = tt_shlo_scalar(c, dt, 0); break;
  }
  (void)s0;
  return tt_shlo_bcast_to(c, k, s);
}

static tt_shv_t tt_shlo_scatter_reduce(tt_shlo_t *c, const tt_instr_t *in, tt_shv_t base,
                                       tt_shv_t idx, tt_shv_t src) {
  tt_scatter_reduce_attrs_t sa;
  TT_ATTRS(in, &sa);
  int64_t dim = sa.dim;
  tt_scatter_reduce_t op = (tt_scatter_reduce_t)sa.reduce;
  int include_self = (int)sa.include_self;
  if (tt_shlo_bad(c, 1, &idx)) return -1;
  const tt_shape_t is = *tt_shlo_shape(c, idx);
  tt_dtype_t dt = in->dtype;
  const char *body;
  switch (op) {
    case TT_SCATTER_REDUCE_SUM: case TT_SCATTER_REDUCE_MEAN: body = "stablehlo.add"; break;
    case TT_SCATTER_REDUCE_PROD: body = "stablehlo.multiply"; break;
    case TT_SCATTER_REDUCE_AMAX: body = dt == TT_BOOL ? "stablehlo.or" : "stablehlo.maximum"; break;
    case TT_SCATTER_REDUCE_AMIN: body = dt == TT_BOOL ? "stablehlo.and" : "stablehlo.minimum"; break;
    default:
      tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED, "stablehlo: scatter_reduce op %d", (int)op));
      return -1;
  }
  /* Without self, the targets start from the combiner's identity. */
  tt_shv_t start = include_self ? base
                                : tt_shlo_scatter_dim(c, base, dim, idx,
                                                      tt_shlo_identity(c, op, dt, &is), NULL);
  tt_shv_t acc = tt_shlo_scatter_dim(c, start, dim, idx, src, body);
  if (op != TT_SCATTER_REDUCE_MEAN) return acc;
  tt_shv_t cnt0 = tt_shlo_const_i(c, dt, &in->shape, include_self ? 1 : 0);
  if (tt_dtype_is_float(dt)) cnt0 = tt_shlo_const_f(c, dt, &in->shape, include_self ? 1 : 0);
  tt_shv_t ones = tt_dtype_is_float(dt) ? tt_shlo_const_f(c, dt, &is, 1) : tt_shlo_const_i(c, dt, &is, 1);
  tt_shv_t cnt = tt_shlo_scatter_dim(c, cnt0, dim, idx, ones, "stablehlo.add");
  tt_shv_t none = tt_shlo_cmp(c, "EQ", cnt, tt_shlo_like(c, cnt, 0));
  tt_shv_t safe = tt_shlo_select(c, none, tt_shlo_like(c, cnt, 1), cnt);
  tt_shv_t mean = tt_dtype_is_float(dt) ? tt_shlo_bin(c, "divide", acc, safe)
                                        : tt_shlo_lower_binary(c, TT_BIN_FLOOR_DIV, acc, safe, dt);
  return tt_shlo_select(c, none, base, mean);
}

static tt_shv_t tt_shlo_lower_index(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  /* Every index op's attributes lead with its dim. */
  int64_t dim, scatter_mode = 0;
  if (in->op == TT_OP_SCATTER) {
    tt_scatter_attrs_t a;
    TT_ATTRS(in, &a);
    dim = a.dim, scatter_mode = a.reduce;
  } else if (in->op == TT_OP_SCATTER_REDUCE) {
    tt_scatter_reduce_attrs_t a;
    TT_ATTRS(in, &a);
    dim = a.dim;
  } else {
    tt_dim_attrs_t a;
    TT_ATTRS(in, &a);
    dim = a.dim;
  }
  tt_shv_t x = ins->x[0], idx = ins->x[1];
  tt_shv_t xi[2] = {x, idx};
  if (tt_shlo_bad(c, 2, xi)) return -1;
  const tt_shape_t xs = *tt_shlo_shape(c, x);
  int r = xs.rank;
  switch (in->op) {
    case TT_OP_INDEX_SELECT:
    case TT_OP_INDEX_ADD: {
      if (r == 0) {
        if (in->op == TT_OP_INDEX_SELECT) return tt_shlo_reshape(c, x, &in->shape);
        return tt_shlo_lower_binary(c, TT_BIN_ADD, x, tt_shlo_reshape(c, ins->x[2], &in->shape),
                                    in->dtype);
      }
      int64_t n = tt_shape_numel(tt_shlo_shape(c, idx));
      int64_t d2[2] = {n, 1};
      tt_shape_t s2 = tt_shlo_dims(2, d2);
      tt_shv_t iv = tt_shlo_reshape(c, tt_shlo_index_i64(c, idx, xs.dims[dim]), &s2);
      tt_shlo_attr_t dn = {0};
      if (in->op == TT_OP_INDEX_SELECT) {
        int64_t sizes[TT_MAX_RANK];
        for (int d = 0; d < r; ++d) sizes[d] = d == dim ? 1 : xs.dims[d];
        tt_shlo_attr(&dn, "offset_dims = ");
        tt_shlo_attr_range(&dn, r, (int)dim);
        tt_shlo_attr(&dn, ", collapsed_slice_dims = [%lld], start_index_map = [%lld], "
                     "index_vector_dim = 1", (long long)dim, (long long)dim);
        return tt_shlo_gather(c, x, iv, dn.s, sizes, &in->shape);
      }
      tt_shlo_attr(&dn, "update_window_dims = ");
      tt_shlo_attr_range(&dn, r, (int)dim);
      tt_shlo_attr(&dn, ", inserted_window_dims = [%lld], scatter_dims_to_operand_dims = [%lld], "
                   "index_vector_dim = 1", (long long)dim, (long long)dim);
      return tt_shlo_scatter(c, x, iv, ins->x[2], dn.s, "stablehlo.add");
    }
    case TT_OP_GATHER: {
      if (r == 0) return tt_shlo_reshape(c, x, &in->shape);
      tt_shv_t coords = tt_shlo_coords(c, idx, dim, r, xs.dims[dim]);
      int64_t sizes[TT_MAX_RANK];
      for (int d = 0; d < r; ++d) sizes[d] = 1;
      tt_shlo_attr_t dn = {0};
      tt_shlo_attr(&dn, "collapsed_slice_dims = ");
      tt_shlo_attr_range(&dn, r, -1);
      tt_shlo_attr(&dn, ", start_index_map = ");
      tt_shlo_attr_range(&dn, r, -1);
      tt_shlo_attr(&dn, ", index_vector_dim = %d", r);
      return tt_shlo_gather(c, x, coords, dn.s, sizes, &in->shape);
    }
    case TT_OP_SCATTER: {
      int add = scatter_mode == 1;
      if (scatter_mode != 0 && scatter_mode != 1) {
        tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED, "stablehlo: scatter reduce mode %lld",
                                       (long long)scatter_mode));
        return -1;
      }
      return tt_shlo_scatter_dim(c, x, dim, idx, ins->x[2], add ? "stablehlo.add" : NULL);
    }
    case TT_OP_SCATTER_REDUCE:
      return tt_shlo_scatter_reduce(c, in, x, idx, ins->x[2]);
    default:
      tt_shlo_fail(c, tt_status_make(TT_INTERNAL, "stablehlo: %s is not an index op",
                                     tt_op_name(in->op)));
      return -1;
  }
}

/* ---- ARGSORT, SEARCHSORTED ---- */

/* a before b in ascending order with NaN above every number (desc: the
 * reverse), as torch.sort orders. */
static tt_shv_t tt_shlo_sort_before(tt_shlo_t *c, tt_shv_t a, tt_shv_t b, int desc) {
  tt_shv_t r = tt_shlo_cmp(c, desc ? "GT" : "LT", a, b);
  if (!tt_dtype_is_float(tt_shlo_dtype(c, a))) return r;
  tt_shv_t an = tt_shlo_isnan(c, a), bn = tt_shlo_isnan(c, b);
  tt_shv_t nan_rule = desc ? tt_shlo_bin(c, "and", an, tt_shlo_un(c, "not", bn))
                           : tt_shlo_bin(c, "and", tt_shlo_un(c, "not", an), bn);
  return tt_shlo_bin(c, "or", r, nan_rule);
}

static tt_shv_t tt_shlo_lower_argsort(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_argsort_attrs_t sa;
  TT_ATTRS(in, &sa);
  int64_t dim = sa.dim;
  int desc = (int)sa.descending;
  tt_shv_t x = ins->x[0];
  if (tt_shlo_bad(c, 1, &x)) return -1;
  tt_dtype_t dt = tt_shlo_dtype(c, x);
  const tt_shape_t xs = *tt_shlo_shape(c, x);
  if (xs.rank == 0) return tt_shlo_const_i(c, TT_I64, &xs, 0);
  tt_shv_t args[2] = {x, tt_shlo_iota(c, TT_I64, &xs, dim)};
  if (tt_shlo_bad(c, 2, args)) return -1;
  int32_t ssa = tt_shlo_op_begin(c, "stablehlo.sort", 2, 2, args);
  tt_dtype_t dts[4] = {dt, dt, TT_I64, TT_I64};
  tt_shv_t p[4];
  tt_shlo_region_begin(c, 1, 4, dts, p);
  tt_shv_t before = tt_shlo_sort_before(c, p[0], p[1], desc);
  tt_shlo_return(c, 1, &before);
  tt_shlo_region_end(c);
  tt_shlo_attr_t a = {0};
  tt_shlo_attr(&a, "dimension = %lld : i64, is_stable = true", (long long)dim);
  tt_dtype_t rd[2] = {dt, TT_I64};
  tt_shape_t rs[2] = {xs, xs};
  tt_shv_t v0 = tt_shlo_op_end(c, ssa, a.s, 2, args, 2, rd, rs);
  return v0 < 0 ? -1 : v0 + 1;
}

static tt_shv_t tt_shlo_lower_searchsorted(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_searchsorted_attrs_t sa;
  TT_ATTRS(in, &sa);
  int right = (int)sa.right;
  tt_shv_t sorted = ins->x[0], vals = ins->x[1];
  tt_shv_t sv[2] = {sorted, vals};
  if (tt_shlo_bad(c, 2, sv)) return -1;
  const tt_shape_t ss = *tt_shlo_shape(c, sorted), vs = *tt_shlo_shape(c, vals);
  int vr = vs.rank;
  int64_t m = ss.dims[ss.rank - 1];
  if (vr + 1 > TT_MAX_RANK) {
    tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED, "stablehlo: searchsorted of rank %d values", vr));
    return -1;
  }
  /* Count, per value, the boundaries before it: compare every pair. */
  tt_shape_t t = vs;
  t.dims[t.rank++] = m;
  int64_t vd[TT_MAX_RANK], sd[TT_MAX_RANK];
  for (int d = 0; d < vr; ++d) vd[d] = d;
  if (ss.rank == 1) {
    sd[0] = vr;
  } else {
    for (int d = 0; d < ss.rank - 1; ++d) sd[d] = d;
    sd[ss.rank - 1] = vr;
  }
  tt_shv_t vb = tt_shlo_bcast_dims(c, vals, &t, vd), sb = tt_shlo_bcast_dims(c, sorted, &t, sd);
  tt_shv_t before = tt_shlo_cmp(c, right ? "LE" : "LT", sb, vb);
  if (tt_dtype_is_float(tt_shlo_dtype(c, vals))) {
    /* NaN sorts last: a NaN value lies above every number (right: above
     * every NaN too). */
    tt_shv_t vn = tt_shlo_isnan(c, vb);
    tt_shv_t extra = right ? vn : tt_shlo_bin(c, "and", vn, tt_shlo_un(c, "not", tt_shlo_isnan(c, sb)));
    before = tt_shlo_bin(c, "or", before, extra);
  }
  tt_shv_t cnt = tt_shlo_reduce(c, tt_shlo_convert(c, before, TT_I64), 1u << vr, "stablehlo.add",
                                tt_shlo_scalar(c, TT_I64, 0));
  return tt_shlo_convert(c, cnt, in->dtype);
}

/* ---- BITCAST ---- */

/* Complex values and their float32 pairs: bitcast_convert does not take
 * complex types, so the pairs are built from real/imag (and back with
 * stablehlo.complex). */
static tt_shv_t tt_shlo_complex_bitcast(tt_shlo_t *c, tt_shv_t x, const tt_instr_t *in) {
  tt_dtype_t src = tt_shlo_dtype(c, x);
  if (!((src == TT_C64 && in->dtype == TT_F32) || (src == TT_F32 && in->dtype == TT_C64))) {
    tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED,
                                   "stablehlo: bitcast between %s and %s is not emitted "
                                   "(complex64 bitcasts only to and from float32 pairs)",
                                   tt_dtype_name(src), tt_dtype_name(in->dtype)));
    return -1;
  }
  if (src == TT_C64) {
    int64_t n = tt_shape_numel(tt_shlo_shape(c, x));
    tt_shape_t flat = tt_shlo_dims(1, &n);
    int64_t d2[2] = {n, 1};
    tt_shape_t col = tt_shlo_dims(2, d2);
    tt_shv_t xf = tt_shlo_reshape(c, x, &flat);
    tt_shv_t parts[2] = {
        tt_shlo_reshape(c, tt_shlo_op(c, "stablehlo.real", 1, &xf, NULL, TT_F32, &flat), &col),
        tt_shlo_reshape(c, tt_shlo_op(c, "stablehlo.imag", 1, &xf, NULL, TT_F32, &flat), &col)};
    return tt_shlo_reshape(c, tt_shlo_concat(c, 2, parts, 1), &in->shape);
  }
  int64_t n = tt_shape_numel(&in->shape);
  int64_t d2[2] = {n, 2};
  tt_shape_t pairs = tt_shlo_dims(2, d2), flat = tt_shlo_dims(1, &n);
  tt_shv_t p = tt_shlo_reshape(c, x, &pairs);
  int64_t lo_re[2] = {0, 0}, lo_im[2] = {0, 1}, hi_re[2] = {n, 1}, hi_im[2] = {n, 2},
          one[2] = {1, 1};
  tt_shv_t re = tt_shlo_reshape(c, tt_shlo_slice(c, p, lo_re, hi_re, one), &flat);
  tt_shv_t im = tt_shlo_reshape(c, tt_shlo_slice(c, p, lo_im, hi_im, one), &flat);
  tt_shv_t z = tt_shlo_op(c, "stablehlo.complex", 2, (tt_shv_t[]){re, im}, NULL, TT_C64, &flat);
  return tt_shlo_reshape(c, z, &in->shape);
}

/* v * s for a real s, v complex64 or float32. */
static tt_shv_t tt_shlo_scale(tt_shlo_t *c, tt_shv_t v, double s) {
  if (s == 1.0 || v < 0) return v;
  if (tt_shlo_dtype(c, v) != TT_C64) return tt_shlo_bin_k(c, "stablehlo.multiply", v, s);
  tt_shape_t sh = *tt_shlo_shape(c, v);
  tt_shv_t re = tt_shlo_op(c, "stablehlo.real", 1, &v, NULL, TT_F32, &sh);
  tt_shv_t im = tt_shlo_op(c, "stablehlo.imag", 1, &v, NULL, TT_F32, &sh);
  re = tt_shlo_bin_k(c, "stablehlo.multiply", re, s);
  im = tt_shlo_bin_k(c, "stablehlo.multiply", im, s);
  return tt_shlo_op(c, "stablehlo.complex", 2, (tt_shv_t[]){re, im}, NULL, TT_C64, &sh);
}

static tt_shv_t tt_shlo_lower_fft(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_shv_t x = ins->x[0];
  if (tt_shlo_bad(c, 1, &x)) return -1;
  static const char *const types[TT_FFT_COUNT] = {"FFT", "IFFT", "RFFT", "IRFFT"};
  tt_fft_attrs_t fa;
  TT_ATTRS(in, &fa);
  int64_t kind = fa.kind, n = fa.n;
  double scale = fa.scale;
  if (kind == TT_FFT_C2R) {
    /* IRFFT reads exactly n/2+1 terms; the engine takes the first of more. */
    const tt_shape_t *xs = tt_shlo_shape(c, x);
    int r = xs->rank;
    if (xs->dims[r - 1] != n / 2 + 1) {
      int64_t lo[TT_MAX_RANK] = {0}, hi[TT_MAX_RANK], st[TT_MAX_RANK];
      for (int d = 0; d < r; ++d) {
        hi[d] = xs->dims[d];
        st[d] = 1;
      }
      hi[r - 1] = n / 2 + 1;
      x = tt_shlo_slice(c, x, lo, hi, st);
    }
  }
  /* XLA's inverse transforms divide by n; the engine's do not. */
  if (kind == TT_FFT_C2C_INVERSE || kind == TT_FFT_C2R) scale *= (double)n;
  tt_shlo_attr_t a = {0};
  tt_shlo_attr(&a, "fft_type = #stablehlo<fft_type %s>", types[kind]);
  tt_shlo_attr_i64s(&a, "fft_length", &n, 1);
  tt_shv_t y = tt_shlo_op(c, "stablehlo.fft", 1, &x, a.s, in->dtype, &in->shape);
  return tt_shlo_scale(c, y, scale);
}

static tt_shv_t tt_shlo_lower_bitcast(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  tt_shv_t x = ins->x[0];
  if (tt_shlo_bad(c, 1, &x)) return -1;
  if (tt_shlo_dtype(c, x) == TT_C64 || in->dtype == TT_C64)
    return tt_shlo_complex_bitcast(c, x, in);
  /* bool is one byte in memory: go through ui8. */
  if (tt_shlo_dtype(c, x) == TT_BOOL) x = tt_shlo_convert(c, x, TT_U8);
  tt_dtype_t src = tt_shlo_dtype(c, x), dst = in->dtype == TT_BOOL ? TT_U8 : in->dtype;
  size_t si = tt_dtype_size(src), so = tt_dtype_size(dst);
  int64_t n = tt_shape_numel(tt_shlo_shape(c, x));
  tt_shape_t flat = tt_shlo_dims(1, &n);
  tt_shv_t xf = tt_shlo_reshape(c, x, &flat), y;
  if (si == so) {
    y = src == dst ? xf : tt_shlo_op(c, "stablehlo.bitcast_convert", 1, &xf, NULL, dst, &flat);
  } else if (si > so) {
    int64_t d2[2] = {n, (int64_t)(si / so)};
    tt_shape_t s2 = tt_shlo_dims(2, d2);
    y = tt_shlo_op(c, "stablehlo.bitcast_convert", 1, &xf, NULL, dst, &s2);
    int64_t nn = n * (int64_t)(si / so);
    tt_shape_t f2 = tt_shlo_dims(1, &nn);
    y = tt_shlo_reshape(c, y, &f2);
  } else {
    int64_t q = (int64_t)(so / si);
    int64_t d2[2] = {n / q, q};
    tt_shape_t s2 = tt_shlo_dims(2, d2);
    tt_shape_t s1 = tt_shlo_dims(1, d2);
    y = tt_shlo_op(c, "stablehlo.bitcast_convert", 1, (tt_shv_t[]){tt_shlo_reshape(c, xf, &s2)},
                   NULL, dst, &s1);
  }
  y = tt_shlo_reshape(c, y, &in->shape);
  return in->dtype == TT_BOOL ? tt_shlo_convert(c, y, TT_BOOL) : y;
}

/* ---- custom calls ---- */

static const char *const tt_shlo_linalg_names_[TT_LINALG_COUNT] = {
    "cholesky", "lu", "trsm", "geqrf", "orgqr", "ormqr", "eigh", "svd",
};
static const char *const tt_shlo_special_names_[TT_SP_COUNT] = {
    "zeta", "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
    "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
    "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p",
};

static tt_shv_t tt_shlo_lower_custom(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  const tt_instr_t *in = ins->in;
  if (tt_shlo_bad(c, in->num_operands, ins->x)) return -1;
  /* The op code and, for linalg, its flags (special ops have none). */
  int64_t code, flags[3];
  int nflags = 0;
  if (in->op == TT_OP_LINALG) {
    tt_linalg_attrs_t a;
    TT_ATTRS(in, &a);
    code = a.op;
    memcpy(flags, a.flags, sizeof(flags));
    nflags = 3;
  } else {
    tt_special_attrs_t a;
    TT_ATTRS(in, &a);
    code = a.op;
  }
  const char *name = NULL, *family = NULL;
  if (in->op == TT_OP_LINALG && code >= 0 && code < TT_LINALG_COUNT) {
    name = tt_shlo_linalg_names_[code];
    family = "linalg";
  } else if (in->op == TT_OP_SPECIAL && code >= 0 && code < TT_SP_COUNT) {
    if (code == TT_SP_ZETA) return tt_shlo_bin(c, "chlo.zeta", ins->x[0], ins->x[1]);
    name = tt_shlo_special_names_[code];
    family = "special";
  }
  if (!name) {
    tt_shlo_fail(c, tt_status_make(TT_UNIMPLEMENTED, "stablehlo: %s op %lld has no lowering",
                                   tt_op_name(in->op), (long long)code));
    return -1;
  }
  /* The engine's own kernel, named; its integer attributes ride along as
   * the backend config so a runtime that implements the call has them. */
  tt_shlo_attr_t a = {0};
  tt_shlo_attr(&a, "backend_config = \"");
  for (int k = 0; k < nflags; ++k)
    tt_shlo_attr(&a, k ? ",%lld" : "%lld", (long long)flags[k]);
  tt_shlo_attr(&a, "\", call_target_name = \"torchtpu.%s.%s\"", family, name);
  return tt_shlo_op(c, "stablehlo.custom_call", in->num_operands, ins->x, a.s, in->dtype,
                    &in->shape);
}

/* ---- registrations ---- */

const tt_shlo_row_t tt_shlo_rows_data[] = {
    {TT_OP_SLICE_SCATTER, tt_shlo_lower_slice_scatter,
     "dynamic_update_slice (unit steps) or pad + select"},
    {TT_OP_INDEX_SELECT, tt_shlo_lower_index, "gather"},
    {TT_OP_INDEX_ADD, tt_shlo_lower_index, "scatter (add)"},
    {TT_OP_GATHER, tt_shlo_lower_index, "gather with full coordinates (iota + index)"},
    {TT_OP_SCATTER, tt_shlo_lower_index, "scatter (replace or add) with full coordinates"},
    {TT_OP_SCATTER_REDUCE, tt_shlo_lower_index,
     "scatter with add/mul/max/min regions (+ counts for mean)"},
    {TT_OP_ARGSORT, tt_shlo_lower_argsort,
     "sort of (value, iota) with a NaN-aware comparator, is_stable"},
    {TT_OP_SEARCHSORTED, tt_shlo_lower_searchsorted, "compare against every boundary + reduce add"},
    {TT_OP_BITCAST, tt_shlo_lower_bitcast, "bitcast_convert + reshape"},
    {TT_OP_FFT, tt_shlo_lower_fft,
     "fft (FFT/IFFT/RFFT/IRFFT on the last dim) scaled through real/imag"},
    {TT_OP_LINALG, tt_shlo_lower_custom, "custom_call @torchtpu.linalg.<op>"},
    {TT_OP_SPECIAL, tt_shlo_lower_custom, "chlo.zeta, or custom_call @torchtpu.special.<op>"},
    TT_SHLO_ROWS_END,
};
