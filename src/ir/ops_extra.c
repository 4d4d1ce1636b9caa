/* Shape and dtype inference for the extra IR ops (see ops_extra.h). */
#include <stdio.h>
#include <string.h>

#include "ir/ops_extra.h"

static tt_status_t tt_x_need(const tt_node_t *n, int lo, int hi, int nattrs) {
  if (n->num_operands < lo || n->num_operands > hi)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected %d to %d operands, got %d",
                          tt_op_name(n->op), lo, hi, n->num_operands);
  if (n->num_iattrs < nattrs)
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: expected %d attributes, got %d",
                          tt_op_name(n->op), nattrs, n->num_iattrs);
  return NULL;
}

static tt_status_t tt_x_dim(const tt_node_t *n, int64_t dim, int32_t rank) {
  if (dim < 0 || dim >= (rank > 0 ? rank : 1))
    return tt_status_make(TT_OUT_OF_RANGE, "%s: dim %lld out of range for rank %d",
                          tt_op_name(n->op), (long long)dim, rank);
  return NULL;
}

static int tt_x_is_index(tt_dtype_t dt) { return dt == TT_I64 || dt == TT_I32; }

static int tt_x_is_float(tt_dtype_t dt) {
  return dt == TT_F32 || dt == TT_F16 || dt == TT_BF16;
}

/* Attention's q, k, v (and optional mask) at x[0..3]: the checks of
 * tt_kernel_attention, at record time. */
static tt_status_t tt_x_attention_check(const tt_node_t *n, tt_node_t *const *x, int has_mask) {
  const char *name = tt_op_name(n->op);
  for (int i = 0; i < 3; ++i)
    if (x[i]->shape.rank != 4)
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: query, key and value must be rank 4 [B, H, L, E], got rank %d",
                            name, x[i]->shape.rank);
  if (!tt_x_is_float(x[0]->dtype) || x[1]->dtype != x[0]->dtype || x[2]->dtype != x[0]->dtype)
    return tt_status_make(TT_TYPE_ERROR,
                          "%s: query, key and value must share one of float32, float16, "
                          "bfloat16, got %s, %s, %s", name, tt_dtype_name(x[0]->dtype),
                          tt_dtype_name(x[1]->dtype), tt_dtype_name(x[2]->dtype));
  const int64_t *q = x[0]->shape.dims, *k = x[1]->shape.dims, *v = x[2]->shape.dims;
  if (k[0] != q[0] || v[0] != q[0] || k[1] != q[1] || v[1] != q[1] || k[3] != q[3] ||
      v[2] != k[2])
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: shapes do not match: query [%lld, %lld, %lld, %lld], key [%lld, "
                          "%lld, %lld, %lld], value [%lld, %lld, %lld, %lld]", name,
                          (long long)q[0], (long long)q[1], (long long)q[2], (long long)q[3],
                          (long long)k[0], (long long)k[1], (long long)k[2], (long long)k[3],
                          (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3]);
  if (!has_mask) return NULL;
  const tt_node_t *m = x[3];
  const int64_t full[4] = {q[0], q[1], q[2], k[2]};
  int ok = m->shape.rank == 4 && tt_x_is_float(m->dtype);
  for (int d = 0; ok && d < 4; ++d) ok = m->shape.dims[d] == 1 || m->shape.dims[d] == full[d];
  if (!ok)
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: the mask (%s, rank %d) must be a float tensor of rank 4 that "
                          "broadcasts to [%lld, %lld, %lld, %lld]", name,
                          tt_dtype_name(m->dtype), m->shape.rank, (long long)full[0],
                          (long long)full[1], (long long)full[2], (long long)full[3]);
  return NULL;
}

tt_status_t tt_node_infer_extra(tt_node_t *n) {
  tt_node_t **x = n->operands;
  const int64_t *ia = n->iattrs;
  switch (n->op) {
    case TT_OP_ARGSORT:
      TT_RETURN_IF_ERROR(tt_x_need(n, 1, 1, 2));
      TT_RETURN_IF_ERROR(tt_x_dim(n, ia[0], x[0]->shape.rank));
      n->shape = x[0]->shape;
      n->dtype = TT_I64;
      return NULL;
    case TT_OP_SEARCHSORTED: {
      TT_RETURN_IF_ERROR(tt_x_need(n, 2, 2, 2));
      const tt_shape_t *s = &x[0]->shape, *v = &x[1]->shape;
      if (s->rank < 1)
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "searchsorted: sorted_sequence must have at least one dimension");
      if (x[0]->dtype != x[1]->dtype)
        return tt_status_make(TT_TYPE_ERROR, "searchsorted: dtypes differ (%s and %s)",
                              tt_dtype_name(x[0]->dtype), tt_dtype_name(x[1]->dtype));
      if (s->rank > 1) {
        int ok = v->rank == s->rank;
        for (int d = 0; ok && d < s->rank - 1; ++d) ok = v->dims[d] == s->dims[d];
        if (!ok)
          return tt_status_make(TT_INVALID_ARGUMENT,
                                "torch.searchsorted(): boundaries tensor should be 1 dimension "
                                "or the first N-1 dimensions of boundaries tensor and input "
                                "value tensor must match");
      }
      if (!tt_x_is_index((tt_dtype_t)ia[1]))
        return tt_status_make(TT_TYPE_ERROR, "searchsorted: out dtype must be int64 or int32");
      n->shape = *v;
      n->dtype = (tt_dtype_t)ia[1];
      return NULL;
    }
    case TT_OP_SCATTER_REDUCE: {
      TT_RETURN_IF_ERROR(tt_x_need(n, 3, 3, 3));
      int32_t r = x[0]->shape.rank;
      TT_RETURN_IF_ERROR(tt_x_dim(n, ia[0], r));
      if (!tt_x_is_index(x[1]->dtype))
        return tt_status_make(TT_TYPE_ERROR, "scatter_reduce(): Expected dtype int64 for index");
      if (x[2]->dtype != x[0]->dtype)
        return tt_status_make(TT_TYPE_ERROR,
                              "scatter_reduce(): Expected self.dtype to be equal to src.dtype");
      if (x[1]->shape.rank != r || x[2]->shape.rank != r)
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "Index tensor must have the same number of dimensions as self "
                              "tensor");
      if (ia[1] < 0 || ia[1] >= TT_SCATTER_REDUCE_COUNT)
        return tt_status_make(TT_INVALID_ARGUMENT, "scatter_reduce: unknown reduce %lld",
                              (long long)ia[1]);
      n->shape = x[0]->shape;
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_CUMULATIVE:
      TT_RETURN_IF_ERROR(tt_x_need(n, 1, 1, 2));
      TT_RETURN_IF_ERROR(tt_x_dim(n, ia[1], x[0]->shape.rank));
      if (ia[0] < 0 || ia[0] >= TT_CUM_COUNT)
        return tt_status_make(TT_INVALID_ARGUMENT, "cumulative: unknown op %lld",
                              (long long)ia[0]);
      n->shape = x[0]->shape;
      n->dtype = (ia[0] == TT_CUM_MAX_INDEX || ia[0] == TT_CUM_MIN_INDEX) ? TT_I64 : x[0]->dtype;
      return NULL;
    case TT_OP_BITCAST: {
      TT_RETURN_IF_ERROR(tt_x_need(n, 1, 1, 1));
      if (ia[0] < 0 || ia[0] >= TT_DTYPE_COUNT)
        return tt_status_make(TT_TYPE_ERROR, "bitcast: unknown dtype %lld", (long long)ia[0]);
      int64_t nd = n->num_iattrs - 1;
      if (nd > TT_MAX_RANK)
        return tt_status_make(TT_INVALID_ARGUMENT, "bitcast: rank %lld too large", (long long)nd);
      n->shape.rank = (int32_t)nd;
      for (int64_t d = 0; d < nd; ++d) n->shape.dims[d] = ia[1 + d];
      n->dtype = (tt_dtype_t)ia[0];
      size_t in_bytes = (size_t)tt_shape_numel(&x[0]->shape) * tt_dtype_size(x[0]->dtype);
      size_t out_bytes = (size_t)tt_shape_numel(&n->shape) * tt_dtype_size(n->dtype);
      if (in_bytes != out_bytes)
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "bitcast: %zu bytes cannot be viewed as %zu bytes of %s", in_bytes,
                              out_bytes, tt_dtype_name(n->dtype));
      return NULL;
    }
    case TT_OP_LINALG: {
      /* i: [tt_linalg_op_t, flag0, flag1, flag2] */
      TT_RETURN_IF_ERROR(tt_x_need(n, 1, 3, 4));
      if (ia[0] < 0 || ia[0] >= TT_LINALG_COUNT)
        return tt_status_make(TT_INVALID_ARGUMENT, "linalg: unknown op %lld", (long long)ia[0]);
      for (int i = 0; i < n->num_operands; ++i) {
        if (x[i]->shape.rank != 3)
          return tt_status_make(TT_INVALID_ARGUMENT, "linalg: operand %d must be rank 3, got %d",
                                i, x[i]->shape.rank);
        if (x[i]->dtype != TT_F32 && x[i]->dtype != TT_F64 && x[i]->dtype != TT_F16 &&
            x[i]->dtype != TT_BF16)
          return tt_status_make(TT_TYPE_ERROR, "linalg: expected a floating point tensor, got %s",
                                tt_dtype_name(x[i]->dtype));
      }
      int64_t P = tt_linalg_out_size((tt_linalg_op_t)ia[0], &x[0]->shape,
                                     n->num_operands > 1 ? &x[1]->shape : NULL,
                                     n->num_operands > 2 ? &x[2]->shape : NULL);
      if (P < 0) return tt_status_make(TT_INVALID_ARGUMENT, "linalg: bad operands");
      n->shape.rank = 2;
      n->shape.dims[0] = x[0]->shape.dims[0];
      n->shape.dims[1] = P;
      n->dtype = x[0]->dtype;
      return NULL;
    }
    case TT_OP_SPECIAL:
      TT_RETURN_IF_ERROR(tt_x_need(n, 2, 2, 1));
      if (ia[0] < 0 || ia[0] >= TT_SP_COUNT)
        return tt_status_make(TT_INVALID_ARGUMENT, "special: unknown op %lld", (long long)ia[0]);
      if (!tt_shape_equal(&x[0]->shape, &x[1]->shape))
        return tt_status_make(TT_INVALID_ARGUMENT, "special: operands must have one shape");
      if (x[0]->dtype != TT_F32 && x[0]->dtype != TT_F64 && x[0]->dtype != TT_F16 &&
          x[0]->dtype != TT_BF16)
        return tt_status_make(TT_TYPE_ERROR, "special: expected a floating point tensor, got %s",
                              tt_dtype_name(x[0]->dtype));
      n->shape = x[0]->shape;
      n->dtype = x[0]->dtype;
      return NULL;
    case TT_OP_FFT: {
      TT_RETURN_IF_ERROR(tt_x_need(n, 1, 1, 2));
      tt_fft_kind_t kind = (tt_fft_kind_t)ia[0];
      int64_t len = ia[1];
      if (ia[0] < 0 || ia[0] >= TT_FFT_COUNT)
        return tt_status_make(TT_INVALID_ARGUMENT, "fft: unknown kind %lld", (long long)ia[0]);
      int32_t r = x[0]->shape.rank;
      tt_dtype_t want = kind == TT_FFT_R2C ? TT_F32 : TT_C64;
      if (x[0]->dtype != want)
        return tt_status_make(TT_TYPE_ERROR, "fft: expected a %s operand, got %s",
                              tt_dtype_name(want), tt_dtype_name(x[0]->dtype));
      if (r < 1)
        return tt_status_make(TT_INVALID_ARGUMENT, "fft: operand must have at least one dim");
      int64_t last = x[0]->shape.dims[r - 1];
      if (len < 1 || (kind == TT_FFT_C2R ? last < len / 2 + 1 : last != len))
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "fft: Invalid number of data points (%lld) specified for a last "
                              "dim of %lld",
                              (long long)len, (long long)last);
      n->shape = x[0]->shape;
      n->shape.dims[r - 1] = kind == TT_FFT_R2C ? len / 2 + 1 : len;
      n->dtype = kind == TT_FFT_C2R ? TT_F32 : TT_C64;
      return NULL;
    }
    case TT_OP_ATTENTION: {
      TT_RETURN_IF_ERROR(tt_x_need(n, 3, 4, 2));
      TT_RETURN_IF_ERROR(tt_x_attention_check(n, x, n->num_operands == 4));
      const int64_t *q = x[0]->shape.dims;
      if (ia[1]) {
        n->shape = (tt_shape_t){.rank = 3, .dims = {q[0], q[1], q[2]}};
        n->dtype = TT_F32;
      } else {
        n->shape = (tt_shape_t){.rank = 4, .dims = {q[0], q[1], q[2], x[2]->shape.dims[3]}};
        n->dtype = x[0]->dtype;
      }
      return NULL;
    }
    case TT_OP_ATTENTION_BWD: {
      /* (grad_out, q, k, v[, mask]) */
      TT_RETURN_IF_ERROR(tt_x_need(n, 4, 5, 1));
      TT_RETURN_IF_ERROR(tt_x_attention_check(n, x + 1, n->num_operands == 5));
      const int64_t *q = x[1]->shape.dims;
      const int64_t od[4] = {q[0], q[1], q[2], x[3]->shape.dims[3]};
      const tt_node_t *g = x[0];
      int ok = g->dtype == x[1]->dtype && g->shape.rank == 4;
      for (int d = 0; ok && d < 4; ++d) ok = g->shape.dims[d] == od[d];
      if (!ok)
        return tt_status_make(TT_INVALID_ARGUMENT,
                              "attention_bwd: grad_out must be %s [%lld, %lld, %lld, %lld]",
                              tt_dtype_name(x[1]->dtype), (long long)od[0], (long long)od[1],
                              (long long)od[2], (long long)od[3]);
      n->shape = (tt_shape_t){.rank = 1,
                              .dims = {tt_shape_numel(&x[1]->shape) +
                                       tt_shape_numel(&x[2]->shape) +
                                       tt_shape_numel(&x[3]->shape)}};
      n->dtype = x[1]->dtype;
      return NULL;
    }
    case TT_OP_LAYER_NORM:
    case TT_OP_LAYER_NORM_BWD: {
      int bwd = n->op == TT_OP_LAYER_NORM_BWD;
      TT_RETURN_IF_ERROR(bwd ? tt_x_need(n, 4, 5, 2) : tt_x_need(n, 1, 3, 4));
      const tt_node_t *xn = x[bwd];
      TT_RETURN_IF_ERROR(tt_x_dim(n, ia[0], xn->shape.rank));
      int64_t R, C;
      tt_shape_split(&xn->shape, (int)ia[0], &R, &C);
      /* Forward: weight then bias, as flagged; backward: grad_out (as x),
       * mean, rstd (R each), weight. */
      int64_t want[5] = {R * C, C, C, 0, 0};
      if (bwd) {
        want[0] = R * C, want[1] = R * C, want[2] = R, want[3] = R, want[4] = C;
      } else if (n->num_operands != 1 + (ia[1] != 0) + (ia[2] != 0)) {
        return tt_status_make(TT_INVALID_ARGUMENT, "layer_norm: %d operands for weight %lld, "
                              "bias %lld", n->num_operands, (long long)ia[1], (long long)ia[2]);
      }
      for (int k = 0; k < n->num_operands; ++k)
        if (x[k]->dtype != TT_F32 || tt_shape_numel(&x[k]->shape) != want[k])
          return tt_status_make(TT_INVALID_ARGUMENT,
                                "%s: operand %d must be float32 with %lld elements, got %s with "
                                "%lld", tt_op_name(n->op), k, (long long)want[k],
                                tt_dtype_name(x[k]->dtype),
                                (long long)tt_shape_numel(&x[k]->shape));
      if (!bwd && (ia[3] < 0 || ia[3] > 2))
        return tt_status_make(TT_INVALID_ARGUMENT, "layer_norm: form %lld is not 0, 1 or 2",
                              (long long)ia[3]);
      if (!bwd && ia[3] == 0)
        n->shape = xn->shape;
      else
        n->shape = (tt_shape_t){.rank = 1,
                                .dims = {bwd ? R * C + 2 * C : ia[3] == 1 ? 2 * R : R * C + 2 * R}};
      n->dtype = TT_F32;
      return NULL;
    }
    default:
      return tt_status_make(TT_UNIMPLEMENTED, "op %s has no shape inference yet",
                            tt_op_name(n->op));
  }
}
