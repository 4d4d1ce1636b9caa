/* Tier-0 execution of the extra IR ops (see ir/ops_extra.h): one kernel
 * call per instruction. */
#include <string.h>

#include "ir/ops_extra.h"

tt_status_t tt_run_instr_extra(const tt_instr_t *in, const tt_view_t *x, int num_operands,
                               tt_view_t *out) {
  const int64_t *ia = in->iattrs;
  (void)num_operands;
  switch (in->op) {
    case TT_OP_ARGSORT:
      return tt_kernel_argsort(&x[0], (int)ia[0], (int)ia[1], out);
    case TT_OP_SEARCHSORTED:
      return tt_kernel_searchsorted(&x[0], &x[1], (int)ia[0], out);
    case TT_OP_SCATTER_REDUCE:
      return tt_kernel_scatter_reduce(&x[0], (int)ia[0], &x[1], &x[2],
                                      (tt_scatter_reduce_t)ia[1], (int)ia[2], out);
    case TT_OP_CUMULATIVE:
      return tt_kernel_cumulative((tt_cumulative_t)ia[0], &x[0], (int)ia[1], out);
    case TT_OP_BITCAST: {
      size_t bytes = (size_t)tt_shape_numel(&out->shape) * tt_dtype_size(out->dtype);
      if (bytes) memcpy(out->data, x[0].data, bytes);
      return NULL;
    }
    case TT_OP_LINALG: {
      const tt_view_t *ins[3];
      for (int i = 0; i < num_operands && i < 3; ++i) ins[i] = &x[i];
      return tt_kernel_linalg((tt_linalg_op_t)ia[0], ins, num_operands < 3 ? num_operands : 3,
                              ia + 1, out);
    }
    case TT_OP_SPECIAL:
      return tt_kernel_special((tt_special_op_t)ia[0], &x[0], &x[1], out);
    case TT_OP_FFT:
      return tt_kernel_fft((tt_fft_kind_t)ia[0], ia[1], in->fattrs[0], &x[0], out);
    default:
      return tt_status_make(TT_UNIMPLEMENTED, "no kernel for op %s", tt_op_name(in->op));
  }
}
