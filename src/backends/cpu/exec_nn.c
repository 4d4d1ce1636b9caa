/* Tier-0 executors of the convolutions and poolings (NCHW). A
 * convolution with an epilogue runs through execute.c instead. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/exec.h"

#define TT_COPY2(dst, src) ((dst)[0] = (src)[0], (dst)[1] = (src)[1])

void tt_cpu_conv_params(const tt_instr_t *in, tt_conv2d_params_t *p) {
  if (in->op == TT_OP_CONV2D) {
    tt_conv2d_attrs_t a;
    TT_ATTRS(in, &a);
    TT_COPY2(p->stride, a.stride);
    TT_COPY2(p->pad, a.padding);
    TT_COPY2(p->dilation, a.dilation);
    p->groups = a.groups;
  } else { /* the backward forms: the same fields, then the result's dims */
    tt_conv2d_bwd_attrs_t a;
    TT_ATTRS(in, &a);
    TT_COPY2(p->stride, a.stride);
    TT_COPY2(p->pad, a.padding);
    TT_COPY2(p->dilation, a.dilation);
    p->groups = a.groups;
  }
}

static tt_status_t tt_cpu_exec_conv2d(const tt_cpu_exec_t *c, tt_view_t *out) {
  const tt_instr_t *in = c->instr;
  tt_conv2d_params_t p;
  tt_cpu_conv_params(in, &p);
  if (in->op == TT_OP_CONV2D) return tt_kernel_conv2d(&c->x[0], &c->x[1], &p, out);
  if (in->op == TT_OP_CONV2D_BWD_INPUT)
    return tt_kernel_conv2d_backward_input(&c->x[0], &c->x[1], &p, out);
  return tt_kernel_conv2d_backward_weight(&c->x[0], &c->x[1], &p, out);
}

/* max_pool2d and max_pool2d_indices. */
static tt_status_t tt_cpu_exec_max_pool2d(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_max_pool2d_attrs_t a;
  TT_ATTRS(c->instr, &a);
  tt_pool2d_params_t p;
  memset(&p, 0, sizeof(p));
  TT_COPY2(p.kernel, a.kernel);
  TT_COPY2(p.stride, a.stride);
  TT_COPY2(p.pad, a.padding);
  TT_COPY2(p.dilation, a.dilation);
  p.ceil_mode = (int)a.ceil_mode;
  const tt_view_t *x = &c->x[0];
  /* The values alone take the kernel's index-free path; the indices
   * come with values the kernel writes to a scratch buffer. */
  if (c->instr->op == TT_OP_MAX_POOL2D) return tt_kernel_max_pool2d(x, &p, out, NULL);
  tt_view_t other;
  other.shape = out->shape;
  size_t n = (size_t)tt_shape_numel(&out->shape);
  other.dtype = x->dtype;
  other.data = malloc(n * tt_dtype_size(x->dtype) + 8);
  if (!other.data) return tt_status_make(TT_RESOURCE_EXHAUSTED, "out of memory");
  tt_status_t st = tt_kernel_max_pool2d(x, &p, &other, out);
  free(other.data);
  return st;
}

static tt_status_t tt_cpu_exec_max_pool2d_bwd(const tt_cpu_exec_t *c, tt_view_t *out) {
  return tt_kernel_max_pool2d_backward(&c->x[0], &c->x[1], out);
}

/* Average pooling's window: the same fields in the forward's and the
 * backward's attributes. */
#define TT_AVG_POOL_PARAMS(p, a)                \
  do {                                          \
    memset(&(p), 0, sizeof(p));                 \
    TT_COPY2((p).kernel, (a).kernel);           \
    TT_COPY2((p).stride, (a).stride);           \
    TT_COPY2((p).pad, (a).padding);             \
    (p).dilation[0] = (p).dilation[1] = 1;      \
    (p).ceil_mode = (int)(a).ceil_mode;         \
    (p).count_include_pad = (int)(a).count_include_pad; \
    (p).divisor_override = (a).divisor;         \
  } while (0)

static tt_status_t tt_cpu_exec_avg_pool2d(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_avg_pool2d_attrs_t a;
  TT_ATTRS(c->instr, &a);
  tt_pool2d_params_t p;
  TT_AVG_POOL_PARAMS(p, a);
  return tt_kernel_avg_pool2d(&c->x[0], &p, out);
}

static tt_status_t tt_cpu_exec_avg_pool2d_bwd(const tt_cpu_exec_t *c, tt_view_t *out) {
  tt_avg_pool2d_bwd_attrs_t a;
  TT_ATTRS(c->instr, &a);
  tt_pool2d_params_t p;
  TT_AVG_POOL_PARAMS(p, a);
  return tt_kernel_avg_pool2d_backward(&c->x[0], &p, out);
}

static tt_status_t tt_cpu_exec_adaptive_avg_pool2d(const tt_cpu_exec_t *c, tt_view_t *out) {
  return tt_kernel_adaptive_avg_pool2d(&c->x[0], out);
}

static tt_status_t tt_cpu_exec_adaptive_avg_pool2d_bwd(const tt_cpu_exec_t *c, tt_view_t *out) {
  return tt_kernel_adaptive_avg_pool2d_backward(&c->x[0], out);
}

/* The ops this file executes (exec.h). */
const tt_cpu_exec_row_t tt_cpu_exec_rows_nn[] = {
    {TT_OP_CONV2D, tt_cpu_exec_conv2d},
    {TT_OP_CONV2D_BWD_INPUT, tt_cpu_exec_conv2d},
    {TT_OP_CONV2D_BWD_WEIGHT, tt_cpu_exec_conv2d},
    {TT_OP_MAX_POOL2D, tt_cpu_exec_max_pool2d},
    {TT_OP_MAX_POOL2D_INDICES, tt_cpu_exec_max_pool2d},
    {TT_OP_MAX_POOL2D_BWD, tt_cpu_exec_max_pool2d_bwd},
    {TT_OP_AVG_POOL2D, tt_cpu_exec_avg_pool2d},
    {TT_OP_AVG_POOL2D_BWD, tt_cpu_exec_avg_pool2d_bwd},
    {TT_OP_ADAPTIVE_AVG_POOL2D, tt_cpu_exec_adaptive_avg_pool2d},
    {TT_OP_ADAPTIVE_AVG_POOL2D_BWD, tt_cpu_exec_adaptive_avg_pool2d_bwd},
    TT_CPU_EXEC_ROWS_END,
};
