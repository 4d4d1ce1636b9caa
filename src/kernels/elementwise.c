/* Elementwise kernels that move or make values without arithmetic: where,
 * convert, broadcast, fill, iota. Unary and binary arithmetic live in
 * unary.c and binary.c. */
#include "kernels/kernel_util.h"

/* Copies one element of `size` bytes. */
static TT_ALWAYS_INLINE void tt_copy_elem(char *dst, const char *src,
                                          size_t size) {
  switch (size) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
  }
}

/* Writes n copies of the `size`-byte element at value to dst. */
static void tt_fill_elems(char *dst, const void *value, size_t size, int64_t n) {
  switch (size) {
    case 1: memset(dst, *(const unsigned char *)value, (size_t)n); break;
    case 2: {
      uint16_t v;
      memcpy(&v, value, 2);
      for (int64_t i = 0; i < n; ++i) ((uint16_t *)dst)[i] = v;
      break;
    }
    case 4: {
      uint32_t v;
      memcpy(&v, value, 4);
      for (int64_t i = 0; i < n; ++i) ((uint32_t *)dst)[i] = v;
      break;
    }
    default: {
      uint64_t v;
      memcpy(&v, value, 8);
      for (int64_t i = 0; i < n; ++i) ((uint64_t *)dst)[i] = v;
      break;
    }
  }
}

/* ---- where ------------------------------------------------------------- */

typedef struct tt_where_ctx_s {
  const tt_view_t *cond, *a, *b;
  tt_view_t *out;
  tt_iter_t it;
} tt_where_ctx_t;

static void tt_where_range(void *arg, int64_t begin, int64_t end) {
  const tt_where_ctx_t *c = (const tt_where_ctx_t *)arg;
  const tt_iter_t *it = &c->it;
  size_t es = tt_dtype_size(c->out->dtype);
  int last = it->rank - 1;
  int64_t sc = it->strides[1][last], sa = it->strides[2][last];
  int64_t sb = it->strides[3][last];
  const char *pa = (const char *)c->a->data, *pb = (const char *)c->b->data;
  char *po = (char *)c->out->data;
  tt_iter_pos_t pos;
  tt_iter_seek(it, begin, &pos);
  for (int64_t i = begin; i < end;) {
    int64_t len = tt_min64(tt_min64(tt_iter_inner_left(it, &pos), end - i),
                           TT_BLOCK);
    if (es == 4 && c->cond->dtype == TT_BOOL) {
      /* Bool condition, 32-bit elements (f32, i32): typed loads and a
       * select the compiler vectorises; a condition broadcast along the
       * run (a row mask) picks one operand for the whole run. */
      const uint8_t *c1 = (const uint8_t *)c->cond->data + pos.off[1];
      const uint32_t *a4 = (const uint32_t *)pa + pos.off[2];
      const uint32_t *b4 = (const uint32_t *)pb + pos.off[3];
      uint32_t *o4 = (uint32_t *)po + i;
      if (sc == 0) {
        const uint32_t *src = c1[0] ? a4 : b4;
        int64_t ss = c1[0] ? sa : sb;
        if (ss == 1) {
          memcpy(o4, src, (size_t)len * 4);
        } else {
          for (int64_t j = 0; j < len; ++j) o4[j] = src[j * ss];
        }
      } else if (sc == 1 && sa == 1 && sb == 1) {
        for (int64_t j = 0; j < len; ++j) o4[j] = c1[j] ? a4[j] : b4[j];
      } else {
        for (int64_t j = 0; j < len; ++j) o4[j] = c1[j * sc] ? a4[j * sa] : b4[j * sb];
      }
      tt_iter_advance(it, &pos, len);
      i += len;
      continue;
    }
    int64_t cnd[TT_BLOCK];
    tt_load_i64(c->cond->data, c->cond->dtype, pos.off[1], sc, len, cnd);
    for (int64_t j = 0; j < len; ++j) {
      const char *src = cnd[j] ? pa + (size_t)(pos.off[2] + j * sa) * es
                               : pb + (size_t)(pos.off[3] + j * sb) * es;
      tt_copy_elem(po + (size_t)(i + j) * es, src, es);
    }
    tt_iter_advance(it, &pos, len);
    i += len;
  }
}

tt_status_t tt_kernel_where(const tt_view_t *cond, const tt_view_t *a,
                            const tt_view_t *b, tt_view_t *out) {
  static const char *name = "where";
  TT_RETURN_IF_ERROR(tt_check_view(name, "cond", cond));
  TT_RETURN_IF_ERROR(tt_check_view(name, "a", a));
  TT_RETURN_IF_ERROR(tt_check_view(name, "b", b));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  if (a->dtype != out->dtype || b->dtype != out->dtype) {
    return tt_status_make(TT_TYPE_ERROR,
                          "where: a (%s), b (%s) and out (%s) must have the "
                          "same dtype",
                          tt_dtype_name(a->dtype), tt_dtype_name(b->dtype),
                          tt_dtype_name(out->dtype));
  }
  tt_where_ctx_t ctx = {.cond = cond, .a = a, .b = b, .out = out};
  const tt_view_t *ins[3] = {cond, a, b};
  TT_RETURN_IF_ERROR(tt_iter_init(name, &out->shape, ins, 3, &ctx.it));
  tt_parallel_for(tt_view_numel(out), TT_GRAIN, tt_where_range, &ctx);
  return NULL;
}

/* ---- convert ----------------------------------------------------------- */

typedef struct tt_convert_ctx_s {
  const tt_view_t *x;
  tt_view_t *out;
} tt_convert_ctx_t;

static void tt_convert_range(void *arg, int64_t begin, int64_t end) {
  const tt_convert_ctx_t *c = (const tt_convert_ctx_t *)arg;
  tt_dtype_t xd = c->x->dtype, od = c->out->dtype;
  tt_class_t cls = tt_class_of(xd);
  for (int64_t i = begin; i < end; i += TT_BLOCK) {
    int64_t len = tt_min64(TT_BLOCK, end - i);
    if (cls == TT_CLASS_F32) {
      float buf[TT_BLOCK];
      tt_load_f32(c->x->data, xd, i, 1, len, buf);
      tt_store_f32(buf, len, c->out->data, od, i);
    } else if (cls == TT_CLASS_F64) {
      double buf[TT_BLOCK];
      tt_load_f64(c->x->data, xd, i, 1, len, buf);
      tt_store_f64(buf, len, c->out->data, od, i);
    } else {
      int64_t buf[TT_BLOCK];
      tt_load_i64(c->x->data, xd, i, 1, len, buf);
      tt_store_i64(buf, len, c->out->data, od, i);
    }
  }
}

static void tt_memcpy_range(void *arg, int64_t begin, int64_t end) {
  const tt_convert_ctx_t *c = (const tt_convert_ctx_t *)arg;
  size_t es = tt_dtype_size(c->x->dtype);
  memcpy((char *)c->out->data + (size_t)begin * es,
         (const char *)c->x->data + (size_t)begin * es,
         (size_t)(end - begin) * es);
}

tt_status_t tt_kernel_convert(const tt_view_t *x, tt_view_t *out) {
  static const char *name = "convert";
  TT_RETURN_IF_ERROR(tt_check_view(name, "x", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  int64_t n = tt_view_numel(x);
  if (n != tt_view_numel(out)) {
    char b1[160], b2[160];
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "convert: x %s and out %s have different numel",
                          tt_dims_str(&x->shape, b1, sizeof b1),
                          tt_dims_str(&out->shape, b2, sizeof b2));
  }
  tt_convert_ctx_t ctx = {x, out};
  if (x->dtype == out->dtype) {
    tt_parallel_for(n, TT_GRAIN * 4, tt_memcpy_range, &ctx);
  } else {
    tt_parallel_for(n, TT_GRAIN, tt_convert_range, &ctx);
  }
  return NULL;
}

/* ---- broadcast --------------------------------------------------------- */

typedef struct tt_bcast_ctx_s {
  const tt_view_t *x;
  tt_view_t *out;
  tt_iter_t it;
} tt_bcast_ctx_t;

static void tt_bcast_range(void *arg, int64_t begin, int64_t end) {
  const tt_bcast_ctx_t *c = (const tt_bcast_ctx_t *)arg;
  const tt_iter_t *it = &c->it;
  size_t es = tt_dtype_size(c->out->dtype);
  int64_t sx = it->strides[1][it->rank - 1];
  const char *px = (const char *)c->x->data;
  char *po = (char *)c->out->data;
  tt_iter_pos_t pos;
  tt_iter_seek(it, begin, &pos);
  for (int64_t i = begin; i < end;) {
    int64_t len = tt_min64(tt_iter_inner_left(it, &pos), end - i);
    const char *src = px + (size_t)pos.off[1] * es;
    char *dst = po + (size_t)i * es;
    if (sx == 1) {
      memcpy(dst, src, (size_t)len * es);
    } else if (sx == 0) {
      /* A value repeated along the run (zeros for a gradient, a scalar
       * made a tensor): a fill the compiler vectorises. */
      tt_fill_elems(dst, src, es, len);
    } else {
      for (int64_t j = 0; j < len; ++j) {
        tt_copy_elem(dst + (size_t)j * es, src + (size_t)(j * sx) * es, es);
      }
    }
    tt_iter_advance(it, &pos, len);
    i += len;
  }
}

tt_status_t tt_kernel_broadcast(const tt_view_t *x, tt_view_t *out) {
  static const char *name = "broadcast";
  TT_RETURN_IF_ERROR(tt_check_view(name, "x", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  if (x->dtype != out->dtype) {
    return tt_status_make(TT_TYPE_ERROR,
                          "broadcast: x dtype %s differs from out dtype %s",
                          tt_dtype_name(x->dtype), tt_dtype_name(out->dtype));
  }
  tt_bcast_ctx_t ctx = {.x = x, .out = out};
  const tt_view_t *ins[1] = {x};
  TT_RETURN_IF_ERROR(tt_iter_init(name, &out->shape, ins, 1, &ctx.it));
  tt_parallel_for(tt_view_numel(out), TT_GRAIN, tt_bcast_range, &ctx);
  return NULL;
}

/* ---- fill / iota ------------------------------------------------------- */

typedef struct tt_fill_ctx_s {
  tt_view_t *out;
  unsigned char pattern[8];
  double start, step;
} tt_fill_ctx_t;

static void tt_fill_range(void *arg, int64_t begin, int64_t end) {
  const tt_fill_ctx_t *c = (const tt_fill_ctx_t *)arg;
  size_t es = tt_dtype_size(c->out->dtype);
  tt_fill_elems((char *)c->out->data + (size_t)begin * es, c->pattern, es, end - begin);
}

tt_status_t tt_kernel_fill(double value, tt_view_t *out) {
  TT_RETURN_IF_ERROR(tt_check_view("fill", "out", out));
  tt_fill_ctx_t ctx = {.out = out};
  tt_set_f64(ctx.pattern, out->dtype, 0, value);
  tt_parallel_for(tt_view_numel(out), TT_GRAIN * 4, tt_fill_range, &ctx);
  return NULL;
}

static void tt_iota_range(void *arg, int64_t begin, int64_t end) {
  const tt_fill_ctx_t *c = (const tt_fill_ctx_t *)arg;
  for (int64_t i = begin; i < end; i += TT_BLOCK) {
    int64_t len = tt_min64(TT_BLOCK, end - i);
    double buf[TT_BLOCK];
    for (int64_t j = 0; j < len; ++j) buf[j] = c->start + (double)(i + j) * c->step;
    tt_store_f64(buf, len, c->out->data, c->out->dtype, i);
  }
}

tt_status_t tt_kernel_iota(double start, double step, tt_view_t *out) {
  TT_RETURN_IF_ERROR(tt_check_view("iota", "out", out));
  if (out->shape.rank != 1) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "iota: out must be 1-D, got rank %d",
                          (int)out->shape.rank);
  }
  tt_fill_ctx_t ctx = {.out = out, .start = start, .step = step};
  tt_parallel_for(out->shape.dims[0], TT_GRAIN, tt_iota_range, &ctx);
  return NULL;
}
