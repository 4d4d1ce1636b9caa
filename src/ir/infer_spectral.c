/* Shape inference of the FFT along the last dim (src/ir/infer.h). */
#include "ir/infer.h"

tt_status_t tt_infer_fft(tt_node_t *n, const void *attrs) {
  const tt_fft_attrs_t *a = attrs;
  const tt_node_t *x = n->operands[0];
  tt_fft_kind_t kind = (tt_fft_kind_t)a->kind;
  int64_t len = a->n;
  if (a->kind < 0 || a->kind >= TT_FFT_COUNT)
    return tt_status_make(TT_INVALID_ARGUMENT, "fft: unknown kind %lld", (long long)a->kind);
  int32_t r = x->shape.rank;
  tt_dtype_t want = kind == TT_FFT_R2C ? TT_F32 : TT_C64;
  if (x->dtype != want)
    return tt_status_make(TT_TYPE_ERROR, "fft: expected a %s operand, got %s",
                          tt_dtype_name(want), tt_dtype_name(x->dtype));
  if (r < 1)
    return tt_status_make(TT_INVALID_ARGUMENT, "fft: operand must have at least one dim");
  int64_t last = x->shape.dims[r - 1];
  if (len < 1 || (kind == TT_FFT_C2R ? last < len / 2 + 1 : last != len))
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "fft: Invalid number of data points (%lld) specified for a last "
                          "dim of %lld",
                          (long long)len, (long long)last);
  n->shape = x->shape;
  n->shape.dims[r - 1] = kind == TT_FFT_R2C ? len / 2 + 1 : len;
  n->dtype = kind == TT_FFT_C2R ? TT_F32 : TT_C64;
  return NULL;
}
