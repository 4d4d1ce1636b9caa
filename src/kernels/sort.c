/* Sorting and searching kernels: stable argsort along a dim, and
 * searchsorted (binary search of values in sorted rows).
 *
 * argsort orders as torch.sort does: NaN is larger than every number (last
 * when ascending, first when descending), ties keep their original order
 * (the sort is stable), -0.0 and 0.0 are equal. Floats compare in double,
 * integers and bool in int64, so int64 keys beyond 2**53 stay exact.
 * searchsorted follows ATen's cus_lower_bound / cus_upper_bound exactly,
 * including where a NaN value lands (after every element).
 */
#include <stdlib.h>

#include "kernels/kernel_util.h"

/* Views shape as [A, D, B] around dim (rank 0 is [1, 1, 1]). */
static void tt_sort_split(const tt_shape_t *s, int dim, int64_t *A, int64_t *D, int64_t *B) {
  *A = *D = *B = 1;
  for (int d = 0; d < s->rank; ++d) {
    if (d < dim) *A *= s->dims[d];
    else if (d == dim) *D = s->dims[d];
    else *B *= s->dims[d];
  }
}

typedef struct tt_argsort_ctx_s {
  const tt_view_t *x;
  tt_view_t *out;
  int64_t D, B;
  int descending;
  int is_float;
} tt_argsort_ctx_t;

/* 1 when key i must come before key j (strictly), for floats. */
static TT_ALWAYS_INLINE int tt_before_f(double a, double b, int desc) {
  int na = a != a, nb = b != b;
  if (desc) return (na && !nb) || (!na && !nb && a > b);
  return (!na && nb) || (!na && !nb && a < b);
}

static TT_ALWAYS_INLINE int tt_before_i(int64_t a, int64_t b, int desc) {
  return desc ? a > b : a < b;
}

/* Bottom-up stable merge sort of idx[0..n) by keys; tmp has n slots. */
static void tt_merge_sort(int64_t *idx, int64_t *tmp, int64_t n, const double *kf,
                          const int64_t *ki, int desc) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = tt_min64(lo + w, n), hi = tt_min64(lo + 2 * w, n);
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        /* Take from the right run only when strictly before: stability. */
        int right = kf ? tt_before_f(kf[idx[j]], kf[idx[i]], desc)
                       : tt_before_i(ki[idx[j]], ki[idx[i]], desc);
        tmp[k++] = right ? idx[j++] : idx[i++];
      }
      while (i < mid) tmp[k++] = idx[i++];
      while (j < hi) tmp[k++] = idx[j++];
    }
    memcpy(idx, tmp, (size_t)n * sizeof(int64_t));
  }
}

static void tt_argsort_rows(void *vctx, int64_t begin, int64_t end) {
  const tt_argsort_ctx_t *c = (const tt_argsort_ctx_t *)vctx;
  int64_t D = c->D, B = c->B;
  int64_t *idx = malloc((size_t)tt_max64(D, 1) * 2 * sizeof(int64_t));
  void *keys = malloc((size_t)tt_max64(D, 1) * 8);
  if (!idx || !keys) { /* reported by the caller's pre-check; cannot fail here */
    free(idx);
    free(keys);
    return;
  }
  for (int64_t row = begin; row < end; ++row) {
    int64_t a = row / B, b = row % B;
    int64_t base = a * D * B + b;
    for (int64_t i = 0; i < D; ++i) {
      idx[i] = i;
      if (c->is_float) ((double *)keys)[i] = tt_get_f64(c->x->data, c->x->dtype, base + i * B);
      else ((int64_t *)keys)[i] = tt_get_i64(c->x->data, c->x->dtype, base + i * B);
    }
    tt_merge_sort(idx, idx + D, D, c->is_float ? (const double *)keys : NULL,
                  c->is_float ? NULL : (const int64_t *)keys, c->descending);
    for (int64_t i = 0; i < D; ++i) tt_set_i64(c->out->data, c->out->dtype, base + i * B, idx[i]);
  }
  free(idx);
  free(keys);
}

tt_status_t tt_kernel_argsort(const tt_view_t *x, int dim, int descending, tt_view_t *out) {
  TT_RETURN_IF_ERROR(tt_check_view("argsort", "x", x));
  TT_RETURN_IF_ERROR(tt_check_view("argsort", "out", out));
  if (dim < 0 || dim >= (x->shape.rank ? x->shape.rank : 1))
    return tt_status_make(TT_INVALID_ARGUMENT, "argsort: dim %d out of range for rank %d", dim,
                          x->shape.rank);
  if (out->dtype != TT_I64 && out->dtype != TT_I32)
    return tt_status_make(TT_TYPE_ERROR, "argsort: out must be int64 or int32, got %s",
                          tt_dtype_name(out->dtype));
  if (!tt_shape_equal(&x->shape, &out->shape))
    return tt_status_make(TT_INVALID_ARGUMENT, "argsort: out shape must equal x's shape");
  tt_argsort_ctx_t c;
  int64_t A;
  tt_sort_split(&x->shape, dim, &A, &c.D, &c.B);
  if (tt_view_numel(x) == 0) return NULL;
  c.x = x;
  c.out = out;
  c.descending = descending;
  c.is_float = tt_class_of(x->dtype) != TT_CLASS_INT;
  /* Pre-flight allocation so the worker's malloc is the same size class. */
  void *probe = malloc((size_t)tt_max64(c.D, 1) * 16);
  if (!probe) return tt_status_make(TT_RESOURCE_EXHAUSTED, "argsort: out of memory");
  free(probe);
  int64_t rows = A * c.B;
  int64_t grain = tt_max64(1, 16384 / tt_max64(c.D, 1));
  tt_parallel_for(rows, grain, tt_argsort_rows, &c);
  return NULL;
}

/* ---- searchsorted ------------------------------------------------------ */
static int64_t tt_lower_bound_f(const tt_view_t *s, int64_t off, int64_t n, double v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + ((hi - lo) >> 1);
    double m = tt_get_f64(s->data, s->dtype, off + mid);
    if (!(m >= v)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int64_t tt_upper_bound_f(const tt_view_t *s, int64_t off, int64_t n, double v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + ((hi - lo) >> 1);
    double m = tt_get_f64(s->data, s->dtype, off + mid);
    if (!(m > v)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int64_t tt_bound_i(const tt_view_t *s, int64_t off, int64_t n, int64_t v, int right) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + ((hi - lo) >> 1);
    int64_t m = tt_get_i64(s->data, s->dtype, off + mid);
    if (right ? !(m > v) : !(m >= v)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

tt_status_t tt_kernel_searchsorted(const tt_view_t *sorted, const tt_view_t *values, int right,
                                   tt_view_t *out) {
  TT_RETURN_IF_ERROR(tt_check_view("searchsorted", "sorted_sequence", sorted));
  TT_RETURN_IF_ERROR(tt_check_view("searchsorted", "values", values));
  TT_RETURN_IF_ERROR(tt_check_view("searchsorted", "out", out));
  if (sorted->shape.rank < 1)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "searchsorted: sorted_sequence must have at least one dimension");
  if (sorted->dtype != values->dtype)
    return tt_status_make(TT_TYPE_ERROR, "searchsorted: dtypes differ (%s and %s)",
                          tt_dtype_name(sorted->dtype), tt_dtype_name(values->dtype));
  if (out->dtype != TT_I64 && out->dtype != TT_I32)
    return tt_status_make(TT_TYPE_ERROR, "searchsorted: out must be int64 or int32");
  if (!tt_shape_equal(&values->shape, &out->shape))
    return tt_status_make(TT_INVALID_ARGUMENT, "searchsorted: out shape must equal values'");
  int64_t m = sorted->shape.dims[sorted->shape.rank - 1];
  int64_t nv = tt_view_numel(values);
  int64_t rows_s = m ? tt_view_numel(sorted) / m : 0;
  int64_t per_row = 1;
  if (sorted->shape.rank > 1) {
    /* Leading dims must match values'; each values row searches its own. */
    char b1[128], b2[128];
    int ok = values->shape.rank == sorted->shape.rank;
    for (int d = 0; ok && d < sorted->shape.rank - 1; ++d)
      ok = values->shape.dims[d] == sorted->shape.dims[d];
    if (!ok)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "torch.searchsorted(): boundaries tensor should be 1 dimension or "
                            "the first N-1 dimensions of boundaries tensor and input value "
                            "tensor must match, but we got boundaries tensor %s and input value "
                            "tensor %s",
                            tt_dims_str(&sorted->shape, b1, sizeof b1),
                            tt_dims_str(&values->shape, b2, sizeof b2));
    per_row = values->shape.rank ? values->shape.dims[values->shape.rank - 1] : 1;
  }
  int is_float = tt_class_of(sorted->dtype) != TT_CLASS_INT;
  for (int64_t i = 0; i < nv; ++i) {
    int64_t row = sorted->shape.rank > 1 ? (per_row ? i / per_row : 0) : 0;
    int64_t off = row < rows_s ? row * m : 0;
    int64_t r;
    if (is_float) {
      double v = tt_get_f64(values->data, values->dtype, i);
      r = right ? tt_upper_bound_f(sorted, off, m, v) : tt_lower_bound_f(sorted, off, m, v);
    } else {
      r = tt_bound_i(sorted, off, m, tt_get_i64(values->data, values->dtype, i), right);
    }
    tt_set_i64(out->data, out->dtype, i, r);
  }
  return NULL;
}
