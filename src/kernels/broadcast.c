/* The broadcasting iterator: output positions to operand offsets
 * (kernel_util.h). */
#include "kernels/kernel_util.h"

#include <stdio.h>

tt_status_t tt_iter_init(const char *op, const tt_shape_t *out,
                         const tt_view_t *const *inputs, int ninputs,
                         tt_iter_t *it) {
  int rank = out->rank;
  int64_t full[TT_ITER_MAX_OPS][TT_MAX_RANK];
  tt_contiguous_strides(out, full[0]);
  for (int k = 0; k < ninputs; ++k) {
    const tt_shape_t *s = &inputs[k]->shape;
    char b1[160], b2[160];
    if (s->rank > rank) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: input %d shape %s has more dims than output %s",
                            op, k, tt_dims_str(s, b1, sizeof b1),
                            tt_dims_str(out, b2, sizeof b2));
    }
    int64_t own[TT_MAX_RANK];
    tt_contiguous_strides(s, own);
    int lead = rank - s->rank;
    for (int d = 0; d < rank; ++d) {
      if (d < lead) {
        full[k + 1][d] = 0;
        continue;
      }
      int64_t sd = s->dims[d - lead];
      if (sd == out->dims[d]) {
        full[k + 1][d] = sd == 1 ? 0 : own[d - lead];
      } else if (sd == 1) {
        full[k + 1][d] = 0;
      } else {
        return tt_status_make(
            TT_INVALID_ARGUMENT,
            "%s: input %d shape %s does not broadcast to output shape %s", op,
            k, tt_dims_str(s, b1, sizeof b1), tt_dims_str(out, b2, sizeof b2));
      }
    }
  }
  int nops = ninputs + 1;
  it->nops = nops;
  it->rank = 0;
  /* Drop size-1 dims, then merge d into the previous kept dim when every
   * operand's strides make them one contiguous run. */
  for (int d = 0; d < rank; ++d) {
    if (out->dims[d] == 1) continue;
    int r = it->rank;
    if (r > 0) {
      int mergeable = 1;
      for (int k = 0; k < nops; ++k) {
        if (it->strides[k][r - 1] != full[k][d] * out->dims[d]) {
          mergeable = 0;
          break;
        }
      }
      if (mergeable) {
        it->dims[r - 1] *= out->dims[d];
        for (int k = 0; k < nops; ++k) it->strides[k][r - 1] = full[k][d];
        continue;
      }
    }
    it->dims[r] = out->dims[d];
    for (int k = 0; k < nops; ++k) it->strides[k][r] = full[k][d];
    it->rank = r + 1;
  }
  if (it->rank == 0) {
    it->rank = 1;
    it->dims[0] = 1;
    for (int k = 0; k < nops; ++k) it->strides[k][0] = 0;
  }
  return NULL;
}

void tt_iter_seek(const tt_iter_t *it, int64_t flat, tt_iter_pos_t *pos) {
  for (int k = 0; k < it->nops; ++k) pos->off[k] = 0;
  for (int d = it->rank - 1; d >= 0; --d) {
    int64_t i = it->dims[d] ? flat % it->dims[d] : 0;
    flat = it->dims[d] ? flat / it->dims[d] : 0;
    pos->idx[d] = i;
    for (int k = 0; k < it->nops; ++k) pos->off[k] += i * it->strides[k][d];
  }
}

void tt_iter_advance(const tt_iter_t *it, tt_iter_pos_t *pos, int64_t n) {
  int d = it->rank - 1;
  pos->idx[d] += n;
  for (int k = 0; k < it->nops; ++k) pos->off[k] += n * it->strides[k][d];
  while (d > 0 && pos->idx[d] >= it->dims[d]) {
    for (int k = 0; k < it->nops; ++k) {
      pos->off[k] -= it->dims[d] * it->strides[k][d];
      pos->off[k] += it->strides[k][d - 1];
    }
    pos->idx[d] = 0;
    --d;
    pos->idx[d] += 1;
  }
}
