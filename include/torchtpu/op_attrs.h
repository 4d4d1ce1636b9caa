/* Typed attributes of the IR ops.
 *
 * A node (and a linearised instruction) stores its attributes as two flat
 * lists, int64 `iattrs` and double `fattrs`: they are copied, hashed and
 * compared as bytes, so the graph hash and the compile cache never need to
 * know an op's fields. This header names those fields: one struct per kind
 * of attributes, each followed by its schema, which lists the struct's
 * fields in storage order with the offset of each; an op names its struct
 * in its row of torchtpu/ops.def. tt_attrs_decode and tt_attrs_encode walk
 * the schema. They are the only code that knows attribute positions:
 * everything else reads and writes these structs.
 *
 * Storage rules (one place, applied by the codec):
 * - TT_ATTR_INT: one int64. TT_ATTR_INTS: a fixed number of int64s.
 * - TT_ATTR_LIST: a variable-length int64 list (tt_attr_list_t). When an op
 *   has several lists (slice's start/limit/step, pad's lo/hi) they share
 *   the ints left after the fixed fields equally, in order.
 * - TT_ATTR_FLOAT: one double; an op's float fields are fattrs[0..] in
 *   order. Every node has TT_MAX_FATTRS doubles (zero unless set), so a
 *   float field is always present.
 * - TT_ATTR_OPTIONAL on an int field: it and every int field after it may
 *   be absent (decoded as 0). Encoding writes fields up to the count the
 *   caller gives, so a node recorded without them keeps its old bytes.
 *
 * Ops without attributes (param, scalar, where) have the empty struct
 * tt_no_attrs_t.
 */
#ifndef TORCHTPU_OP_ATTRS_H_
#define TORCHTPU_OP_ATTRS_H_

#include <stddef.h>
#include <stdint.h>

#include "torchtpu/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most attributes a node holds (ints, doubles). */
#define TT_MAX_IATTRS 32
#define TT_MAX_FATTRS 4

/* The largest attribute struct (checked by the op table at compile time):
 * code decoding an op it does not know the kind of decodes into a buffer
 * of this size. */
#define TT_ATTRS_MAX_SIZE 1024

/* ---- schemas ------------------------------------------------------------ */
/* A schema is its struct's fields in storage order: the codec's input. */
typedef enum tt_attr_kind_e {
  TT_ATTR_INT = 0,
  TT_ATTR_INTS = 1,  /* count int64s */
  TT_ATTR_LIST = 2,  /* a tt_attr_list_t */
  TT_ATTR_FLOAT = 3,
} tt_attr_kind_t;

enum {
  TT_ATTR_OPTIONAL = 1u << 0, /* this and later int fields may be absent */
  TT_ATTR_RESERVED = 1u << 1, /* always 0; builders do not take it */
  TT_ATTR_PASS_ONLY = 1u << 2, /* written only by passes (a form never recorded) */
};

typedef struct tt_attr_field_s {
  const char *name;
  tt_attr_kind_t kind;
  int32_t count;   /* TT_ATTR_INTS: how many; otherwise 1 */
  uint32_t flags;  /* TT_ATTR_* */
  size_t offset;   /* in the op's attribute struct */
} tt_attr_field_t;

/* Each attribute struct below is followed by its schema,
 * tt_<x>_attrs_schema (x as in ops.def's attrs column): TT_ATTR_SCHEMA
 * declares it everywhere and defines it in the one file that defines
 * TT_OP_ATTRS_SCHEMAS before its includes, the op table
 * (src/ir/op_table.c), which takes each schema's length from its
 * definition. The field forms name the struct and the member (a member
 * the struct lacks does not compile); tests/c/test_op_table.c checks that
 * every field's kind fits inside the struct and no two overlap. */
#ifdef TT_OP_ATTRS_SCHEMAS
#define TT_ATTR_SCHEMA(x, ...) const tt_attr_field_t tt_##x##_attrs_schema[] = {__VA_ARGS__}
#else
#define TT_ATTR_SCHEMA(x, ...) extern const tt_attr_field_t tt_##x##_attrs_schema[]
#endif
/* Field forms: name, kind, count, flags, offset of member f in struct S. */
#define TT_FIELD_INT(S, f) {#f, TT_ATTR_INT, 1, 0, offsetof(S, f)}
#define TT_FIELD_INT_OPT(S, f) {#f, TT_ATTR_INT, 1, TT_ATTR_OPTIONAL, offsetof(S, f)}
#define TT_FIELD_INT_RESERVED(S, f) {#f, TT_ATTR_INT, 1, TT_ATTR_RESERVED, offsetof(S, f)}
#define TT_FIELD_INT_PASS(S, f) {#f, TT_ATTR_INT, 1, TT_ATTR_PASS_ONLY, offsetof(S, f)}
#define TT_FIELD_INT_OPT_PASS(S, f) \
  {#f, TT_ATTR_INT, 1, TT_ATTR_OPTIONAL | TT_ATTR_PASS_ONLY, offsetof(S, f)}
#define TT_FIELD_INTS(S, f, k) {#f, TT_ATTR_INTS, k, 0, offsetof(S, f)}
#define TT_FIELD_INTS_RESERVED(S, f, k) {#f, TT_ATTR_INTS, k, TT_ATTR_RESERVED, offsetof(S, f)}
#define TT_FIELD_INTS_PASS(S, f, k) {#f, TT_ATTR_INTS, k, TT_ATTR_PASS_ONLY, offsetof(S, f)}
#define TT_FIELD_LIST(S, f) {#f, TT_ATTR_LIST, 1, 0, offsetof(S, f)}
#define TT_FIELD_LIST_OPT(S, f) {#f, TT_ATTR_LIST, 1, TT_ATTR_OPTIONAL, offsetof(S, f)}
#define TT_FIELD_FLOAT(S, f) {#f, TT_ATTR_FLOAT, 1, 0, offsetof(S, f)}

/* A variable-length attribute list. */
typedef struct tt_attr_list_s {
  int32_t n;
  int64_t v[TT_MAX_IATTRS];
} tt_attr_list_t;

typedef struct tt_no_attrs_s {
  char unused; /* C has no empty structs */
} tt_no_attrs_t;

/* ---- elementwise ------------------------------------------------------ */
typedef struct tt_unary_attrs_s {
  int64_t op;          /* tt_unary_op_t */
  double alpha, beta;  /* the op's parameters (leaky_relu's slope, elu's, ...) */
} tt_unary_attrs_t;
TT_ATTR_SCHEMA(unary, TT_FIELD_INT(tt_unary_attrs_t, op), TT_FIELD_FLOAT(tt_unary_attrs_t, alpha),
               TT_FIELD_FLOAT(tt_unary_attrs_t, beta));

typedef struct tt_binary_attrs_s {
  int64_t op; /* tt_binary_op_t */
} tt_binary_attrs_t;
TT_ATTR_SCHEMA(binary, TT_FIELD_INT(tt_binary_attrs_t, op));

typedef struct tt_convert_attrs_s {
  int64_t dtype; /* tt_dtype_t of the result */
} tt_convert_attrs_t;
TT_ATTR_SCHEMA(convert, TT_FIELD_INT(tt_convert_attrs_t, dtype));

typedef struct tt_special_attrs_s {
  int64_t op; /* tt_special_op_t */
} tt_special_attrs_t;
TT_ATTR_SCHEMA(special, TT_FIELD_INT(tt_special_attrs_t, op));

/* ---- movement ---------------------------------------------------------- */
/* broadcast, reshape, max_pool2d_bwd, adaptive_avg_pool2d_bwd: the result's dims. */
typedef struct tt_dims_attrs_s {
  tt_attr_list_t dims;
} tt_dims_attrs_t;
TT_ATTR_SCHEMA(dims, TT_FIELD_LIST(tt_dims_attrs_t, dims));

typedef struct tt_transpose_attrs_s {
  tt_attr_list_t perm; /* result dim d is operand dim perm[d] */
} tt_transpose_attrs_t;
TT_ATTR_SCHEMA(transpose, TT_FIELD_LIST(tt_transpose_attrs_t, perm));

/* slice and slice_scatter: one entry per dim of the (base) operand. */
typedef struct tt_slice_attrs_s {
  tt_attr_list_t start, limit, step;
} tt_slice_attrs_t;
TT_ATTR_SCHEMA(slice, TT_FIELD_LIST(tt_slice_attrs_t, start),
               TT_FIELD_LIST(tt_slice_attrs_t, limit), TT_FIELD_LIST(tt_slice_attrs_t, step));

typedef struct tt_concat_attrs_s {
  int64_t dim;
} tt_concat_attrs_t;
TT_ATTR_SCHEMA(concat, TT_FIELD_INT(tt_concat_attrs_t, dim));

typedef struct tt_pad_attrs_s {
  tt_attr_list_t lo, hi; /* per dim; negative values crop */
  double value;
} tt_pad_attrs_t;
TT_ATTR_SCHEMA(pad, TT_FIELD_LIST(tt_pad_attrs_t, lo), TT_FIELD_LIST(tt_pad_attrs_t, hi),
               TT_FIELD_FLOAT(tt_pad_attrs_t, value));

typedef struct tt_flip_attrs_s {
  int64_t dims_mask; /* bit d: reverse dim d */
} tt_flip_attrs_t;
TT_ATTR_SCHEMA(flip, TT_FIELD_INT(tt_flip_attrs_t, dims_mask));

typedef struct tt_bitcast_attrs_s {
  int64_t dtype; /* the result's tt_dtype_t */
  tt_attr_list_t dims;
} tt_bitcast_attrs_t;
TT_ATTR_SCHEMA(bitcast, TT_FIELD_INT(tt_bitcast_attrs_t, dtype),
               TT_FIELD_LIST(tt_bitcast_attrs_t, dims));

/* ---- data sources ------------------------------------------------------ */
typedef struct tt_iota_attrs_s {
  int64_t dtype, n; /* n values: start, start + step, ... */
  double start, step;
} tt_iota_attrs_t;
TT_ATTR_SCHEMA(iota, TT_FIELD_INT(tt_iota_attrs_t, dtype), TT_FIELD_INT(tt_iota_attrs_t, n),
               TT_FIELD_FLOAT(tt_iota_attrs_t, start), TT_FIELD_FLOAT(tt_iota_attrs_t, step));

/* The tiled form (made by the SPMD partitioner, src/passes/partition.c):
 * fattrs[TT_RNG_TILED_FATTR] != 0 (past the schema's floats, so builders
 * of the plain form never set it) and dims holds 3 * rank values, the
 * result's (a tile's) dims, the whole tensor's dims and the tile's
 * offsets in it; the result is that tile of the tensor an rng of the
 * whole dims draws, bit for bit (0 past its end). */
#define TT_RNG_TILED_FATTR 2
typedef struct tt_rng_attrs_s {
  int64_t op;    /* tt_rng_op_t */
  int64_t dtype; /* the result's */
  tt_attr_list_t dims;
  double a, b;   /* uniform [a, b); normal mean a, std b; bernoulli p = a */
} tt_rng_attrs_t;
TT_ATTR_SCHEMA(rng, TT_FIELD_INT(tt_rng_attrs_t, op), TT_FIELD_INT(tt_rng_attrs_t, dtype),
               TT_FIELD_LIST(tt_rng_attrs_t, dims), TT_FIELD_FLOAT(tt_rng_attrs_t, a),
               TT_FIELD_FLOAT(tt_rng_attrs_t, b));

/* ---- reductions and scans -------------------------------------------- */
typedef struct tt_reduce_attrs_s {
  int64_t op;        /* tt_reduce_op_t */
  int64_t dims_mask; /* bit d: reduce dim d */
  int64_t keepdim;
  int64_t dtype;     /* the result's */
} tt_reduce_attrs_t;
TT_ATTR_SCHEMA(reduce, TT_FIELD_INT(tt_reduce_attrs_t, op),
               TT_FIELD_INT(tt_reduce_attrs_t, dims_mask), TT_FIELD_INT(tt_reduce_attrs_t, keepdim),
               TT_FIELD_INT(tt_reduce_attrs_t, dtype));

typedef struct tt_scan_attrs_s {
  int64_t op; /* tt_scan_op_t */
  int64_t dim;
  int64_t dtype;
} tt_scan_attrs_t;
TT_ATTR_SCHEMA(scan, TT_FIELD_INT(tt_scan_attrs_t, op), TT_FIELD_INT(tt_scan_attrs_t, dim),
               TT_FIELD_INT(tt_scan_attrs_t, dtype));

typedef struct tt_cumulative_attrs_s {
  int64_t op; /* tt_cumulative_t */
  int64_t dim;
} tt_cumulative_attrs_t;
TT_ATTR_SCHEMA(cumulative, TT_FIELD_INT(tt_cumulative_attrs_t, op),
               TT_FIELD_INT(tt_cumulative_attrs_t, dim));

typedef struct tt_argsort_attrs_s {
  int64_t dim, descending;
} tt_argsort_attrs_t;
TT_ATTR_SCHEMA(argsort, TT_FIELD_INT(tt_argsort_attrs_t, dim),
               TT_FIELD_INT(tt_argsort_attrs_t, descending));

typedef struct tt_searchsorted_attrs_s {
  int64_t right;
  int64_t dtype; /* I64 or I32 */
} tt_searchsorted_attrs_t;
TT_ATTR_SCHEMA(searchsorted, TT_FIELD_INT(tt_searchsorted_attrs_t, right),
               TT_FIELD_INT(tt_searchsorted_attrs_t, dtype));

/* ---- indexing ---------------------------------------------------------- */
/* index_select, index_add, gather. */
typedef struct tt_dim_attrs_s {
  int64_t dim;
} tt_dim_attrs_t;
TT_ATTR_SCHEMA(dim, TT_FIELD_INT(tt_dim_attrs_t, dim));

typedef struct tt_scatter_attrs_s {
  int64_t dim;
  int64_t reduce; /* 0 replace, 1 add */
} tt_scatter_attrs_t;
TT_ATTR_SCHEMA(scatter, TT_FIELD_INT(tt_scatter_attrs_t, dim),
               TT_FIELD_INT(tt_scatter_attrs_t, reduce));

typedef struct tt_scatter_reduce_attrs_s {
  int64_t dim;
  int64_t reduce; /* tt_scatter_reduce_t */
  int64_t include_self;
} tt_scatter_reduce_attrs_t;
TT_ATTR_SCHEMA(scatter_reduce, TT_FIELD_INT(tt_scatter_reduce_attrs_t, dim),
               TT_FIELD_INT(tt_scatter_reduce_attrs_t, reduce),
               TT_FIELD_INT(tt_scatter_reduce_attrs_t, include_self));

/* ---- linear algebra and products -------------------------------------- */
typedef struct tt_dot_attrs_s {
  int64_t trans_a, trans_b;
} tt_dot_attrs_t;
TT_ATTR_SCHEMA(dot, TT_FIELD_INT(tt_dot_attrs_t, trans_a), TT_FIELD_INT(tt_dot_attrs_t, trans_b));

typedef struct tt_linalg_attrs_s {
  int64_t op;       /* tt_linalg_op_t */
  int64_t flags[3]; /* per op (upper, unitriangular, ...; kernels.h) */
} tt_linalg_attrs_t;
TT_ATTR_SCHEMA(linalg, TT_FIELD_INT(tt_linalg_attrs_t, op),
               TT_FIELD_INTS(tt_linalg_attrs_t, flags, 3));

typedef struct tt_fft_attrs_s {
  int64_t kind; /* tt_fft_kind_t */
  int64_t n;    /* points along the last dim */
  double scale;
} tt_fft_attrs_t;
TT_ATTR_SCHEMA(fft, TT_FIELD_INT(tt_fft_attrs_t, kind), TT_FIELD_INT(tt_fft_attrs_t, n),
               TT_FIELD_FLOAT(tt_fft_attrs_t, scale));

/* ---- convolution and pooling (NCHW) ---------------------------------- */
typedef struct tt_conv2d_attrs_s {
  int64_t stride[2], padding[2], dilation[2], groups;
} tt_conv2d_attrs_t;
TT_ATTR_SCHEMA(conv2d, TT_FIELD_INTS(tt_conv2d_attrs_t, stride, 2),
               TT_FIELD_INTS(tt_conv2d_attrs_t, padding, 2),
               TT_FIELD_INTS(tt_conv2d_attrs_t, dilation, 2),
               TT_FIELD_INT(tt_conv2d_attrs_t, groups));

/* conv2d_bwd_input: out_dims are x's [N, C, H, W]; conv2d_bwd_weight: w's
 * [O, C / groups, kh, kw]. */
typedef struct tt_conv2d_bwd_attrs_s {
  int64_t stride[2], padding[2], dilation[2], groups;
  int64_t out_dims[4];
} tt_conv2d_bwd_attrs_t;
TT_ATTR_SCHEMA(conv2d_bwd, TT_FIELD_INTS(tt_conv2d_bwd_attrs_t, stride, 2),
               TT_FIELD_INTS(tt_conv2d_bwd_attrs_t, padding, 2),
               TT_FIELD_INTS(tt_conv2d_bwd_attrs_t, dilation, 2),
               TT_FIELD_INT(tt_conv2d_bwd_attrs_t, groups),
               TT_FIELD_INTS(tt_conv2d_bwd_attrs_t, out_dims, 4));

/* max_pool2d and max_pool2d_indices. */
typedef struct tt_max_pool2d_attrs_s {
  int64_t kernel[2], stride[2], padding[2], dilation[2], ceil_mode;
} tt_max_pool2d_attrs_t;
TT_ATTR_SCHEMA(max_pool2d, TT_FIELD_INTS(tt_max_pool2d_attrs_t, kernel, 2),
               TT_FIELD_INTS(tt_max_pool2d_attrs_t, stride, 2),
               TT_FIELD_INTS(tt_max_pool2d_attrs_t, padding, 2),
               TT_FIELD_INTS(tt_max_pool2d_attrs_t, dilation, 2),
               TT_FIELD_INT(tt_max_pool2d_attrs_t, ceil_mode));

typedef struct tt_avg_pool2d_attrs_s {
  int64_t kernel[2], stride[2], padding[2], ceil_mode, count_include_pad;
  int64_t divisor; /* 0: the window's count */
} tt_avg_pool2d_attrs_t;
TT_ATTR_SCHEMA(avg_pool2d, TT_FIELD_INTS(tt_avg_pool2d_attrs_t, kernel, 2),
               TT_FIELD_INTS(tt_avg_pool2d_attrs_t, stride, 2),
               TT_FIELD_INTS(tt_avg_pool2d_attrs_t, padding, 2),
               TT_FIELD_INT(tt_avg_pool2d_attrs_t, ceil_mode),
               TT_FIELD_INT(tt_avg_pool2d_attrs_t, count_include_pad),
               TT_FIELD_INT(tt_avg_pool2d_attrs_t, divisor));

typedef struct tt_avg_pool2d_bwd_attrs_s {
  int64_t kernel[2], stride[2], padding[2], ceil_mode, count_include_pad, divisor;
  tt_attr_list_t dims; /* x's */
} tt_avg_pool2d_bwd_attrs_t;
TT_ATTR_SCHEMA(avg_pool2d_bwd, TT_FIELD_INTS(tt_avg_pool2d_bwd_attrs_t, kernel, 2),
               TT_FIELD_INTS(tt_avg_pool2d_bwd_attrs_t, stride, 2),
               TT_FIELD_INTS(tt_avg_pool2d_bwd_attrs_t, padding, 2),
               TT_FIELD_INT(tt_avg_pool2d_bwd_attrs_t, ceil_mode),
               TT_FIELD_INT(tt_avg_pool2d_bwd_attrs_t, count_include_pad),
               TT_FIELD_INT(tt_avg_pool2d_bwd_attrs_t, divisor),
               TT_FIELD_LIST(tt_avg_pool2d_bwd_attrs_t, dims));

typedef struct tt_adaptive_avg_pool2d_attrs_s {
  int64_t out_size[2];
} tt_adaptive_avg_pool2d_attrs_t;
TT_ATTR_SCHEMA(adaptive_avg_pool2d, TT_FIELD_INTS(tt_adaptive_avg_pool2d_attrs_t, out_size, 2));

/* ---- normalisation and attention -------------------------------------- */
typedef struct tt_softmax_attrs_s {
  int64_t dim, log;
  int64_t packed; /* optional: 1 = [2, x...], log_softmax then softmax (ir.h) */
} tt_softmax_attrs_t;
TT_ATTR_SCHEMA(softmax, TT_FIELD_INT(tt_softmax_attrs_t, dim),
               TT_FIELD_INT(tt_softmax_attrs_t, log), TT_FIELD_INT_OPT(tt_softmax_attrs_t, packed));

typedef struct tt_softmax_bwd_attrs_s {
  int64_t dim, log;
} tt_softmax_bwd_attrs_t;
TT_ATTR_SCHEMA(softmax_bwd, TT_FIELD_INT(tt_softmax_bwd_attrs_t, dim),
               TT_FIELD_INT(tt_softmax_bwd_attrs_t, log));

typedef struct tt_layer_norm_attrs_s {
  int64_t axis, has_weight, has_bias;
  int64_t form; /* 0 output, 1 [mean | rstd], 2 [output | mean | rstd] */
  double eps;
} tt_layer_norm_attrs_t;
TT_ATTR_SCHEMA(layer_norm, TT_FIELD_INT(tt_layer_norm_attrs_t, axis),
               TT_FIELD_INT(tt_layer_norm_attrs_t, has_weight),
               TT_FIELD_INT(tt_layer_norm_attrs_t, has_bias),
               TT_FIELD_INT(tt_layer_norm_attrs_t, form),
               TT_FIELD_FLOAT(tt_layer_norm_attrs_t, eps));

typedef struct tt_layer_norm_bwd_attrs_s {
  int64_t axis, want_grad_x;
} tt_layer_norm_bwd_attrs_t;
TT_ATTR_SCHEMA(layer_norm_bwd, TT_FIELD_INT(tt_layer_norm_bwd_attrs_t, axis),
               TT_FIELD_INT(tt_layer_norm_bwd_attrs_t, want_grad_x));

/* ---- optimization barrier ---------------------------------------------- */
/* index: which operand this node of the barrier gives back. */
typedef struct tt_opt_barrier_attrs_s {
  int64_t index;
} tt_opt_barrier_attrs_t;
TT_ATTR_SCHEMA(opt_barrier, TT_FIELD_INT(tt_opt_barrier_attrs_t, index));

/* The optional trailing fields are the strided form made only by
 * src/passes/attention_layout.c (ir.h): the geometry and one
 * tt_att_layout_t (off, sb, sh, sr) per operand and result. */
typedef struct tt_attention_attrs_s {
  int64_t causal;
  int64_t lse; /* optional: 1 = the logsumexp [B, H, L] instead of the output */
  int64_t B, H, L, S, E, Ev;
  int64_t q_layout[4], k_layout[4], v_layout[4], out_layout[4];
  double scale;
} tt_attention_attrs_t;
TT_ATTR_SCHEMA(attention, TT_FIELD_INT(tt_attention_attrs_t, causal),
               TT_FIELD_INT_OPT(tt_attention_attrs_t, lse),
               TT_FIELD_INT_OPT_PASS(tt_attention_attrs_t, B),
               TT_FIELD_INT_PASS(tt_attention_attrs_t, H),
               TT_FIELD_INT_PASS(tt_attention_attrs_t, L),
               TT_FIELD_INT_PASS(tt_attention_attrs_t, S),
               TT_FIELD_INT_PASS(tt_attention_attrs_t, E),
               TT_FIELD_INT_PASS(tt_attention_attrs_t, Ev),
               TT_FIELD_INTS_PASS(tt_attention_attrs_t, q_layout, 4),
               TT_FIELD_INTS_PASS(tt_attention_attrs_t, k_layout, 4),
               TT_FIELD_INTS_PASS(tt_attention_attrs_t, v_layout, 4),
               TT_FIELD_INTS_PASS(tt_attention_attrs_t, out_layout, 4),
               TT_FIELD_FLOAT(tt_attention_attrs_t, scale));

typedef struct tt_attention_bwd_attrs_s {
  int64_t causal;
  int64_t B, H, L, S, E, Ev; /* optional: the strided form */
  int64_t grad_out_layout[4], q_layout[4], k_layout[4], v_layout[4];
  int64_t grads_layout[4]; /* (sw, sb, sh, sr): grad q/k/v at 0, sw, 2 * sw */
  double scale;
} tt_attention_bwd_attrs_t;
TT_ATTR_SCHEMA(attention_bwd, TT_FIELD_INT(tt_attention_bwd_attrs_t, causal),
               TT_FIELD_INT_OPT_PASS(tt_attention_bwd_attrs_t, B),
               TT_FIELD_INT_PASS(tt_attention_bwd_attrs_t, H),
               TT_FIELD_INT_PASS(tt_attention_bwd_attrs_t, L),
               TT_FIELD_INT_PASS(tt_attention_bwd_attrs_t, S),
               TT_FIELD_INT_PASS(tt_attention_bwd_attrs_t, E),
               TT_FIELD_INT_PASS(tt_attention_bwd_attrs_t, Ev),
               TT_FIELD_INTS_PASS(tt_attention_bwd_attrs_t, grad_out_layout, 4),
               TT_FIELD_INTS_PASS(tt_attention_bwd_attrs_t, q_layout, 4),
               TT_FIELD_INTS_PASS(tt_attention_bwd_attrs_t, k_layout, 4),
               TT_FIELD_INTS_PASS(tt_attention_bwd_attrs_t, v_layout, 4),
               TT_FIELD_INTS_PASS(tt_attention_bwd_attrs_t, grads_layout, 4),
               TT_FIELD_FLOAT(tt_attention_bwd_attrs_t, scale));

/* ---- fusion -------------------------------------------------------------- */
/* A fused instruction has no attributes, or the fused-reduction form
 * (kind TT_FUSED_REDUCE, ir.h) over the domain dims with dims_mask reduced. */
typedef struct tt_fused_attrs_s {
  int64_t kind; /* optional */
  int64_t dims_mask;
  int64_t rank;
  tt_attr_list_t dims;
} tt_fused_attrs_t;
TT_ATTR_SCHEMA(fused, TT_FIELD_INT_OPT(tt_fused_attrs_t, kind),
               TT_FIELD_INT(tt_fused_attrs_t, dims_mask), TT_FIELD_INT(tt_fused_attrs_t, rank),
               TT_FIELD_LIST(tt_fused_attrs_t, dims));

/* ---- collectives (src/ir/infer_collective.c) -------------------------- */
/* Every collective ends with channel_id (0: no channel handle), group_size
 * and the replica groups' global ids, group_size each (none: one group of
 * every participant). Reserved fields are stored as 0. */
typedef struct tt_all_reduce_attrs_s {
  int64_t reduce; /* tt_reduce_op_t: SUM, PROD, MAX, MIN, ANY, ALL */
  int64_t reserved[2];
  int64_t channel_id, group_size;
  tt_attr_list_t groups;
} tt_all_reduce_attrs_t;
TT_ATTR_SCHEMA(all_reduce, TT_FIELD_INT(tt_all_reduce_attrs_t, reduce),
               TT_FIELD_INTS_RESERVED(tt_all_reduce_attrs_t, reserved, 2),
               TT_FIELD_INT(tt_all_reduce_attrs_t, channel_id),
               TT_FIELD_INT(tt_all_reduce_attrs_t, group_size),
               TT_FIELD_LIST(tt_all_reduce_attrs_t, groups));

typedef struct tt_all_gather_attrs_s {
  int64_t dim, shard_count;
  int64_t reserved;
  int64_t channel_id, group_size;
  tt_attr_list_t groups;
} tt_all_gather_attrs_t;
TT_ATTR_SCHEMA(all_gather, TT_FIELD_INT(tt_all_gather_attrs_t, dim),
               TT_FIELD_INT(tt_all_gather_attrs_t, shard_count),
               TT_FIELD_INT_RESERVED(tt_all_gather_attrs_t, reserved),
               TT_FIELD_INT(tt_all_gather_attrs_t, channel_id),
               TT_FIELD_INT(tt_all_gather_attrs_t, group_size),
               TT_FIELD_LIST(tt_all_gather_attrs_t, groups));

typedef struct tt_reduce_scatter_attrs_s {
  int64_t reduce, dim, shard_count;
  int64_t channel_id, group_size;
  tt_attr_list_t groups;
} tt_reduce_scatter_attrs_t;
TT_ATTR_SCHEMA(reduce_scatter, TT_FIELD_INT(tt_reduce_scatter_attrs_t, reduce),
               TT_FIELD_INT(tt_reduce_scatter_attrs_t, dim),
               TT_FIELD_INT(tt_reduce_scatter_attrs_t, shard_count),
               TT_FIELD_INT(tt_reduce_scatter_attrs_t, channel_id),
               TT_FIELD_INT(tt_reduce_scatter_attrs_t, group_size),
               TT_FIELD_LIST(tt_reduce_scatter_attrs_t, groups));

typedef struct tt_all_to_all_attrs_s {
  int64_t split_dim, concat_dim, split_count;
  int64_t channel_id, group_size;
  tt_attr_list_t groups;
} tt_all_to_all_attrs_t;
TT_ATTR_SCHEMA(all_to_all, TT_FIELD_INT(tt_all_to_all_attrs_t, split_dim),
               TT_FIELD_INT(tt_all_to_all_attrs_t, concat_dim),
               TT_FIELD_INT(tt_all_to_all_attrs_t, split_count),
               TT_FIELD_INT(tt_all_to_all_attrs_t, channel_id),
               TT_FIELD_INT(tt_all_to_all_attrs_t, group_size),
               TT_FIELD_LIST(tt_all_to_all_attrs_t, groups));

/* groups: (source, target) pairs, group_size 2. */
typedef struct tt_collective_permute_attrs_s {
  int64_t reserved[3];
  int64_t channel_id, group_size;
  tt_attr_list_t groups;
} tt_collective_permute_attrs_t;
TT_ATTR_SCHEMA(collective_permute,
               TT_FIELD_INTS_RESERVED(tt_collective_permute_attrs_t, reserved, 3),
               TT_FIELD_INT(tt_collective_permute_attrs_t, channel_id),
               TT_FIELD_INT(tt_collective_permute_attrs_t, group_size),
               TT_FIELD_LIST(tt_collective_permute_attrs_t, groups));

/* Manual SPMD regions: spec is the tiled sharding [num_tile_dims,
 * last_tile_dim_replicate, tile dims..., num_devices, devices...] and, for
 * shard_to_full, the full dims after it; tt_spmd_manual_check decodes it. */
typedef struct tt_spmd_manual_attrs_s {
  tt_attr_list_t spec;
} tt_spmd_manual_attrs_t;
TT_ATTR_SCHEMA(spmd_manual, TT_FIELD_LIST(tt_spmd_manual_attrs_t, spec));

/* ---- the codec --------------------------------------------------------- */
/* Decodes an attribute instance of op into *out, a struct of out_size bytes
 * (the op's attribute struct: tt_op_info(op)->attrs_size; a different size
 * is a caller's bug and aborts). Absent optional fields are 0. On success
 * *out_num_fields (may be NULL) receives the number of int fields present.
 * TT_INVALID_ARGUMENT naming the op when the int count fits no layout of
 * its schema (too few, lists that do not share the rest equally). */
tt_status_t tt_attrs_decode(int32_t op, const int64_t *iattrs, int32_t num_iattrs,
                            const double *fattrs, void *out, size_t out_size,
                            int32_t *out_num_fields);

/* Encodes the first num_int_fields int fields of *in (a struct of in_size
 * bytes for op; -1: all of them) and every float field into iattrs (room
 * for TT_MAX_IATTRS) and fattrs (room for TT_MAX_FATTRS, zero-filled
 * first). *out_num_iattrs receives the int count. TT_INVALID_ARGUMENT when
 * the lists do not fit TT_MAX_IATTRS or several lists differ in length. */
tt_status_t tt_attrs_encode(int32_t op, const void *in, size_t in_size, int32_t num_int_fields,
                            int64_t *iattrs, int32_t *out_num_iattrs, double *fattrs);

/* Decodes the attributes of a node or an instruction (anything with op,
 * num_iattrs, iattrs and fattrs members) into the struct at `out`, for code
 * where the op is known to be well formed (recorded nodes, graphs that
 * passed the verifier): a decode error there is an internal invariant
 * broken, and aborts. Returns the number of int fields present. */
#define TT_ATTRS(x, out) \
  tt_attrs_decode_valid((int32_t)(x)->op, (x)->iattrs, (x)->num_iattrs, (x)->fattrs, (out), sizeof(*(out)))
int32_t tt_attrs_decode_valid(int32_t op, const int64_t *iattrs, int32_t num_iattrs,
                              const double *fattrs, void *out, size_t out_size);

/* Writes *in (all fields) as the attributes of a linearised instruction or
 * node x (passes rewriting an instruction); aborts when it does not fit
 * (structs made by the engine itself). */
#define TT_SET_ATTRS(x, in)                                                             \
  tt_attrs_encode_valid((int32_t)(x)->op, (in), sizeof(*(in)), -1, (x)->iattrs,          \
                        &(x)->num_iattrs, (x)->fattrs)
void tt_attrs_encode_valid(int32_t op, const void *in, size_t in_size, int32_t num_int_fields,
                           int64_t *iattrs, int32_t *out_num_iattrs, double *fattrs);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_OP_ATTRS_H_ */
