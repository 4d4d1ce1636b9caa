/* Tier-0 execution of fused elementwise programs: an interpreter over
 * tiles of TT_FUSED_TILE elements. Each tile loads the inputs it needs
 * (broadcast inputs through the kernels' broadcasting iterator), runs the
 * steps with the same kernels unfused execution uses (so results are
 * identical), keeping intermediates in f32 tiles that stay in cache, and
 * rounds each step to its dtype. Tiles are spread over the kernel threads.
 *
 * Fused reductions (TT_FUSED_REDUCE) run their prologue over tiles of the
 * domain and fold each tile into double accumulators in the order the
 * reduction kernel (src/kernels/reduce.c) uses for f32 rows: 16 lanes plus
 * a tail per row chunk of TT_FRED_CHUNK, chunks combined in order (reduced
 * dims innermost); per-column sums over row chunks of TT_FRED_ROWS when
 * the column blocks give little parallel work (reduced dims outer). So an
 * f32 reduction gives the unfused result bit for bit; half-precision
 * values are summed in that order too. The epilogue then runs over tiles
 * of the result. */
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel_util.h"
#include "backends/cpu/cpu_internal.h"

#define TT_FUSED_TILE 1024

typedef struct tt_fused_ctx_s {
  const tt_fused_t *f;
  const tt_instr_t *instr;
  int32_t num_inputs;
  const tt_view_t *inputs; /* external inputs */
  tt_iter_t *iters;        /* per input: (shape, input) broadcasting iterator */
  uint8_t *contiguous;     /* per input: same numel as the shape */
  tt_view_t *out;
  tt_status_t error;       /* first failure (guarded by atomics below) */
  int32_t failed;
} tt_fused_ctx_t;

static void tt_fused_fail(tt_fused_ctx_t *c, tt_status_t st) {
  if (__atomic_exchange_n(&c->failed, 1, __ATOMIC_ACQ_REL) == 0)
    c->error = st;
  else
    tt_status_free(st);
}

/* Sets up c to evaluate f over `shape`; only inputs with used[k] (all when
 * used is NULL) get an iterator. On failure c->iters is freed. */
static tt_status_t tt_fused_ctx_init(tt_fused_ctx_t *c, const tt_instr_t *instr,
                                     const tt_view_t *inputs, int32_t num_inputs,
                                     const tt_shape_t *shape, const uint8_t *used) {
  memset(c, 0, sizeof(*c));
  c->f = instr->fused;
  c->instr = instr;
  c->num_inputs = num_inputs;
  c->inputs = inputs;
  c->iters = calloc((size_t)num_inputs + 1, sizeof(tt_iter_t));
  c->contiguous = calloc((size_t)num_inputs + 1, 1);
  if (!c->iters || !c->contiguous) {
    free(c->iters);
    free(c->contiguous);
    c->iters = NULL;
    c->contiguous = NULL;
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fused)");
  }
  int64_t numel = tt_shape_numel(shape);
  tt_status_t st = NULL;
  for (int32_t k = 0; k < num_inputs && !st; ++k) {
    if (used && !used[k]) continue;
    c->contiguous[k] = tt_shape_numel(&inputs[k].shape) == numel;
    if (!c->contiguous[k] && tt_shape_numel(&inputs[k].shape) != 1) {
      const tt_view_t *one = &inputs[k];
      st = tt_iter_init("fused", shape, &one, 1, &c->iters[k]);
    }
  }
  if (st) {
    free(c->iters);
    free(c->contiguous);
    c->iters = NULL;
    c->contiguous = NULL;
  }
  return st;
}

static void tt_fused_ctx_free(tt_fused_ctx_t *c) {
  free(c->iters);
  free(c->contiguous);
}

static void tt_round_tile(float *v, int64_t n, tt_dtype_t dt) {
  if (dt == TT_BF16) {
    for (int64_t j = 0; j < n; ++j) v[j] = tt_bf16_to_f32(tt_f32_to_bf16(v[j]));
  } else if (dt == TT_F16) {
    for (int64_t j = 0; j < n; ++j) v[j] = tt_f16_to_f32(tt_f32_to_f16(v[j]));
  } else if (dt == TT_BOOL) {
    for (int64_t j = 0; j < n; ++j) v[j] = v[j] != 0.0f ? 1.0f : 0.0f;
  }
}

static void tt_load_input(const tt_fused_ctx_t *c, int32_t k, int64_t begin, int64_t n,
                          float *dst) {
  const tt_view_t *in = &c->inputs[k];
  if (c->contiguous[k]) {
    tt_load_f32(in->data, in->dtype, begin, 1, n, dst);
    return;
  }
  if (tt_view_numel(in) == 1) {
    tt_load_f32(in->data, in->dtype, 0, 0, n, dst);
    return;
  }
  const tt_iter_t *it = &c->iters[k];
  tt_iter_pos_t pos;
  tt_iter_seek(it, begin, &pos);
  int64_t done = 0;
  while (done < n) {
    int64_t run = tt_iter_inner_left(it, &pos);
    if (run > n - done) run = n - done;
    tt_load_f32(in->data, in->dtype, pos.off[1], it->strides[1][it->rank - 1], run, dst + done);
    done += run;
    if (done < n) tt_iter_advance(it, &pos, run);
  }
}

/* The tile of argument r (a step's register or input -(r+1), loaded on
 * first use) for elements [begin, begin + n). */
static const float *tt_arg_tile(const tt_fused_ctx_t *c, int32_t r, int64_t begin, int64_t n,
                                float *regs, float *in_tiles, uint8_t *loaded) {
  if (r >= 0) return regs + (size_t)r * TT_FUSED_TILE;
  int32_t k = -r - 1;
  float *t = in_tiles + (size_t)k * TT_FUSED_TILE;
  if (!loaded[k]) {
    tt_load_input(c, k, begin, n, t);
    loaded[k] = 1;
  }
  return t;
}

/* Runs steps [s0, s1) for elements [begin, begin + n) of c's shape. */
static tt_status_t tt_eval_steps(const tt_fused_ctx_t *c, int32_t s0, int32_t s1, int64_t begin,
                                 int64_t n, float *regs, float *in_tiles, uint8_t *loaded,
                                 uint8_t *bytes) {
  const tt_fused_t *f = c->f;
  memset(loaded, 0, (size_t)c->num_inputs);
  for (int32_t s = s0; s < s1; ++s) {
    const tt_fused_op_t *op = &f->ops[s];
    const float *args[3];
    for (int32_t a = 0; a < op->num_args; ++a)
      args[a] = tt_arg_tile(c, op->args[a], begin, n, regs, in_tiles, loaded);
    float *dst = regs + (size_t)s * TT_FUSED_TILE;
    tt_view_t va, vb, vc, vo;
    va.dtype = vb.dtype = vc.dtype = vo.dtype = TT_F32;
    va.shape.rank = vb.shape.rank = vc.shape.rank = vo.shape.rank = 1;
    va.shape.dims[0] = vb.shape.dims[0] = vc.shape.dims[0] = vo.shape.dims[0] = n;
    vo.data = dst;
    tt_status_t st = NULL;
    switch (op->op) {
      case TT_OP_UNARY:
        va.data = (void *)args[0];
        if (op->code == TT_UN_LOGICAL_NOT || op->code == TT_UN_ISNAN) {
          vo.dtype = TT_BOOL;
          vo.data = bytes;
          st = tt_kernel_unary((tt_unary_op_t)op->code, &va, op->alpha, op->beta, &vo);
          if (!st) tt_load_f32(bytes, TT_BOOL, 0, 1, n, dst);
        } else {
          st = tt_kernel_unary((tt_unary_op_t)op->code, &va, op->alpha, op->beta, &vo);
        }
        break;
      case TT_OP_BINARY:
        va.data = (void *)args[0];
        vb.data = (void *)args[1];
        if (op->dtype == TT_BOOL) {
          vo.dtype = TT_BOOL;
          vo.data = bytes;
          st = tt_kernel_binary((tt_binary_op_t)op->code, &va, &vb, &vo);
          if (!st) tt_load_f32(bytes, TT_BOOL, 0, 1, n, dst);
        } else {
          st = tt_kernel_binary((tt_binary_op_t)op->code, &va, &vb, &vo);
        }
        break;
      case TT_OP_WHERE:
        for (int64_t j = 0; j < n; ++j) {
          float cond = args[0][j];
          dst[j] = cond != 0.0f ? args[1][j] : args[2][j];
        }
        break;
      case TT_OP_CONVERT:
        memcpy(dst, args[0], sizeof(float) * (size_t)n);
        break;
      default:
        st = tt_status_make(TT_INTERNAL, "fused step %d has op %s", s, tt_op_name(op->op));
    }
    if (st) return st;
    tt_round_tile(dst, n, op->dtype);
  }
  return NULL;
}

static tt_status_t tt_run_tile(const tt_fused_ctx_t *c, int64_t begin, int64_t n, float *regs,
                               float *in_tiles, uint8_t *loaded, uint8_t *bytes) {
  const tt_fused_t *f = c->f;
  TT_RETURN_IF_ERROR(tt_eval_steps(c, 0, f->num_ops, begin, n, regs, in_tiles, loaded, bytes));
  const float *result = regs + (size_t)(f->num_ops - 1) * TT_FUSED_TILE;
  tt_store_f32(result, n, c->out->data, c->out->dtype, begin);
  return NULL;
}

static void tt_fused_range(void *ctx, int64_t begin, int64_t end) {
  tt_fused_ctx_t *c = ctx;
  size_t regs_bytes = sizeof(float) * TT_FUSED_TILE * (size_t)c->f->num_ops;
  size_t in_bytes = sizeof(float) * TT_FUSED_TILE * (size_t)(c->num_inputs + 1);
  float *regs = malloc(regs_bytes + in_bytes);
  uint8_t *loaded = malloc((size_t)c->num_inputs + 1);
  uint8_t *bytes = malloc(TT_FUSED_TILE);
  if (!regs || !loaded || !bytes) {
    tt_fused_fail(c, tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fused tile)"));
  } else {
    float *in_tiles = regs + (size_t)TT_FUSED_TILE * (size_t)c->f->num_ops;
    for (int64_t t = begin; t < end && !__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE);
         t += TT_FUSED_TILE) {
      int64_t n = end - t < TT_FUSED_TILE ? end - t : TT_FUSED_TILE;
      tt_status_t st = tt_run_tile(c, t, n, regs, in_tiles, loaded, bytes);
      if (st) tt_fused_fail(c, st);
    }
  }
  free(regs);
  free(loaded);
  free(bytes);
}

tt_status_t tt_fused_prepare(const tt_instr_t *instr, const tt_view_t *inputs,
                             int32_t num_inputs, tt_view_t *out, tt_fused_prep_t **prep) {
  *prep = NULL;
  if (tt_fused_is_reduce(instr))
    return tt_status_make(TT_INTERNAL, "fused: a reduction cannot run in pieces");
  tt_fused_ctx_t *c = malloc(sizeof(*c));
  if (!c) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fused)");
  tt_status_t st = tt_fused_ctx_init(c, instr, inputs, num_inputs, &out->shape, NULL);
  if (st) {
    free(c);
    return st;
  }
  c->out = out;
  *prep = c;
  return NULL;
}

void tt_fused_prepared_range(void *prep, int64_t begin, int64_t end) {
  tt_fused_range(prep, begin, end);
}

tt_status_t tt_fused_finish(tt_fused_prep_t *c) {
  if (!c) return NULL;
  tt_status_t st = c->error;
  tt_fused_ctx_free(c);
  free(c);
  return st;
}

static tt_status_t tt_execute_fused_reduce(const tt_instr_t *instr, const tt_view_t *inputs,
                                           int32_t num_inputs, tt_view_t *out);

tt_status_t tt_execute_fused(const tt_instr_t *instr, const tt_view_t *inputs,
                             int32_t num_inputs, tt_view_t *out) {
  if (tt_fused_is_reduce(instr)) return tt_execute_fused_reduce(instr, inputs, num_inputs, out);
  tt_fused_ctx_t c;
  tt_status_t st = tt_fused_ctx_init(&c, instr, inputs, num_inputs, &out->shape, NULL);
  if (st) return st;
  c.out = out;
  int64_t numel = tt_shape_numel(&out->shape);
  if (numel > 0) {
    /* Chunks are whole tiles so every thread's tiles line up. */
    tt_parallel_for(numel, 16 * TT_FUSED_TILE, tt_fused_range, &c);
    st = c.error;
  }
  tt_fused_ctx_free(&c);
  return st;
}

/* ---- fused reductions ------------------------------------------------ */

#define TT_FRED_CHUNK 65536 /* row chunk, reduced dims innermost (as reduce.c) */
#define TT_FRED_COLS 512    /* column block, reduced dims outer (as reduce.c) */
#define TT_FRED_ROWS 512    /* row chunk, reduced dims outer (as reduce.c) */
#define TT_FRED_GRAIN 16384 /* domain elements per parallel task */

typedef struct tt_fred_ctx_s {
  tt_fused_ctx_t pro;   /* the program over the domain */
  int32_t red;          /* index of the REDUCE step */
  int64_t op;           /* tt_reduce_op_t */
  int64_t A, R, B;      /* domain as [A, R, B] */
  int64_t nchunks;      /* row chunks (B == 1) or row blocks (B > 1) */
  double *partial;      /* per unit (B == 1) or per unit x TT_FRED_COLS (B > 1) */
  double *result;       /* per output element, before MEAN's division */
} tt_fred_ctx_t;

/* Scratch for evaluating a program over one tile. */
typedef struct tt_tile_scratch_s {
  float *regs, *in_tiles;
  uint8_t *loaded, *bytes;
} tt_tile_scratch_t;

static int tt_tile_scratch_alloc(tt_tile_scratch_t *s, const tt_fused_ctx_t *c) {
  size_t regs = (size_t)TT_FUSED_TILE * (size_t)c->f->num_ops;
  size_t ins = (size_t)TT_FUSED_TILE * (size_t)(c->num_inputs + 1);
  s->regs = malloc(sizeof(float) * (regs + ins));
  s->in_tiles = s->regs ? s->regs + regs : NULL;
  s->loaded = malloc((size_t)c->num_inputs + 1);
  s->bytes = malloc(TT_FUSED_TILE);
  return s->regs && s->loaded && s->bytes;
}

static void tt_tile_scratch_free(tt_tile_scratch_t *s) {
  free(s->regs);
  free(s->loaded);
  free(s->bytes);
}

/* The reduced value for domain elements [begin, begin + n): the prologue's
 * last step, or an input when there is no prologue. */
static tt_status_t tt_fred_values(tt_fred_ctx_t *c, int64_t begin, int64_t n,
                                  tt_tile_scratch_t *s, const float **out) {
  TT_RETURN_IF_ERROR(
      tt_eval_steps(&c->pro, 0, c->red, begin, n, s->regs, s->in_tiles, s->loaded, s->bytes));
  *out = tt_arg_tile(&c->pro, c->pro.f->ops[c->red].args[0], begin, n, s->regs, s->in_tiles,
                     s->loaded);
  return NULL;
}

/* One row chunk's running state, in reduce.c's order for f32 rows: 16
 * lanes over the whole blocks of 16, then the tail in order. */
typedef struct tt_row_acc_s {
  double lane[16];
  float tail[16];
  int ntail;
  double m;
  int nan;
} tt_row_acc_t;

static void tt_row_acc_init(tt_row_acc_t *a, int64_t op) {
  memset(a, 0, sizeof(*a));
  a->m = op == TT_RED_MAX ? -INFINITY : INFINITY;
}

/* Folds v[0..n) at positions q.. of a chunk of len elements. */
static void tt_row_acc_feed(tt_row_acc_t *a, int64_t op, const float *v, int64_t n, int64_t q,
                            int64_t len) {
  if (op == TT_RED_MAX || op == TT_RED_MIN) {
    int want_max = op == TT_RED_MAX;
    for (int64_t j = 0; j < n; ++j) {
      float x = v[j];
      if (x != x) a->nan = 1;
      else if (want_max ? x > a->m : x < a->m) a->m = x;
    }
    return;
  }
  int64_t full = len - len % 16, j = 0;
  for (; j < n && ((q + j) & 15) && q + j < full; ++j) a->lane[(q + j) & 15] += v[j];
  for (; j + 16 <= n && q + j + 16 <= full; j += 16)
    for (int l = 0; l < 16; ++l) a->lane[l] += v[j + l];
  for (; j < n; ++j) {
    if (q + j < full) a->lane[(q + j) & 15] += v[j];
    else a->tail[a->ntail++] = v[j];
  }
}

static double tt_row_acc_done(const tt_row_acc_t *a, int64_t op) {
  if (op == TT_RED_MAX || op == TT_RED_MIN) return a->nan ? NAN : a->m;
  double s = 0;
  for (int l = 0; l < 16; ++l) s += a->lane[l];
  for (int t = 0; t < a->ntail; ++t) s += a->tail[t];
  return s;
}

/* Combines a later partial b into a (in order, as reduce.c merges). */
static double tt_fred_merge(int64_t op, double a, double b) {
  if (op == TT_RED_MAX) return (b > a || b != b) ? b : a;
  if (op == TT_RED_MIN) return (b < a || b != b) ? b : a;
  return a + b;
}

/* B == 1: units are (row, chunk), consecutive in the domain's flat order. */
static void tt_fred_rows_range(void *arg, int64_t ubegin, int64_t uend) {
  tt_fred_ctx_t *c = arg;
  tt_tile_scratch_t s;
  if (!tt_tile_scratch_alloc(&s, &c->pro)) {
    tt_tile_scratch_free(&s);
    tt_fused_fail(&c->pro, tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fused tile)"));
    return;
  }
  int64_t u = ubegin, q = 0;
  int64_t ulen = tt_min64(TT_FRED_CHUNK, c->R - (u % c->nchunks) * TT_FRED_CHUNK);
  int64_t pos = (u / c->nchunks) * c->R + (u % c->nchunks) * TT_FRED_CHUNK;
  int64_t last = uend - 1;
  int64_t end = (last / c->nchunks) * c->R + (last % c->nchunks) * TT_FRED_CHUNK +
                tt_min64(TT_FRED_CHUNK, c->R - (last % c->nchunks) * TT_FRED_CHUNK);
  tt_row_acc_t acc;
  tt_row_acc_init(&acc, c->op);
  while (pos < end && !__atomic_load_n(&c->pro.failed, __ATOMIC_ACQUIRE)) {
    int64_t n = tt_min64(TT_FUSED_TILE, end - pos);
    const float *v = NULL;
    tt_status_t st = tt_fred_values(c, pos, n, &s, &v);
    if (st) {
      tt_fused_fail(&c->pro, st);
      break;
    }
    for (int64_t done = 0; done < n;) {
      int64_t seg = tt_min64(n - done, ulen - q);
      tt_row_acc_feed(&acc, c->op, v + done, seg, q, ulen);
      done += seg;
      q += seg;
      if (q == ulen) {
        c->partial[u] = tt_row_acc_done(&acc, c->op);
        tt_row_acc_init(&acc, c->op);
        ++u;
        q = 0;
        if (u < uend) ulen = tt_min64(TT_FRED_CHUNK, c->R - (u % c->nchunks) * TT_FRED_CHUNK);
      }
    }
    pos += n;
  }
  tt_tile_scratch_free(&s);
}

/* B > 1: units are (a, column block, row block), as in reduce.c. */
static void tt_fred_cols_range(void *arg, int64_t ubegin, int64_t uend) {
  tt_fred_ctx_t *c = arg;
  tt_tile_scratch_t s;
  double *acc = malloc(sizeof(double) * TT_FRED_COLS);
  if (!acc || !tt_tile_scratch_alloc(&s, &c->pro)) {
    if (acc) tt_tile_scratch_free(&s);
    free(acc);
    tt_fused_fail(&c->pro, tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fused tile)"));
    return;
  }
  int64_t nblk = (c->B + TT_FRED_COLS - 1) / TT_FRED_COLS, nrc = c->nchunks;
  int is_max = c->op == TT_RED_MAX, is_min = c->op == TT_RED_MIN;
  for (int64_t t = ubegin; t < uend && !__atomic_load_n(&c->pro.failed, __ATOMIC_ACQUIRE); ++t) {
    int64_t a = t / (nblk * nrc), blk = (t / nrc) % nblk, rc = t % nrc;
    int64_t j0 = blk * TT_FRED_COLS, w = tt_min64(TT_FRED_COLS, c->B - j0);
    /* One chunk is every row (as in reduce.c, where it used to stop at
     * TT_FRED_ROWS and drop the rest). */
    int64_t r0 = rc * TT_FRED_ROWS, r1 = nrc > 1 ? tt_min64(c->R, r0 + TT_FRED_ROWS) : c->R;
    double init = is_max ? -INFINITY : is_min ? INFINITY : 0.0;
    for (int64_t j = 0; j < w; ++j) acc[j] = init;
    for (int64_t r = r0; r < r1; ++r) {
      const float *v = NULL;
      tt_status_t st = tt_fred_values(c, (a * c->R + r) * c->B + j0, w, &s, &v);
      if (st) {
        tt_fused_fail(&c->pro, st);
        break;
      }
      if (is_max) {
        for (int64_t j = 0; j < w; ++j) {
          double x = v[j], m = acc[j];
          acc[j] = (x > m || x != x) && m == m ? x : m; /* NaN sticks */
        }
      } else if (is_min) {
        for (int64_t j = 0; j < w; ++j) {
          double x = v[j], m = acc[j];
          acc[j] = (x < m || x != x) && m == m ? x : m;
        }
      } else {
        for (int64_t j = 0; j < w; ++j) acc[j] += v[j];
      }
    }
    if (nrc == 1) {
      for (int64_t j = 0; j < w; ++j) c->result[a * c->B + j0 + j] = acc[j];
    } else {
      memcpy(c->partial + t * TT_FRED_COLS, acc, sizeof(double) * (size_t)w);
    }
  }
  free(acc);
  tt_tile_scratch_free(&s);
}

typedef struct tt_fred_epi_s {
  tt_fused_ctx_t epi; /* the program over the result's shape */
  const tt_fred_ctx_t *red;
  double div;         /* R for MEAN (divided as reduce.c does), else 1 */
} tt_fred_epi_t;

/* Result elements [begin, end): the reduced value rounded to the REDUCE
 * step's dtype as the reduction kernel stores it, then the epilogue. */
static void tt_fred_epilogue_range(void *arg, int64_t begin, int64_t end) {
  tt_fred_epi_t *e = arg;
  const tt_fused_t *f = e->epi.f;
  int32_t red = e->red->red;
  tt_dtype_t rdt = f->ops[red].dtype;
  tt_view_t *out = e->epi.out;
  if (red == f->num_ops - 1) {
    for (int64_t o = begin; o < end; ++o)
      tt_set_f64(out->data, out->dtype, o, e->red->result[o] / e->div);
    return;
  }
  tt_tile_scratch_t s;
  if (!tt_tile_scratch_alloc(&s, &e->epi)) {
    tt_tile_scratch_free(&s);
    tt_fused_fail(&e->epi, tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fused tile)"));
    return;
  }
  uint16_t half[TT_FUSED_TILE];
  for (int64_t t = begin; t < end && !__atomic_load_n(&e->epi.failed, __ATOMIC_ACQUIRE);
       t += TT_FUSED_TILE) {
    int64_t n = tt_min64(TT_FUSED_TILE, end - t);
    float *v = s.regs + (size_t)red * TT_FUSED_TILE;
    if (rdt == TT_F32) {
      for (int64_t j = 0; j < n; ++j) v[j] = (float)(e->red->result[t + j] / e->div);
    } else {
      for (int64_t j = 0; j < n; ++j) tt_set_f64(half, rdt, j, e->red->result[t + j] / e->div);
      tt_load_f32(half, rdt, 0, 1, n, v);
    }
    tt_status_t st = tt_eval_steps(&e->epi, red + 1, f->num_ops, t, n, s.regs, s.in_tiles,
                                   s.loaded, s.bytes);
    if (st) {
      tt_fused_fail(&e->epi, st);
      break;
    }
    tt_store_f32(s.regs + (size_t)(f->num_ops - 1) * TT_FUSED_TILE, n, out->data, out->dtype, t);
  }
  tt_tile_scratch_free(&s);
}

static tt_status_t tt_execute_fused_reduce(const tt_instr_t *instr, const tt_view_t *inputs,
                                           int32_t num_inputs, tt_view_t *out) {
  const tt_fused_t *f = instr->fused;
  tt_shape_t dom = tt_fused_domain(instr);
  tt_fred_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.red = -1;
  for (int32_t s = 0; s < f->num_ops; ++s)
    if (f->ops[s].op == TT_OP_REDUCE) c.red = s;
  if (c.red < 0) return tt_status_make(TT_INTERNAL, "fused reduction without a REDUCE step");
  c.op = f->ops[c.red].code;
  /* [A, R, B]: the pass made only single-run forms. */
  int runs = tt_fused_reduce_arb(instr, &c.A, &c.R, &c.B);
  if (runs != 1 || c.A * c.B != tt_shape_numel(&out->shape))
    return tt_status_make(TT_INTERNAL, "fused reduction over a domain it cannot run");
  /* Inputs the prologue (and the REDUCE step) read, and the epilogue's. */
  uint8_t *used = calloc((size_t)num_inputs + 1, 2);
  if (!used) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fused)");
  uint8_t *used_epi = used + num_inputs + 1;
  for (int32_t s = 0; s < f->num_ops; ++s)
    for (int32_t a = 0; a < f->ops[s].num_args; ++a)
      if (f->ops[s].args[a] < 0) {
        int32_t k = -f->ops[s].args[a] - 1;
        if (s > c.red) used_epi[k] = 1;
        else used[k] = 1;
      }
  tt_fred_epi_t e;
  memset(&e, 0, sizeof(e));
  tt_status_t st = tt_fused_ctx_init(&c.pro, instr, inputs, num_inputs, &dom, used);
  if (st) {
    free(used);
    return st;
  }
  st = tt_fused_ctx_init(&e.epi, instr, inputs, num_inputs, &out->shape, used_epi);
  free(used);
  if (st) {
    tt_fused_ctx_free(&c.pro);
    return st;
  }
  e.epi.out = out;
  e.red = &c;
  e.div = c.op == TT_RED_MEAN ? (double)c.R : 1.0;
  int64_t on = c.A * c.B;
  c.result = malloc(sizeof(double) * (size_t)(on ? on : 1));
  if (c.B == 1) {
    c.nchunks = (c.R + TT_FRED_CHUNK - 1) / TT_FRED_CHUNK;
    c.partial = c.nchunks > 1 ? malloc(sizeof(double) * (size_t)(c.A * c.nchunks)) : c.result;
  } else {
    int64_t nblk = (c.B + TT_FRED_COLS - 1) / TT_FRED_COLS;
    c.nchunks = c.A * nblk >= 8 ? 1 : (c.R + TT_FRED_ROWS - 1) / TT_FRED_ROWS;
    c.partial = c.nchunks > 1 ? malloc(sizeof(double) * (size_t)(c.A * nblk * c.nchunks) *
                                       TT_FRED_COLS)
                              : c.result;
  }
  if (!c.result || !c.partial) {
    st = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fused reduction)");
    goto done;
  }
  if (c.B == 1) {
    int64_t ulen = tt_min64(c.R, TT_FRED_CHUNK);
    tt_parallel_for(c.A * c.nchunks, tt_max64(1, TT_FRED_GRAIN / ulen), tt_fred_rows_range, &c);
    if (!c.pro.error && c.nchunks > 1)
      for (int64_t a = 0; a < c.A; ++a) {
        double v = c.partial[a * c.nchunks];
        for (int64_t k = 1; k < c.nchunks; ++k)
          v = tt_fred_merge(c.op, v, c.partial[a * c.nchunks + k]);
        c.result[a] = v;
      }
  } else {
    int64_t nblk = (c.B + TT_FRED_COLS - 1) / TT_FRED_COLS;
    int64_t per = tt_min64(c.R, TT_FRED_ROWS) * tt_min64(c.B, TT_FRED_COLS);
    tt_parallel_for(c.A * nblk * c.nchunks, tt_max64(1, TT_FRED_GRAIN / per), tt_fred_cols_range,
                    &c);
    if (!c.pro.error && c.nchunks > 1)
      for (int64_t ab = 0; ab < c.A * nblk; ++ab) {
        int64_t a = ab / nblk, j0 = (ab % nblk) * TT_FRED_COLS;
        int64_t w = tt_min64(TT_FRED_COLS, c.B - j0);
        const double *p = c.partial + ab * c.nchunks * TT_FRED_COLS;
        for (int64_t j = 0; j < w; ++j) {
          double v = p[j];
          for (int64_t k = 1; k < c.nchunks; ++k) v = tt_fred_merge(c.op, v, p[k * TT_FRED_COLS + j]);
          c.result[a * c.B + j0 + j] = v;
        }
      }
  }
  st = c.pro.error;
  if (!st) {
    tt_parallel_for(on, 16 * TT_FUSED_TILE, tt_fred_epilogue_range, &e);
    st = e.epi.error;
  }
done:
  if (c.partial != c.result) free(c.partial);
  free(c.result);
  tt_fused_ctx_free(&c.pro);
  tt_fused_ctx_free(&e.epi);
  return st;
}
