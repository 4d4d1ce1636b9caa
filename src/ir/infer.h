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

/* ---- per op ----
 * The infer function each row of torchtpu/ops.def names, declared from
 * that list (ops may share one: the collectives, conv2d's backwards).
 * Fused instructions are made by the fusion passes on linearised graphs,
 * never recorded: tt_infer_fused returns TT_INTERNAL. */
#define TT_OP(id, name, min_operands, max_operands, flags, attrs, infer) \
  tt_status_t infer(tt_node_t *n, const void *attrs_struct);
#define TT_OP_INPUT(id, name, flags) /* graph inputs have none */
#include "torchtpu/ops.def"

#endif /* TORCHTPU_IR_INFER_H_ */
