/* Checking the views kernels are handed, and their sizes (kernel_util.h). */
#include "kernels/kernel_util.h"

#include <stdio.h>

tt_status_t tt_check_view(const char *op, const char *what,
                          const tt_view_t *v) {
  if (!v) return tt_status_make(TT_INVALID_ARGUMENT, "%s: %s is NULL", op, what);
  if ((unsigned)v->dtype >= TT_DTYPE_COUNT) {
    return tt_status_make(TT_TYPE_ERROR, "%s: %s has unknown dtype %d", op,
                          what, (int)v->dtype);
  }
  if (v->shape.rank < 0 || v->shape.rank > TT_MAX_RANK) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: %s has rank %d, expected 0..%d", op, what,
                          (int)v->shape.rank, TT_MAX_RANK);
  }
  int64_t n = 1;
  for (int i = 0; i < v->shape.rank; ++i) {
    int64_t d = v->shape.dims[i];
    if (d < 0) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: %s has negative dim %d = %lld", op, what, i,
                            (long long)d);
    }
    if (d > 0 && n > (INT64_C(1) << 62) / d) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: %s has too many elements", op, what);
    }
    n *= d;
  }
  if (n > 0 && !v->data) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: %s has NULL data", op,
                          what);
  }
  return NULL;
}

int64_t tt_view_numel(const tt_view_t *v) {
  int64_t n = 1;
  for (int i = 0; i < v->shape.rank; ++i) n *= v->shape.dims[i];
  return n;
}

const char *tt_dims_str(const tt_shape_t *s, char *buf, size_t size) {
  size_t used = 0;
  int w = snprintf(buf, size, "[");
  used = w > 0 ? (size_t)w : 0;
  int rank = s->rank < 0 ? 0 : (s->rank > TT_MAX_RANK ? TT_MAX_RANK : s->rank);
  for (int i = 0; i < rank && used < size; ++i) {
    w = snprintf(buf + used, size - used, "%s%lld", i ? ", " : "",
                 (long long)s->dims[i]);
    if (w > 0) used += (size_t)w;
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

void tt_contiguous_strides(const tt_shape_t *s, int64_t *strides) {
  int64_t st = 1;
  for (int i = s->rank - 1; i >= 0; --i) {
    strides[i] = st;
    st *= s->dims[i];
  }
}
