/* Shape and dtype inference, one function per op (the op table's `infer`),
 * in family files: infer_elementwise.c, infer_generate.c (iota, rng),
 * infer_movement.c, infer_index.c, infer_reduce.c, infer_nn.c (convolution,
 * pooling, softmax), infer_attention.c, infer_norm.c, infer_linalg.c,
 * infer_spectral.c, infer_collective.c (collectives, manual SPMD regions),
 * and the shared checks in infer_common.c.
 *
 * Contract of every tt_infer_<op>(n, attrs): n's operands, device and raw
 * attributes are set; the operand count is within the entry's range and
 * `attrs` is the decoded attribute struct of n's op (op_attrs.h). Sets
 * n->shape and n->dtype, or returns a status naming the values (the
 * message PyTorch gives where there is one). Internal to src/ir. */
#ifndef TORCHTPU_IR_INFER_H_
#define TORCHTPU_IR_INFER_H_

#include "torchtpu/ir.h"
#include "torchtpu/op_attrs.h"

/* ---- shared checks (infer_common.c) ---- */
/* Formats s as "[d0, d1, ...]" into buf. */
void tt_shape_format(const tt_shape_t *s, char *buf, size_t n);
#define TT_SHAPE_STR(name, s) \
  char name[160];             \
  tt_shape_format((s), name, sizeof(name))
/* out = dims[0..n), refusing a rank over TT_MAX_RANK or a negative dim. */
tt_status_t tt_infer_set_dims(tt_shape_t *out, const int64_t *dims, int64_t n, const char *what);
/* numpy broadcasting of a and b into out; PyTorch's message on a mismatch. */
tt_status_t tt_infer_broadcast_shapes(const tt_shape_t *a, const tt_shape_t *b, tt_shape_t *out);
/* dim in [0, rank) (a 0-d tensor has dim 0); PyTorch's IndexError text. */
tt_status_t tt_infer_check_dim(int64_t dim, int32_t rank, const char *what);
/* dim in [0, rank) (a 0-d tensor has dim 0); the shorter "name: dim D out
 * of range for rank R" of the ops PyTorch has no message for. */
tt_status_t tt_infer_dim_in_rank(const char *name, int64_t dim, int32_t rank);

/* ---- per op ---- */
tt_status_t tt_infer_unary(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_binary(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_where(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_convert(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_special(tt_node_t *n, const void *attrs);

tt_status_t tt_infer_iota(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_rng(tt_node_t *n, const void *attrs);

tt_status_t tt_infer_broadcast(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_reshape(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_transpose(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_slice(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_slice_scatter(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_concat(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_pad(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_flip(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_bitcast(tt_node_t *n, const void *attrs);

tt_status_t tt_infer_index_select(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_index_add(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_gather(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_scatter(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_scatter_reduce(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_argsort(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_searchsorted(tt_node_t *n, const void *attrs);

tt_status_t tt_infer_reduce(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_scan(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_cumulative(tt_node_t *n, const void *attrs);

tt_status_t tt_infer_conv2d(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_conv2d_bwd(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_max_pool2d(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_max_pool2d_bwd(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_avg_pool2d(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_avg_pool2d_bwd(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_adaptive_avg_pool2d(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_adaptive_avg_pool2d_bwd(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_softmax(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_softmax_bwd(tt_node_t *n, const void *attrs);

tt_status_t tt_infer_attention(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_attention_bwd(tt_node_t *n, const void *attrs);

tt_status_t tt_infer_layer_norm(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_layer_norm_bwd(tt_node_t *n, const void *attrs);

tt_status_t tt_infer_dot(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_linalg(tt_node_t *n, const void *attrs);

tt_status_t tt_infer_fft(tt_node_t *n, const void *attrs);

tt_status_t tt_infer_collective(tt_node_t *n, const void *attrs);
tt_status_t tt_infer_spmd_manual(tt_node_t *n, const void *attrs);

/* Fused instructions are made by the fusion passes on linearised graphs,
 * never recorded: TT_INTERNAL. */
tt_status_t tt_infer_fused(tt_node_t *n, const void *attrs);

#endif /* TORCHTPU_IR_INFER_H_ */
