/* Data movement: transpose, slice, slice_scatter, concat, pad, flip.
 *
 * All of them reduce to one strided copy: dst[dst_off + sum i_d*dst_st[d]]
 * = src[src_off + sum i_d*src_st[d]] over a box of dims. The copy drops
 * size-1 dims, merges dims that are contiguous in both operands, then works
 * row by row (the innermost dim), in parallel over rows. Rows that are
 * contiguous on both sides are one memcpy; a transposing copy (source
 * stride != 1 in the innermost dim) goes in 16x16 tiles so both sides stay
 * in cache, ordered so the source is read sequentially. Values are moved
 * as raw bytes, so every dtype works.
 */
#include "kernels/kernel_util.h"

typedef struct tt_copy_s {
  int rank;
  int64_t dims[TT_MAX_RANK];
  int64_t sst[TT_MAX_RANK], dst_st[TT_MAX_RANK];
  const char *src;
  char *dst;
  size_t es;
} tt_copy_t;

#define TT_TILE 16
#define TT_COL_BLOCK 16

static TT_ALWAYS_INLINE void tt_move_elem(char *d, const char *s, size_t es) {
  switch (es) {
    case 1: *d = *s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    default: memcpy(d, s, 8); break;
  }
}

/* Copies nrows rows of L elements of `es` bytes (a compile-time constant
 * at each call site): source row q starts at s + q*rs elements and steps
 * ss elements; destination row q is d + q*rd, dense. Works in TT_TILE
 * column blocks so source and destination lines stay in L1. */
static TT_ALWAYS_INLINE void tt_copy_tile(char *d, const char *s, int64_t nrows,
                                          int64_t L, int64_t rs, int64_t rd,
                                          int64_t ss, const int64_t es) {
  for (int64_t j0 = 0; j0 < L; j0 += TT_TILE) {
    int64_t j1 = tt_min64(L, j0 + TT_TILE);
    for (int64_t q = 0; q < nrows; ++q) {
      const char *sq = s + q * rs * es;
      char *dq = d + q * rd * es;
      for (int64_t j = j0; j < j1; ++j) memcpy(dq + j * es, sq + j * ss * es, (size_t)es);
    }
  }
}

/* Offsets of row r (all dims but the last). */
static void tt_copy_row_offsets(const tt_copy_t *c, int64_t r, int64_t *so,
                                int64_t *dof) {
  int64_t s = 0, d = 0;
  for (int k = c->rank - 2; k >= 0; --k) {
    int64_t i = r % c->dims[k];
    r /= c->dims[k];
    s += i * c->sst[k];
    d += i * c->dst_st[k];
  }
  *so = s;
  *dof = d;
}

/* Transposing copy of rows [begin, end): the innermost source stride is
 * not 1. Tiles of TT_TILE rows x TT_COL_BLOCK columns; for one column
 * block the tiles sweep all rows of the range, so each of the block's
 * source rows is read front to back (the hardware prefetcher follows 16
 * sequential streams; sweeping the other way misses on every line). */
static void tt_copy_transposing(const tt_copy_t *c, int64_t begin, int64_t end) {
  int last = c->rank - 1;
  int64_t L = c->dims[last], ss = c->sst[last];
  int64_t rs = c->sst[last - 1], rd = c->dst_st[last - 1];
  const int64_t es = (int64_t)c->es;
  for (int64_t j0 = 0; j0 < L; j0 += TT_COL_BLOCK) {
    int64_t jl = tt_min64(TT_COL_BLOCK, L - j0);
    for (int64_t r = begin; r < end;) {
      int64_t in_dim = r % c->dims[last - 1];
      int64_t nrows = tt_min64(tt_min64(TT_TILE, end - r), c->dims[last - 1] - in_dim);
      int64_t so, dof;
      tt_copy_row_offsets(c, r, &so, &dof);
      const char *s = c->src + (so + j0 * ss) * es;
      char *d = c->dst + (dof + j0) * es;
      switch (es) {
        case 1: tt_copy_tile(d, s, nrows, jl, rs, rd, ss, 1); break;
        case 2: tt_copy_tile(d, s, nrows, jl, rs, rd, ss, 2); break;
        case 4: tt_copy_tile(d, s, nrows, jl, rs, rd, ss, 4); break;
        default: tt_copy_tile(d, s, nrows, jl, rs, rd, ss, 8); break;
      }
      r += nrows;
    }
  }
}

static void tt_copy_range(void *arg, int64_t begin, int64_t end) {
  const tt_copy_t *c = (const tt_copy_t *)arg;
  int last = c->rank - 1;
  int64_t L = c->dims[last], ss = c->sst[last], ds = c->dst_st[last];
  const int64_t es = (int64_t)c->es;
  if (ss != 1 && ds == 1 && c->rank >= 2 && L >= TT_TILE) {
    tt_copy_transposing(c, begin, end);
    return;
  }
  /* Row offsets: computed once, then stepped like an odometer (a
   * division per dim and row cost as much as copying a 128-byte row). */
  int64_t idx[TT_MAX_RANK] = {0}, so = 0, dof = 0;
  for (int64_t k = last - 1, r = begin; k >= 0; --k) {
    idx[k] = r % c->dims[k];
    r /= c->dims[k];
    so += idx[k] * c->sst[k];
    dof += idx[k] * c->dst_st[k];
  }
  const size_t row_bytes = (size_t)(L * es);
  for (int64_t r = begin; r < end; ++r) {
    const char *s = c->src + so * es;
    char *d = c->dst + dof * es;
    if (ss == 1 && ds == 1) {
      if (row_bytes <= 512 && row_bytes % 8 == 0) {
        /* Short rows (a head's 32 floats): an inline loop the compiler
         * vectorises, instead of a memcpy call per row. */
        uint64_t *restrict dw = (uint64_t *)(void *)d;
        const uint64_t *restrict sw = (const uint64_t *)(const void *)s;
        uint64_t w;
        for (size_t j = 0; j < row_bytes / 8; ++j) {
          memcpy(&w, sw + j, 8);
          memcpy(dw + j, &w, 8);
        }
      } else {
        memcpy(d, s, row_bytes);
      }
    } else {
      for (int64_t j = 0; j < L; ++j) {
        tt_move_elem(d + j * ds * es, s + j * ss * es, (size_t)es);
      }
    }
    for (int64_t k = last - 1; k >= 0; --k) {
      so += c->sst[k];
      dof += c->dst_st[k];
      if (++idx[k] < c->dims[k]) break;
      so -= c->sst[k] * c->dims[k];
      dof -= c->dst_st[k] * c->dims[k];
      idx[k] = 0;
    }
  }
}

/* Copies the box `dims` from src (offset/strides in elements) to dst. */
static void tt_copy_strided(size_t es, int rank, const int64_t *dims,
                            const void *src, int64_t src_off,
                            const int64_t *src_st, void *dst, int64_t dst_off,
                            const int64_t *dst_st) {
  tt_copy_t c = {.rank = 0, .es = es};
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) total *= dims[d];
  if (total == 0) return;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 1) continue;
    int r = c.rank;
    if (r > 0 && c.sst[r - 1] == src_st[d] * dims[d] &&
        c.dst_st[r - 1] == dst_st[d] * dims[d]) {
      c.dims[r - 1] *= dims[d];
      c.sst[r - 1] = src_st[d];
      c.dst_st[r - 1] = dst_st[d];
      continue;
    }
    c.dims[r] = dims[d];
    c.sst[r] = src_st[d];
    c.dst_st[r] = dst_st[d];
    c.rank = r + 1;
  }
  if (c.rank == 0) {
    c.rank = 1;
    c.dims[0] = 1;
    c.sst[0] = c.dst_st[0] = 1;
  }
  c.src = (const char *)src + src_off * (int64_t)es;
  c.dst = (char *)dst + dst_off * (int64_t)es;
  int64_t L = c.dims[c.rank - 1];
  int64_t rows = total / L;
  tt_parallel_for(rows, tt_max64(1, TT_GRAIN / L), tt_copy_range, &c);
}

static tt_status_t tt_same_dtype(const char *name, const tt_view_t *a,
                                 const tt_view_t *b) {
  if (a->dtype != b->dtype) {
    return tt_status_make(TT_TYPE_ERROR, "%s: dtypes differ (%s and %s)", name,
                          tt_dtype_name(a->dtype), tt_dtype_name(b->dtype));
  }
  return NULL;
}

static tt_status_t tt_same_rank(const char *name, const tt_view_t *a,
                                const tt_view_t *b) {
  if (a->shape.rank != b->shape.rank) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: ranks differ (%d and %d)",
                          name, (int)a->shape.rank, (int)b->shape.rank);
  }
  return NULL;
}

tt_status_t tt_kernel_transpose(const tt_view_t *x, const int32_t *perm,
                                tt_view_t *out) {
  static const char *name = "transpose";
  TT_RETURN_IF_ERROR(tt_check_view(name, "x", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  TT_RETURN_IF_ERROR(tt_same_dtype(name, x, out));
  TT_RETURN_IF_ERROR(tt_same_rank(name, x, out));
  int rank = x->shape.rank;
  if (rank > 0 && !perm) return tt_status_make(TT_INVALID_ARGUMENT, "%s: perm is NULL", name);
  int64_t xs[TT_MAX_RANK], os[TT_MAX_RANK], st[TT_MAX_RANK];
  unsigned seen = 0;
  tt_contiguous_strides(&x->shape, xs);
  tt_contiguous_strides(&out->shape, os);
  for (int d = 0; d < rank; ++d) {
    int p = perm[d];
    if (p < 0 || p >= rank || (seen & (1u << p))) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: perm[%d] = %d is not a permutation of 0..%d",
                            name, d, p, rank - 1);
    }
    seen |= 1u << p;
    if (out->shape.dims[d] != x->shape.dims[p]) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: out dim %d is %lld, expected x dim %d = %lld",
                            name, d, (long long)out->shape.dims[d], p,
                            (long long)x->shape.dims[p]);
    }
    st[d] = xs[p];
  }
  tt_copy_strided(tt_dtype_size(x->dtype), rank, out->shape.dims, x->data, 0,
                  st, out->data, 0, os);
  return NULL;
}

/* Checks a slice of `big` with `small`'s extent; returns offset/strides. */
static tt_status_t tt_slice_geometry(const char *name, const tt_view_t *big,
                                     const tt_view_t *small,
                                     const int64_t *start, const int64_t *step,
                                     int64_t *off, int64_t *st) {
  int rank = big->shape.rank;
  int64_t bs[TT_MAX_RANK];
  tt_contiguous_strides(&big->shape, bs);
  *off = 0;
  if (rank > 0 && (!start || !step)) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: start/step is NULL", name);
  }
  for (int d = 0; d < rank; ++d) {
    int64_t n = small->shape.dims[d], size = big->shape.dims[d];
    if (step[d] < 1) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: step[%d] = %lld must be >= 1", name, d,
                            (long long)step[d]);
    }
    if (n > 0 && (start[d] < 0 || start[d] + (n - 1) * step[d] >= size)) {
      return tt_status_make(TT_OUT_OF_RANGE,
                            "%s: dim %d: start %lld, step %lld, count %lld "
                            "exceed size %lld",
                            name, d, (long long)start[d], (long long)step[d],
                            (long long)n, (long long)size);
    }
    if (n > 0) *off += start[d] * bs[d];
    st[d] = step[d] * bs[d];
  }
  return NULL;
}

tt_status_t tt_kernel_slice(const tt_view_t *x, const int64_t *start,
                            const int64_t *step, tt_view_t *out) {
  static const char *name = "slice";
  TT_RETURN_IF_ERROR(tt_check_view(name, "x", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  TT_RETURN_IF_ERROR(tt_same_dtype(name, x, out));
  TT_RETURN_IF_ERROR(tt_same_rank(name, x, out));
  int64_t off, st[TT_MAX_RANK], os[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_slice_geometry(name, x, out, start, step, &off, st));
  tt_contiguous_strides(&out->shape, os);
  tt_copy_strided(tt_dtype_size(x->dtype), x->shape.rank, out->shape.dims,
                  x->data, off, st, out->data, 0, os);
  return NULL;
}

tt_status_t tt_kernel_slice_scatter(const tt_view_t *base, const tt_view_t *src,
                                    const int64_t *start, const int64_t *step,
                                    tt_view_t *out) {
  static const char *name = "slice_scatter";
  TT_RETURN_IF_ERROR(tt_check_view(name, "base", base));
  TT_RETURN_IF_ERROR(tt_check_view(name, "src", src));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  TT_RETURN_IF_ERROR(tt_same_dtype(name, base, out));
  TT_RETURN_IF_ERROR(tt_same_dtype(name, base, src));
  TT_RETURN_IF_ERROR(tt_same_rank(name, base, src));
  if (!tt_shape_equal(&base->shape, &out->shape)) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: out must have base's shape", name);
  }
  int64_t off, st[TT_MAX_RANK], ss[TT_MAX_RANK], bs[TT_MAX_RANK];
  TT_RETURN_IF_ERROR(tt_slice_geometry(name, base, src, start, step, &off, st));
  size_t es = tt_dtype_size(base->dtype);
  int rank = base->shape.rank;
  tt_contiguous_strides(&base->shape, bs);
  tt_contiguous_strides(&src->shape, ss);
  tt_copy_strided(es, rank, base->shape.dims, base->data, 0, bs, out->data, 0, bs);
  tt_copy_strided(es, rank, src->shape.dims, src->data, 0, ss, out->data, off, st);
  return NULL;
}

tt_status_t tt_kernel_concat(const tt_view_t *const *inputs, int n, int dim,
                             tt_view_t *out) {
  static const char *name = "concat";
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  int rank = out->shape.rank;
  if (n < 1 || !inputs) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: needs at least one input", name);
  }
  if (dim < 0 || dim >= rank) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: dim %d out of range for rank %d", name, dim, rank);
  }
  int64_t total = 0;
  for (int k = 0; k < n; ++k) {
    const tt_view_t *v = inputs[k];
    TT_RETURN_IF_ERROR(tt_check_view(name, "input", v));
    TT_RETURN_IF_ERROR(tt_same_dtype(name, v, out));
    int ok = v->shape.rank == rank;
    for (int d = 0; ok && d < rank; ++d) {
      if (d != dim && v->shape.dims[d] != out->shape.dims[d]) ok = 0;
    }
    if (!ok) {
      char b1[160], b2[160];
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: input %d shape %s does not match out %s "
                            "outside dim %d",
                            name, k, tt_dims_str(&v->shape, b1, sizeof b1),
                            tt_dims_str(&out->shape, b2, sizeof b2), dim);
    }
    total += v->shape.dims[dim];
  }
  if (total != out->shape.dims[dim]) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: inputs add up to %lld along dim %d, out has %lld",
                          name, (long long)total, dim,
                          (long long)out->shape.dims[dim]);
  }
  int64_t os[TT_MAX_RANK];
  tt_contiguous_strides(&out->shape, os);
  int64_t at = 0;
  for (int k = 0; k < n; ++k) {
    const tt_view_t *v = inputs[k];
    int64_t vs[TT_MAX_RANK];
    tt_contiguous_strides(&v->shape, vs);
    tt_copy_strided(tt_dtype_size(out->dtype), rank, v->shape.dims, v->data, 0,
                    vs, out->data, at * os[dim], os);
    at += v->shape.dims[dim];
  }
  return NULL;
}

tt_status_t tt_kernel_pad(const tt_view_t *x, const int64_t *lo,
                          const int64_t *hi, double value, tt_view_t *out) {
  static const char *name = "pad";
  TT_RETURN_IF_ERROR(tt_check_view(name, "x", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  TT_RETURN_IF_ERROR(tt_same_dtype(name, x, out));
  TT_RETURN_IF_ERROR(tt_same_rank(name, x, out));
  int rank = x->shape.rank;
  if (rank > 0 && (!lo || !hi)) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: lo/hi is NULL", name);
  }
  int64_t xs[TT_MAX_RANK], os[TT_MAX_RANK], box[TT_MAX_RANK];
  int64_t xoff = 0, ooff = 0;
  tt_contiguous_strides(&x->shape, xs);
  tt_contiguous_strides(&out->shape, os);
  for (int d = 0; d < rank; ++d) {
    int64_t want = x->shape.dims[d] + lo[d] + hi[d];
    if (want < 0 || want != out->shape.dims[d]) {
      return tt_status_make(TT_INVALID_ARGUMENT,
                            "%s: dim %d: %lld + lo %lld + hi %lld != out %lld",
                            name, d, (long long)x->shape.dims[d],
                            (long long)lo[d], (long long)hi[d],
                            (long long)out->shape.dims[d]);
    }
    /* x index i lands at out index i + lo. */
    int64_t x0 = tt_max64(0, -lo[d]);
    int64_t x1 = tt_min64(x->shape.dims[d], out->shape.dims[d] - lo[d]);
    box[d] = tt_max64(0, x1 - x0);
    xoff += x0 * xs[d];
    ooff += (x0 + lo[d]) * os[d];
  }
  TT_RETURN_IF_ERROR(tt_kernel_fill(value, out));
  tt_copy_strided(tt_dtype_size(x->dtype), rank, box, x->data, xoff, xs,
                  out->data, ooff, os);
  return NULL;
}

tt_status_t tt_kernel_flip(const tt_view_t *x, uint32_t dims_mask,
                           tt_view_t *out) {
  static const char *name = "flip";
  TT_RETURN_IF_ERROR(tt_check_view(name, "x", x));
  TT_RETURN_IF_ERROR(tt_check_view(name, "out", out));
  TT_RETURN_IF_ERROR(tt_same_dtype(name, x, out));
  if (!tt_shape_equal(&x->shape, &out->shape)) {
    return tt_status_make(TT_INVALID_ARGUMENT, "%s: out must have x's shape", name);
  }
  int rank = x->shape.rank;
  if (rank < 32 && (dims_mask >> rank) != 0) {
    return tt_status_make(TT_INVALID_ARGUMENT,
                          "%s: dims mask 0x%x names a dim >= rank %d", name,
                          dims_mask, rank);
  }
  int64_t xs[TT_MAX_RANK], st[TT_MAX_RANK], off = 0;
  tt_contiguous_strides(&x->shape, xs);
  for (int d = 0; d < rank; ++d) {
    if ((dims_mask & (1u << d)) && x->shape.dims[d] > 0) {
      off += (x->shape.dims[d] - 1) * xs[d];
      st[d] = -xs[d];
    } else {
      st[d] = xs[d];
    }
  }
  tt_copy_strided(tt_dtype_size(x->dtype), rank, x->shape.dims, x->data, off,
                  st, out->data, 0, xs);
  return NULL;
}
