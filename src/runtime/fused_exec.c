/* Tier-0 execution of fused elementwise programs: an interpreter over
 * tiles of TT_FUSED_TILE elements. Each tile loads the inputs it needs
 * (broadcast inputs through the kernels' broadcasting iterator), runs the
 * steps with the same kernels unfused execution uses (so results are
 * identical), keeping intermediates in f32 tiles that stay in cache, and
 * rounds each step to its dtype. Tiles are spread over the kernel threads. */
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel_util.h"
#include "runtime/runtime_internal.h"

#define TT_FUSED_TILE 1024

typedef struct tt_fused_ctx_s {
  const tt_fused_t *f;
  const tt_instr_t *instr;
  int32_t num_inputs;
  const tt_view_t *inputs; /* external inputs */
  tt_iter_t *iters;        /* per input: (out, input) broadcasting iterator */
  uint8_t *contiguous;     /* per input: same numel as out */
  tt_view_t *out;
  tt_status_t error;       /* first failure (guarded by atomics below) */
  int32_t failed;
} tt_fused_ctx_t;

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

static tt_status_t tt_run_tile(const tt_fused_ctx_t *c, int64_t begin, int64_t n, float *regs,
                               float *in_tiles, uint8_t *loaded, uint8_t *bytes) {
  const tt_fused_t *f = c->f;
  memset(loaded, 0, (size_t)c->num_inputs);
  for (int32_t s = 0; s < f->num_ops; ++s) {
    const tt_fused_op_t *op = &f->ops[s];
    const float *args[3];
    for (int32_t a = 0; a < op->num_args; ++a) {
      int32_t r = op->args[a];
      if (r >= 0) {
        args[a] = regs + (size_t)r * TT_FUSED_TILE;
      } else {
        int32_t k = -r - 1;
        float *t = in_tiles + (size_t)k * TT_FUSED_TILE;
        if (!loaded[k]) {
          tt_load_input(c, k, begin, n, t);
          loaded[k] = 1;
        }
        args[a] = t;
      }
    }
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
    if (__atomic_exchange_n(&c->failed, 1, __ATOMIC_ACQ_REL) == 0)
      c->error = tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fused tile)");
  } else {
    float *in_tiles = regs + (size_t)TT_FUSED_TILE * (size_t)c->f->num_ops;
    for (int64_t t = begin; t < end && !__atomic_load_n(&c->failed, __ATOMIC_ACQUIRE);
         t += TT_FUSED_TILE) {
      int64_t n = end - t < TT_FUSED_TILE ? end - t : TT_FUSED_TILE;
      tt_status_t st = tt_run_tile(c, t, n, regs, in_tiles, loaded, bytes);
      if (st) {
        if (__atomic_exchange_n(&c->failed, 1, __ATOMIC_ACQ_REL) == 0)
          c->error = st;
        else
          tt_status_free(st);
      }
    }
  }
  free(regs);
  free(loaded);
  free(bytes);
}

tt_status_t tt_execute_fused(const tt_instr_t *instr, const tt_view_t *inputs,
                             int32_t num_inputs, tt_view_t *out) {
  tt_fused_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.f = instr->fused;
  c.instr = instr;
  c.num_inputs = num_inputs;
  c.inputs = inputs;
  c.out = out;
  c.iters = calloc((size_t)num_inputs + 1, sizeof(tt_iter_t));
  c.contiguous = calloc((size_t)num_inputs + 1, 1);
  if (!c.iters || !c.contiguous) {
    free(c.iters);
    free(c.contiguous);
    return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory (fused)");
  }
  int64_t numel = tt_shape_numel(&out->shape);
  tt_status_t st = NULL;
  for (int32_t k = 0; k < num_inputs && !st; ++k) {
    c.contiguous[k] = tt_shape_numel(&inputs[k].shape) == numel;
    if (!c.contiguous[k] && tt_shape_numel(&inputs[k].shape) != 1) {
      const tt_view_t *one = &inputs[k];
      st = tt_iter_init("fused", &out->shape, &one, 1, &c.iters[k]);
    }
  }
  if (!st && numel > 0) {
    /* Chunks are whole tiles so every thread's tiles line up. */
    tt_parallel_for(numel, 16 * TT_FUSED_TILE, tt_fused_range, &c);
    st = c.error;
  }
  free(c.iters);
  free(c.contiguous);
  return st;
}
