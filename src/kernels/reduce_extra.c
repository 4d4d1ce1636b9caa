/* Reductions the core kernel set lacks: scatter_reduce (sum, prod, mean,
 * amax, amin, with or without the base values) and the cumulative
 * max/min (values and indices) and logcumsumexp scans.
 *
 * Floats accumulate in double, integers and bool in int64; each result is
 * rounded once on store. NaN handling follows ATen's CPU kernels: amax/amin
 * propagate NaN; cummax/cummin switch to (and stay on) a NaN, and a later
 * NaN moves the index, as ATen's cummax_cummin_helper does.
 */
#include <stdlib.h>

#include "kernels/kernel_util.h"

static void tt_rx_split(const tt_shape_t *s, int dim, int64_t *A, int64_t *D, int64_t *B) {
  *A = *D = *B = 1;
  for (int d = 0; d < s->rank; ++d) {
    if (d < dim) *A *= s->dims[d];
    else if (d == dim) *D = s->dims[d];
    else *B *= s->dims[d];
  }
}

/* ---- scatter_reduce ---------------------------------------------------- */
tt_status_t tt_kernel_scatter_reduce(const tt_view_t *base, int dim, const tt_view_t *idx,
                                     const tt_view_t *src, tt_scatter_reduce_t reduce,
                                     int include_self, tt_view_t *out) {
  TT_RETURN_IF_ERROR(tt_check_view("scatter_reduce", "self", base));
  TT_RETURN_IF_ERROR(tt_check_view("scatter_reduce", "index", idx));
  TT_RETURN_IF_ERROR(tt_check_view("scatter_reduce", "src", src));
  TT_RETURN_IF_ERROR(tt_check_view("scatter_reduce", "out", out));
  int r = base->shape.rank;
  if (idx->dtype != TT_I64 && idx->dtype != TT_I32)
    return tt_status_make(TT_TYPE_ERROR, "scatter_reduce(): Expected dtype int64 for index");
  if (dim < 0 || dim >= (r ? r : 1))
    return tt_status_make(TT_INVALID_ARGUMENT, "scatter_reduce: dim %d out of range", dim);
  if (idx->shape.rank != r || src->shape.rank != r)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "Index tensor must have the same number of dimensions as self tensor");
  for (int d = 0; d < r; ++d) {
    if (idx->shape.dims[d] > src->shape.dims[d] ||
        (d != dim && idx->shape.dims[d] > base->shape.dims[d])) {
      char b1[128], b2[128], b3[128];
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "Expected index %s to be smaller than self %s apart from dimension "
                            "%d and to be smaller size than src %s",
                            tt_dims_str(&idx->shape, b1, sizeof b1),
                            tt_dims_str(&base->shape, b2, sizeof b2), dim,
                            tt_dims_str(&src->shape, b3, sizeof b3));
    }
  }
  if ((unsigned)reduce >= TT_SCATTER_REDUCE_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "scatter_reduce: unknown reduce %d", (int)reduce);
  int64_t n = tt_view_numel(base), ni = tt_view_numel(idx);
  int is_int = tt_class_of(out->dtype) == TT_CLASS_INT;
  double *accf = NULL;
  int64_t *acci = NULL, *count = malloc((size_t)tt_max64(n, 1) * sizeof(int64_t));
  if (is_int) acci = malloc((size_t)tt_max64(n, 1) * sizeof(int64_t));
  else accf = malloc((size_t)tt_max64(n, 1) * sizeof(double));
  if (!count || (!acci && !accf)) {
    free(count);
    free(acci);
    free(accf);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "scatter_reduce: out of memory");
  }
  for (int64_t i = 0; i < n; ++i) {
    count[i] = include_self ? 1 : 0;
    if (is_int) acci[i] = tt_get_i64(base->data, base->dtype, i);
    else accf[i] = tt_get_f64(base->data, base->dtype, i);
  }
  int64_t bstr[TT_MAX_RANK], sstr[TT_MAX_RANK];
  tt_contiguous_strides(&base->shape, bstr);
  tt_contiguous_strides(&src->shape, sstr);
  int64_t pos[TT_MAX_RANK] = {0};
  tt_status_t st = NULL;
  for (int64_t e = 0; e < ni && !st; ++e) {
    /* pos = the multi-index of element e of idx. */
    int64_t rem = e;
    for (int d = r - 1; d >= 0; --d) {
      pos[d] = idx->shape.dims[d] ? rem % idx->shape.dims[d] : 0;
      rem = idx->shape.dims[d] ? rem / idx->shape.dims[d] : 0;
    }
    int64_t j = idx->dtype == TT_I64 ? ((const int64_t *)idx->data)[e]
                                     : ((const int32_t *)idx->data)[e];
    int64_t size = r ? base->shape.dims[dim] : 1;
    if (j < 0 || j >= size) {
      st = tt_status_make(TT_OUT_OF_RANGE,
                          "index %lld is out of bounds for dimension %d with size %lld",
                          (long long)j, dim, (long long)size);
      break;
    }
    int64_t bo = 0, so = 0;
    for (int d = 0; d < r; ++d) {
      bo += (d == dim ? j : pos[d]) * bstr[d];
      so += pos[d] * sstr[d];
    }
    int first = count[bo] == 0;
    count[bo]++;
    if (is_int) {
      int64_t v = tt_get_i64(src->data, src->dtype, so), *a = &acci[bo];
      switch (reduce) {
        case TT_SCATTER_REDUCE_SUM:
        case TT_SCATTER_REDUCE_MEAN: *a = first ? v : (int64_t)((uint64_t)*a + (uint64_t)v); break;
        case TT_SCATTER_REDUCE_PROD: *a = first ? v : (int64_t)((uint64_t)*a * (uint64_t)v); break;
        case TT_SCATTER_REDUCE_AMAX: *a = first || v > *a ? v : *a; break;
        case TT_SCATTER_REDUCE_AMIN: *a = first || v < *a ? v : *a; break;
        default: break;
      }
    } else {
      double v = tt_get_f64(src->data, src->dtype, so), *a = &accf[bo];
      switch (reduce) {
        case TT_SCATTER_REDUCE_SUM:
        case TT_SCATTER_REDUCE_MEAN: *a = first ? v : *a + v; break;
        case TT_SCATTER_REDUCE_PROD: *a = first ? v : *a * v; break;
        case TT_SCATTER_REDUCE_AMAX: *a = first || v != v || (*a == *a && v > *a) ? v : *a; break;
        case TT_SCATTER_REDUCE_AMIN: *a = first || v != v || (*a == *a && v < *a) ? v : *a; break;
        default: break;
      }
    }
  }
  if (!st) {
    for (int64_t i = 0; i < n; ++i) {
      if (reduce == TT_SCATTER_REDUCE_MEAN && count[i] > 1) {
        if (is_int) {
          int64_t q = acci[i] / count[i];
          if ((acci[i] % count[i] != 0) && ((acci[i] < 0) != (count[i] < 0))) --q;
          acci[i] = q; /* floor division, as ATen's integral mean */
        } else {
          accf[i] /= (double)count[i];
        }
      }
      if (is_int) tt_set_i64(out->data, out->dtype, i, acci[i]);
      else tt_set_f64(out->data, out->dtype, i, accf[i]);
    }
  }
  free(count);
  free(acci);
  free(accf);
  return st;
}

/* ---- cumulative max / min / logcumsumexp ------------------------------- */
static double tt_log_add_exp(double x, double y) {
  double mn = x < y ? x : y, mx = x < y ? y : x;
  if (x != x || y != y) return x != x ? x : y;
  if (isinf(mn) && mn == mx) return mn;
  return mx + log1p(exp(mn - mx));
}

tt_status_t tt_kernel_cumulative(tt_cumulative_t op, const tt_view_t *x, int dim,
                                 tt_view_t *out) {
  TT_RETURN_IF_ERROR(tt_check_view("cumulative", "x", x));
  TT_RETURN_IF_ERROR(tt_check_view("cumulative", "out", out));
  if ((unsigned)op >= TT_CUM_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "cumulative: unknown op %d", (int)op);
  if (dim < 0 || dim >= (x->shape.rank ? x->shape.rank : 1))
    return tt_status_make(TT_INVALID_ARGUMENT, "cumulative: dim %d out of range", dim);
  if (tt_view_numel(x) != tt_view_numel(out))
    return tt_status_make(TT_INVALID_ARGUMENT, "cumulative: out must have x's shape");
  int want_index = op == TT_CUM_MAX_INDEX || op == TT_CUM_MIN_INDEX;
  int is_max = op == TT_CUM_MAX || op == TT_CUM_MAX_INDEX;
  int is_int = tt_class_of(x->dtype) == TT_CLASS_INT;
  int64_t A, D, B;
  tt_rx_split(&x->shape, dim, &A, &D, &B);
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t b = 0; b < B; ++b) {
      int64_t base = a * D * B + b;
      if (op == TT_CUM_LOGSUMEXP) {
        double acc = -INFINITY;
        for (int64_t i = 0; i < D; ++i) {
          acc = tt_log_add_exp(acc, tt_get_f64(x->data, x->dtype, base + i * B));
          tt_set_f64(out->data, out->dtype, base + i * B, acc);
        }
        continue;
      }
      int64_t best = 0;
      if (is_int) {
        int64_t cur = D ? tt_get_i64(x->data, x->dtype, base) : 0;
        for (int64_t i = 0; i < D; ++i) {
          int64_t v = tt_get_i64(x->data, x->dtype, base + i * B);
          if (is_max ? v >= cur : v <= cur) {
            cur = v;
            best = i;
          }
          if (want_index) tt_set_i64(out->data, out->dtype, base + i * B, best);
          else tt_set_i64(out->data, out->dtype, base + i * B, cur);
        }
      } else {
        double cur = D ? tt_get_f64(x->data, x->dtype, base) : 0;
        for (int64_t i = 0; i < D; ++i) {
          double v = tt_get_f64(x->data, x->dtype, base + i * B);
          if (v != v || (cur == cur && (is_max ? v >= cur : v <= cur))) {
            cur = v;
            best = i;
          }
          if (want_index) tt_set_i64(out->data, out->dtype, base + i * B, best);
          else tt_set_f64(out->data, out->dtype, base + i * B, cur);
        }
      }
    }
  }
  return NULL;
}
