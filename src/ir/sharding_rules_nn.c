/* Sharding rules of convolution, pooling, softmax, layer norm and
 * attention (NCHW for images).
 * - conv2d: the batch keeps its sharding, output channels follow the
 *   weight's, input channels are contracted (partial sums; grouped
 *   convolutions read them whole), the kernel's window dims are read
 *   whole. A spatial dim keeps its sharding where the output has the
 *   input's size (stride 1, "same" padding: the partitioner exchanges
 *   halos), else it is read whole. Its backward ops alike: the input
 *   gradient contracts output channels, the weight gradient contracts the
 *   batch (data parallelism's gradient sum) and reads spatial dims whole.
 * - pooling: batch and channels keep their sharding, spatial dims as
 *   above.
 * - softmax and its backward: the dim is read whole, the rest keep theirs.
 * - layer_norm: the normalised dims [axis, rank) are read whole, the rows
 *   keep their sharding; the packed forms and the backward (flattened
 *   results) are replicated.
 * - attention: batch, heads and query positions keep their sharding (the
 *   value's feature dim too); keys and values are read whole along the
 *   sequence and the feature dim is read whole (softmax in between makes
 *   partial sums useless). The backward's result is flattened: replicated.
 *   The strided forms (made by a pass after propagation) are replicated. */
#include "ir/sharding_rules.h"

/* A dim of an NCHW operand: kept where the result dim has its size. */
static void tt_srule_nchw_row(const tt_shape_t *x, const tt_shape_t *y, int32_t *row,
                              int keep_channels, int keep_spatial) {
  tt_srule_same_size_row(x, y, row);
  if (!keep_channels && x->rank > 1) row[1] = TT_SDIM_WHOLE;
  if (!keep_spatial)
    for (int32_t d = 2; d < x->rank; ++d) row[d] = TT_SDIM_WHOLE;
}

static void tt_srule_conv2d(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_conv2d_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0), *y = &g->instrs[i].shape;
  m->partial_reduce = TT_RED_SUM;
  tt_srule_nchw_row(x, y, m->dims[0], 0, 1);
  m->dims[0][0] = 0;
  m->dims[0][1] = a.groups == 1 ? TT_SDIM_REDUCED : TT_SDIM_WHOLE;
  m->dims[1][0] = 1;
  m->dims[1][1] = a.groups == 1 ? TT_SDIM_REDUCED : TT_SDIM_WHOLE;
}

/* (grad_out [N, O, Ho, Wo], w [O, C/g, kh, kw]) -> [N, C, H, W]. */
static void tt_srule_conv2d_bwd_input(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_conv2d_bwd_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  const tt_shape_t *go = tt_srule_operand_shape(g, i, 0), *y = &g->instrs[i].shape;
  m->partial_reduce = TT_RED_SUM;
  tt_srule_nchw_row(go, y, m->dims[0], 0, 1);
  m->dims[0][0] = 0;
  m->dims[0][1] = a.groups == 1 ? TT_SDIM_REDUCED : TT_SDIM_WHOLE;
  m->dims[1][0] = a.groups == 1 ? TT_SDIM_REDUCED : TT_SDIM_WHOLE;
  m->dims[1][1] = a.groups == 1 ? 1 : TT_SDIM_WHOLE;
}

/* (grad_out [N, O, Ho, Wo], x [N, C, H, W]) -> [O, C/g, kh, kw]. */
static void tt_srule_conv2d_bwd_weight(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_conv2d_bwd_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  m->partial_reduce = TT_RED_SUM;
  m->dims[0][0] = TT_SDIM_REDUCED;
  m->dims[0][1] = 0;
  m->dims[1][0] = TT_SDIM_REDUCED;
  m->dims[1][1] = a.groups == 1 ? 1 : TT_SDIM_WHOLE;
}

/* Pooling and its backward ops: every operand NCHW. */
static void tt_srule_pool(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  for (int32_t k = 0; k < m->num_operands; ++k)
    tt_srule_nchw_row(tt_srule_operand_shape(g, i, k), &g->instrs[i].shape, m->dims[k], 1, 1);
}

static void tt_srule_softmax(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_softmax_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  const tt_shape_t *x = tt_srule_operand_shape(g, i, 0);
  int32_t shift = a.packed ? 1 : 0;
  for (int32_t d = 0; d < x->rank; ++d) m->dims[0][d] = d == a.dim ? TT_SDIM_WHOLE : d + shift;
}

static void tt_srule_softmax_bwd(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_softmax_bwd_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  for (int32_t k = 0; k < 2; ++k) {
    const tt_shape_t *x = tt_srule_operand_shape(g, i, k);
    for (int32_t d = 0; d < x->rank; ++d) m->dims[k][d] = d == a.dim ? TT_SDIM_WHOLE : d;
  }
}

static void tt_srule_layer_norm(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_layer_norm_attrs_t a;
  TT_ATTRS(&g->instrs[i], &a);
  if (a.form != 0) return;
  for (int32_t d = 0; d < a.axis; ++d) m->dims[0][d] = d;
}

static void tt_srule_attention(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  tt_attention_attrs_t a;
  if (TT_ATTRS(&g->instrs[i], &a) > 2) return; /* the strided form */
  const tt_shape_t *y = &g->instrs[i].shape;
  for (int32_t k = 0; k < m->num_operands; ++k) {
    const tt_shape_t *x = tt_srule_operand_shape(g, i, k);
    int32_t *row = m->dims[k];
    /* q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev], mask [., ., L, S] */
    for (int32_t d = 0; d < 2 && d < x->rank; ++d)
      row[d] = x->dims[d] == y->dims[d] ? d : TT_SDIM_WHOLE;
    if ((k == 0 || k == 3) && x->rank > 2 && x->dims[2] == y->dims[2]) row[2] = 2;
    if (k == 2 && !a.lse && x->rank > 3 && x->dims[3] == y->dims[3]) row[3] = 3;
  }
}

TT_SHARDING_RULE(CONV2D, "convolution", tt_srule_conv2d);
TT_SHARDING_RULE(CONV2D_BWD_INPUT, "convolution", tt_srule_conv2d_bwd_input);
TT_SHARDING_RULE(CONV2D_BWD_WEIGHT, "convolution", tt_srule_conv2d_bwd_weight);
TT_SHARDING_RULE(MAX_POOL2D, "pooling", tt_srule_pool);
TT_SHARDING_RULE(MAX_POOL2D_INDICES, "pooling", tt_srule_pool);
TT_SHARDING_RULE(MAX_POOL2D_BWD, "pooling", tt_srule_pool);
TT_SHARDING_RULE(AVG_POOL2D, "pooling", tt_srule_pool);
TT_SHARDING_RULE(AVG_POOL2D_BWD, "pooling", tt_srule_pool);
TT_SHARDING_RULE(ADAPTIVE_AVG_POOL2D, "pooling", tt_srule_pool);
TT_SHARDING_RULE(ADAPTIVE_AVG_POOL2D_BWD, "pooling", tt_srule_pool);
TT_SHARDING_RULE(SOFTMAX, "softmax", tt_srule_softmax);
TT_SHARDING_RULE(SOFTMAX_BWD, "softmax", tt_srule_softmax_bwd);
TT_SHARDING_RULE(LAYER_NORM, "norm", tt_srule_layer_norm);
TT_SHARDING_RULE(LAYER_NORM_BWD, "norm", NULL);
TT_SHARDING_RULE(ATTENTION, "attention", tt_srule_attention);
TT_SHARDING_RULE(ATTENTION_BWD, "attention", NULL);
