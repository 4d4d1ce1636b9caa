/* Indexing kernels: index_select, index_add, gather, scatter.
 *
 * Index tensors are I64 or I32. index_select and index_add wrap a negative
 * index once (as x[idx] does); gather and scatter reject negative indices,
 * as torch.gather / torch.scatter do. Every index is checked before any
 * output is written, and a bad one is reported as TT_OUT_OF_RANGE naming
 * the index, the dim and its size.
 */
#include <stdlib.h>

#include "kernels/kernel_util.h"

static tt_status_t tt_check_index_view(const char *name, const tt_view_t *idx) {
  TT_RETURN_IF_ERROR(tt_check_view(name, "index", idx));
  if (idx->dtype != TT_I64 && idx->dtype != TT_I32) {
    return tt_status_make(TT_TYPE_ERROR,
                          "%s: index must be int64 or int32, got %s", name,
                          tt_dtype_name(idx->dtype));
  }
  return NULL;
}

static TT_ALWAYS_INLINE int64_t tt_index_at(const tt_view_t *idx, int64_t i) {
  return idx->dtype == TT_I64 ? ((const int64_t *)idx->data)[i]
                              : ((const int32_t *)idx->data)[i];
}

static tt_status_t tt_check_dim(const char *name, int dim, int rank) {
  if (dim < 0 || dim >= (rank == 0 ? 1 : rank)) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: dim %d out of range for rank %d", name, dim, rank);
  }
  return NULL;
}

/* Views shape as [A, D, B] around dim (rank 0 is [1, 1, 1]). */
static void tt_split_at(const tt_shape_t *s, int dim, int64_t *A, int64_t *D,
                        int64_t *B) {
  *A = 1;
  *D = 1;
  *B = 1;
  for (int d = 0; d < s->rank; ++d) {
    if (d < dim) *A *= s->dims[d];
    else if (d == dim) *D = s->dims[d];
    else *B *= s->dims[d];
  }
}

/* Reads a 1-D index into a fresh int64 array, wrapping negatives once. */
static tt_status_t tt_read_wrapped_index(const char *name, const tt_view_t *idx,
                                         int dim, int64_t size,
                                         int64_t **out_idx, int64_t *out_len) {
  TT_RETURN_IF_ERROR(tt_check_index_view(name, idx));
  if (idx->shape.rank > 1) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: index must be 1-D, got rank %d", name,
                          (int)idx->shape.rank);
  }
  int64_t n = tt_view_numel(idx);
  int64_t *v = (int64_t *)malloc((size_t)tt_max64(n, 1) * sizeof(int64_t));
  if (!v) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = tt_index_at(idx, i);
    int64_t w = k < 0 ? k + size : k;
    if (w < 0 || w >= size) {
      free(v);
      return tt_status_make(TT_OUT_OF_RANGE,
                            "%s: index %lld is out of bounds for dimension %d "
                            "with size %lld",
                            name, (long long)k, dim, (long long)size);
    }
    v[i] = w;
  }
  *out_idx = v;
  *out_len = n;
  return NULL;
}

/* F16/BF16 accumulation goes through an f32 copy of the output that is
 * rounded once at the end, as PyTorch does for index_add / scatter_add.
 * Sets *acc to the view to accumulate into (out itself for other dtypes). */
static tt_status_t tt_acc_begin(const char *name, const tt_view_t *base,
                                tt_view_t *out, tt_view_t *acc) {
  size_t n = (size_t)tt_view_numel(base);
  if (out->dtype != TT_F16 && out->dtype != TT_BF16) {
    *acc = *out;
    memcpy(out->data, base->data, n * tt_dtype_size(base->dtype));
    return NULL;
  }
  *acc = *out;
  acc->dtype = TT_F32;
  acc->data = malloc((n ? n : 1) * sizeof(float));
  if (!acc->data) return tt_status_make(TT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  tt_load_f32(base->data, base->dtype, 0, 1, (int64_t)n, (float *)acc->data);
  return NULL;
}

static void tt_acc_end(tt_view_t *out, tt_view_t *acc) {
  if (acc->data == out->data) return;
  tt_store_f32((const float *)acc->data, tt_view_numel(out), out->data, out->dtype, 0);
  free(acc->data);
}

/* Checks that `got` is `like` with dim `dim` resized to n. */
static tt_status_t tt_check_resized(const char *name, const char *what,
                                    const tt_view_t *got, const tt_view_t *like,
                                    int dim, int64_t n) {
  tt_shape_t want = like->shape;
  if (want.rank > 0) want.dims[dim] = n;
  if (!tt_shape_equal(&got->shape, &want)) {
    char b1[160], b2[160];
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: %s shape %s, expected %s",
                          name, what, tt_dims_str(&got->shape, b1, sizeof b1),
                          tt_dims_str(&want, b2, sizeof b2));
  }
  return NULL;
}

tt_status_t tt_kernel_index_select(const tt_view_t *x, int dim,
                                   const tt_view_t *idx, tt_view_t *out) {
  static const char *name = "index_select";
  TT_RETURN_IF_ERROR(tt_check_view(name, "x", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  TT_RETURN_IF_ERROR(tt_check_dim(name, dim, x->shape.rank));
  if (x->dtype != out->dtype) {
    return tt_status_make(TT_TYPE_ERROR, "%s: x is %s but out is %s", name,
                          tt_dtype_name(x->dtype), tt_dtype_name(out->dtype));
  }
  int64_t A, D, B;
  tt_split_at(&x->shape, dim, &A, &D, &B);
  int64_t *iv, L;
  TT_RETURN_IF_ERROR(tt_read_wrapped_index(name, idx, dim, D, &iv, &L));
  tt_status_t st = tt_check_resized(name, "out", out, x, dim, L);
  if (x->shape.rank == 0 && L != 1) {
    st = tt_status_make(TT_INVALID_ARGUMENT,
                        "%s: a scalar takes exactly one index, got %lld", name,
                        (long long)L);
  }
  if (st) {
    free(iv);
    return st;
  }
  size_t es = tt_dtype_size(x->dtype), row = (size_t)B * es;
  const char *src = (const char *)x->data;
  char *dst = (char *)out->data;
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t l = 0; l < L; ++l) {
      memcpy(dst + (size_t)(a * L + l) * row, src + (size_t)(a * D + iv[l]) * row, row);
    }
  }
  free(iv);
  return NULL;
}

typedef struct tt_index_add_ctx_s {
  const tt_view_t *src;
  tt_view_t *out;
  const int64_t *iv;
  int64_t A, D, B, L, nblk;
} tt_index_add_ctx_t;

static void tt_index_add_range(void *arg, int64_t begin, int64_t end) {
  const tt_index_add_ctx_t *c = (const tt_index_add_ctx_t *)arg;
  tt_class_t cls = tt_class_of(c->out->dtype);
  tt_dtype_t od = c->out->dtype, sd = c->src->dtype;
  for (int64_t t = begin; t < end; ++t) {
    int64_t a = t / c->nblk, j0 = (t % c->nblk) * TT_BLOCK;
    int64_t w = tt_min64(TT_BLOCK, c->B - j0);
    for (int64_t l = 0; l < c->L; ++l) {
      int64_t so = (a * c->L + l) * c->B + j0;
      int64_t oo = (a * c->D + c->iv[l]) * c->B + j0;
      if (cls == TT_CLASS_F32) {
        float x[TT_BLOCK], y[TT_BLOCK];
        tt_load_f32(c->out->data, od, oo, 1, w, x);
        tt_load_f32(c->src->data, sd, so, 1, w, y);
        for (int64_t j = 0; j < w; ++j) x[j] += y[j];
        tt_store_f32(x, w, c->out->data, od, oo);
      } else if (cls == TT_CLASS_F64) {
        double x[TT_BLOCK], y[TT_BLOCK];
        tt_load_f64(c->out->data, od, oo, 1, w, x);
        tt_load_f64(c->src->data, sd, so, 1, w, y);
        for (int64_t j = 0; j < w; ++j) x[j] += y[j];
        tt_store_f64(x, w, c->out->data, od, oo);
      } else {
        int64_t x[TT_BLOCK], y[TT_BLOCK];
        tt_load_i64(c->out->data, od, oo, 1, w, x);
        tt_load_i64(c->src->data, sd, so, 1, w, y);
        for (int64_t j = 0; j < w; ++j) x[j] = (int64_t)((uint64_t)x[j] + (uint64_t)y[j]);
        tt_store_i64(x, w, c->out->data, od, oo);
      }
    }
  }
}

tt_status_t tt_kernel_index_add(const tt_view_t *base, int dim,
                                const tt_view_t *idx, const tt_view_t *src,
                                tt_view_t *out) {
  static const char *name = "index_add";
  TT_RETURN_IF_ERROR(tt_check_view(name, "base", base));
  TT_RETURN_IF_ERROR(tt_check_view(name, "src", src));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  TT_RETURN_IF_ERROR(tt_check_dim(name, dim, base->shape.rank));
  if (base->dtype != out->dtype || src->dtype != out->dtype) {
    return tt_status_make(TT_TYPE_ERROR,
                          "%s: base (%s), src (%s) and out (%s) must have the "
                          "same dtype",
                          name, tt_dtype_name(base->dtype),
                          tt_dtype_name(src->dtype), tt_dtype_name(out->dtype));
  }
  if (!tt_shape_equal(&base->shape, &out->shape)) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: out must have base's shape", name);
  }
  tt_index_add_ctx_t c = {.src = src, .out = out};
  tt_split_at(&base->shape, dim, &c.A, &c.D, &c.B);
  int64_t *iv;
  TT_RETURN_IF_ERROR(tt_read_wrapped_index(name, idx, dim, c.D, &iv, &c.L));
  tt_status_t st = tt_check_resized(name, "src", src, base, dim, c.L);
  if (st) {
    free(iv);
    return st;
  }
  c.iv = iv;
  tt_view_t acc;
  st = tt_acc_begin(name, base, out, &acc);
  if (st) {
    free(iv);
    return st;
  }
  c.out = &acc;
  c.nblk = (c.B + TT_BLOCK - 1) / TT_BLOCK;
  if (c.L > 0 && c.B > 0) {
    int64_t per = c.L * tt_min64(c.B, TT_BLOCK);
    tt_parallel_for(c.A * c.nblk, tt_max64(1, TT_GRAIN / per), tt_index_add_range, &c);
  }
  tt_acc_end(out, &acc);
  free(iv);
  return NULL;
}

/* ---- gather / scatter --------------------------------------------------- */

/* Every index of a gather/scatter must lie in [0, size). */
static tt_status_t tt_check_gather_index(const char *name, const tt_view_t *idx,
                                         int dim, int64_t size) {
  int64_t n = tt_view_numel(idx);
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = tt_index_at(idx, i);
    if (k < 0 || k >= size) {
      return tt_status_make(TT_OUT_OF_RANGE,
                            "%s: index %lld is out of bounds for dimension %d "
                            "with size %lld",
                            name, (long long)k, dim, (long long)size);
    }
  }
  return NULL;
}

static tt_status_t tt_check_gather_shapes(const char *name, const tt_view_t *x,
                                          const tt_view_t *idx, int dim,
                                          const char *what) {
  if (idx->shape.rank != x->shape.rank) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: index rank %d differs from %s rank %d", name,
                          (int)idx->shape.rank, what, (int)x->shape.rank);
  }
  for (int d = 0; d < x->shape.rank; ++d) {
    if (d != dim && idx->shape.dims[d] > x->shape.dims[d]) {
      char b1[160], b2[160];
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: Size does not match at dimension %d expected "
                            "index %s to be no larger than %s %s apart from "
                            "dimension %d",
                            name, d, tt_dims_str(&idx->shape, b1, sizeof b1),
                            what, tt_dims_str(&x->shape, b2, sizeof b2), dim);
    }
  }
  return NULL;
}

/* Element offset in a tensor with strides st for idx position i (dim term
 * excluded). */
static int64_t tt_offset_for(const tt_shape_t *ishape, const int64_t *st,
                             int dim, int64_t i) {
  int64_t off = 0;
  for (int d = ishape->rank - 1; d >= 0; --d) {
    int64_t k = i % ishape->dims[d];
    i /= ishape->dims[d];
    if (d != dim) off += k * st[d];
  }
  return off;
}

tt_status_t tt_kernel_gather(const tt_view_t *x, int dim, const tt_view_t *idx,
                             tt_view_t *out) {
  static const char *name = "gather";
  TT_RETURN_IF_ERROR(tt_check_view(name, "x", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  TT_RETURN_IF_ERROR(tt_check_index_view(name, idx));
  TT_RETURN_IF_ERROR(tt_check_dim(name, dim, x->shape.rank));
  TT_RETURN_IF_ERROR(tt_check_gather_shapes(name, x, idx, dim, "input"));
  if (x->dtype != out->dtype || !tt_shape_equal(&out->shape, &idx->shape)) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: out must have x's dtype and index's shape", name);
  }
  int64_t xs[TT_MAX_RANK] = {0};
  tt_contiguous_strides(&x->shape, xs);
  int64_t size = x->shape.rank ? x->shape.dims[dim] : 1;
  TT_RETURN_IF_ERROR(tt_check_gather_index(name, idx, dim, size));
  int64_t n = tt_view_numel(idx);
  size_t es = tt_dtype_size(x->dtype);
  int64_t dstride = x->shape.rank ? xs[dim] : 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = tt_offset_for(&idx->shape, xs, dim, i) + tt_index_at(idx, i) * dstride;
    memcpy((char *)out->data + (size_t)i * es, (const char *)x->data + (size_t)off * es, es);
  }
  return NULL;
}

tt_status_t tt_kernel_scatter(const tt_view_t *base, int dim,
                              const tt_view_t *idx, const tt_view_t *src,
                              int reduce, tt_view_t *out) {
  const char *name = reduce ? "scatter_add" : "scatter";
  TT_RETURN_IF_ERROR(tt_check_view(name, "base", base));
  TT_RETURN_IF_ERROR(tt_check_view(name, "src", src));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  TT_RETURN_IF_ERROR(tt_check_index_view(name, idx));
  TT_RETURN_IF_ERROR(tt_check_dim(name, dim, base->shape.rank));
  if (reduce != 0 && reduce != 1) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: unknown reduce %d", name, reduce);
  }
  if (base->dtype != out->dtype || src->dtype != out->dtype ||
      !tt_shape_equal(&base->shape, &out->shape)) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: base, src and out must share a dtype and out "
                          "must have base's shape",
                          name);
  }
  TT_RETURN_IF_ERROR(tt_check_gather_shapes(name, base, idx, dim, "self"));
  if (src->shape.rank != idx->shape.rank) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: src rank %d differs from index rank %d", name,
                          (int)src->shape.rank, (int)idx->shape.rank);
  }
  for (int d = 0; d < src->shape.rank; ++d) {
    if (idx->shape.dims[d] > src->shape.dims[d]) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: index dim %d (%lld) is larger than src's (%lld)",
                            name, d, (long long)idx->shape.dims[d],
                            (long long)src->shape.dims[d]);
    }
  }
  int64_t size = base->shape.rank ? base->shape.dims[dim] : 1;
  TT_RETURN_IF_ERROR(tt_check_gather_index(name, idx, dim, size));
  int64_t bs[TT_MAX_RANK] = {0}, ss[TT_MAX_RANK] = {0};
  tt_contiguous_strides(&base->shape, bs);
  tt_contiguous_strides(&src->shape, ss);
  size_t es = tt_dtype_size(base->dtype);
  tt_view_t accv;
  if (reduce) {
    TT_RETURN_IF_ERROR(tt_acc_begin(name, base, out, &accv));
  } else {
    accv = *out;
    memcpy(out->data, base->data, (size_t)tt_view_numel(base) * es);
  }
  tt_view_t *acc = &accv;
  int64_t n = tt_view_numel(idx);
  int64_t dstride = base->shape.rank ? bs[dim] : 0;
  tt_class_t cls = tt_class_of(out->dtype);
  for (int64_t i = 0; i < n; ++i) {
    int64_t oo = tt_offset_for(&idx->shape, bs, dim, i) + tt_index_at(idx, i) * dstride;
    /* src position: same multi-index as idx, including along dim. */
    int64_t so = 0, r = i;
    for (int d = idx->shape.rank - 1; d >= 0; --d) {
      so += (r % idx->shape.dims[d]) * ss[d];
      r /= idx->shape.dims[d];
    }
    if (!reduce) {
      memcpy((char *)out->data + (size_t)oo * es, (const char *)src->data + (size_t)so * es, es);
    } else if (cls == TT_CLASS_INT) {
      int64_t v = (int64_t)((uint64_t)tt_get_i64(acc->data, acc->dtype, oo) +
                            (uint64_t)tt_get_i64(src->data, src->dtype, so));
      tt_set_i64(acc->data, acc->dtype, oo, v);
    } else if (cls == TT_CLASS_F64) {
      ((double *)acc->data)[oo] += ((const double *)src->data)[so];
    } else {
      ((float *)acc->data)[oo] += (float)tt_get_f64(src->data, src->dtype, so);
    }
  }
  if (reduce) tt_acc_end(out, acc);
  return NULL;
}
