/* Checks shared by the per-op shape inference (src/ir/infer.h). */
#include <stdio.h>

#include "ir/infer.h"

void tt_shape_format(const tt_shape_t *s, char *buf, size_t n) {
  size_t used = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < s->rank && used < n; ++i)
    used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld",
                             (long long)s->dims[i]);
  if (used < n) snprintf(buf + used, n - used, "]");
}

tt_status_t tt_infer_set_dims(tt_shape_t *out, const int64_t *dims, int64_t n,
                              const char *what) {
  if (n < 0 || n > TT_MAX_RANK)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: rank %lld exceeds the maximum %d",
                          what, (long long)n, TT_MAX_RANK);
  out->rank = (int32_t)n;
  for (int64_t i = 0; i < n; ++i) {
    if (dims[i] < 0)
      return tt_status_make(TT_INVALID_ARGUMENT, "%s: negative dimension %lld at %lld",
                            what, (long long)dims[i], (long long)i);
    out->dims[i] = dims[i];
  }
  return NULL;
}

tt_status_t tt_infer_broadcast_shapes(const tt_shape_t *a, const tt_shape_t *b,
                                      tt_shape_t *out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  /* From the last dim back, as PyTorch does: its message names the last
   * mismatching dim. */
  for (int i = r - 1; i >= 0; --i) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      TT_SHAPE_STR(sa, a);
      TT_SHAPE_STR(sb, b);
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "The size of tensor a (%lld) must match the size of tensor b "
                            "(%lld) at non-singleton dimension %d (shapes %s and %s)",
                            (long long)da, (long long)db, i, sa, sb);
    }
    out->dims[i] = da == 1 ? db : da;
  }
  return NULL;
}

tt_status_t tt_infer_check_dim(int64_t dim, int32_t rank, const char *what) {
  if (dim < 0 || dim >= (rank > 0 ? rank : 1))
    return tt_status_make(TT_OUT_OF_RANGE,
                          "%s: dimension out of range (expected to be in range of [%d, %d], "
                          "but got %lld)",
                          what, rank > 0 ? -rank : -1, rank > 0 ? rank - 1 : 0,
                          (long long)dim);
  return NULL;
}

tt_status_t tt_infer_dim_in_rank(const char *name, int64_t dim, int32_t rank) {
  if (dim < 0 || dim >= (rank > 0 ? rank : 1))
    return tt_status_make(TT_OUT_OF_RANGE, "%s: dim %lld out of range for rank %d", name,
                          (long long)dim, rank);
  return NULL;
}
