/* torchtpu CPU kernels: the computation under every IR op.
 *
 * Contract shared by every kernel here:
 *  - Every tensor is a tt_view_t over a dense, contiguous, row-major buffer
 *    (no strides). Rank 0 is a scalar with one element.
 *  - Output views are allocated by the caller with the shape and dtype given;
 *    kernels never allocate outputs and may not assume outputs are zeroed.
 *    Outputs never alias inputs.
 *  - Arithmetic: F32/F16/BF16 compute in f32 (F16/BF16 are widened on load and
 *    rounded to nearest even on store); F64 computes in f64; integer types
 *    and BOOL compute in int64 and wrap/truncate on store. BOOL stores 0/1.
 *  - A kernel checks what it relies on (ranks, dims, dtypes) and returns a
 *    TT_INVALID_ARGUMENT / TT_TYPE_ERROR / TT_OUT_OF_RANGE status naming the
 *    values; it never aborts on bad input. Index inputs are I64 (or I32).
 *  - Kernels may use several threads (tt_parallel_for); results must not
 *    depend on the thread count beyond floating-point reassociation in
 *    reductions and GEMM.
 */
#ifndef TORCHTPU_KERNELS_H_
#define TORCHTPU_KERNELS_H_

#include "torchtpu/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tt_view_s {
  void *data;
  tt_dtype_t dtype;
  tt_shape_t shape;
} tt_view_t;

/* ---- elementwise -------------------------------------------------------
 * The elementwise functions, one row each: X(suffix, name, stablehlo, tier1)
 *   suffix     the enum constant TT_UN_<suffix> / TT_BIN_<suffix>. Rows are
 *              in code order, and codes are stored in graphs (graph hashes,
 *              cache keys): add rows at the end, never reorder.
 *   name       the name the Python lowering uses (torchtpu._C.enums()).
 *   stablehlo  the StableHLO op (src/backends/stablehlo/emit_elementwise.c)
 *              applied to the operands when the lowering is that one op:
 *              for a unary function of a float x (integer x has its own
 *              cases there); for a binary function the dtype rules (bool
 *              ADD as "or", operand dtypes without a lowering) are cases
 *              there. NULL: a composite lowering, a case there.
 *   tier1      the C expression tier-1 code computes it with
 *              (src/backends/cpu/tier1_emit_c.c), in float: a printf
 *              format with one %s per operand, each used once;
 *              TT_EW_TIER1_SPECIAL: written out there (parameters, an
 *              operand used twice); TT_EW_TIER0_ONLY: no tier-1 form (a
 *              fused program using it runs on tier 0).
 * tests/c/test_elementwise_table.c checks every row against the backends. */
#define TT_EW_TIER0_ONLY NULL
#define TT_EW_TIER1_SPECIAL ""

/* Unary: out has x's shape. Output dtype: same as x, except where noted.
 * `alpha`/`beta` are op parameters (see each op). */
#define TT_UNARY_OPS(X)                                                              \
  X(NEG, "neg", "negate", "(-%s)")                                                   \
  X(ABS, "abs", "abs", "fabsf(%s)")                                                  \
  X(EXP, "exp", "exponential", "tt_expf_fast(%s)")                                   \
  X(LOG, "log", "log", "logf(%s)")                                                   \
  X(LOG1P, "log1p", "log_plus_one", "log1pf(%s)")                                    \
  X(EXPM1, "expm1", "exponential_minus_one", "expm1f(%s)")                           \
  X(SQRT, "sqrt", "sqrt", "sqrtf(%s)")                                               \
  X(RSQRT, "rsqrt", "rsqrt", "(1.0f / sqrtf(%s))")                                   \
  X(SIN, "sin", "sine", "sinf(%s)")                                                  \
  X(COS, "cos", "cosine", "cosf(%s)")                                                \
  X(TAN, "tan", NULL, TT_EW_TIER0_ONLY)                                              \
  X(TANH, "tanh", "tanh", "tt_tanhf_fast(%s)")                                       \
  X(SIGMOID, "sigmoid", "logistic", "tt_sigmoid(%s)")                                \
  X(RELU, "relu", NULL, "tt_relu(%s)")                                               \
  X(GELU_ERF, "gelu_erf", NULL, "tt_gelu_erf(%s)")                                   \
  X(GELU_TANH, "gelu_tanh", NULL, "tt_gelu_tanh(%s)")                                \
  X(SILU, "silu", NULL, "tt_silu(%s)")                                               \
  X(ERF, "erf", "chlo.erf", "tt_erff_fast(%s)")                                      \
  X(FLOOR, "floor", "floor", "floorf(%s)")                                           \
  X(CEIL, "ceil", "ceil", "ceilf(%s)")                                               \
  X(ROUND /* half to even */, "round", "round_nearest_even", "nearbyintf(%s)")       \
  X(TRUNC, "trunc", NULL, "truncf(%s)")                                              \
  X(SIGN, "sign", NULL, TT_EW_TIER0_ONLY)                                            \
  X(RECIPROCAL, "reciprocal", NULL, "(1.0f / %s)")                                   \
  X(LOGICAL_NOT /* out BOOL */, "logical_not", NULL, "(%s == 0.0f ? 1.0f : 0.0f)")   \
  X(ISNAN /* out BOOL */, "isnan", NULL, TT_EW_TIER0_ONLY)                           \
  X(BITWISE_NOT /* ints; bool = logical */, "bitwise_not", NULL, TT_EW_TIER0_ONLY)   \
  X(ASIN, "asin", NULL, TT_EW_TIER0_ONLY)                                            \
  X(ACOS, "acos", NULL, TT_EW_TIER0_ONLY)                                            \
  X(ATAN, "atan", NULL, TT_EW_TIER0_ONLY)                                            \
  X(SINH, "sinh", NULL, TT_EW_TIER0_ONLY)                                            \
  X(COSH, "cosh", NULL, TT_EW_TIER0_ONLY)                                            \
  X(ASINH, "asinh", NULL, TT_EW_TIER0_ONLY)                                          \
  X(ACOSH, "acosh", NULL, TT_EW_TIER0_ONLY)                                          \
  X(ATANH, "atanh", NULL, TT_EW_TIER0_ONLY)                                          \
  X(LOG2, "log2", NULL, TT_EW_TIER0_ONLY)                                            \
  X(LOG10, "log10", NULL, TT_EW_TIER0_ONLY)                                          \
  X(EXP2, "exp2", NULL, TT_EW_TIER0_ONLY)                                            \
  X(ERFINV, "erfinv", "chlo.erf_inv", TT_EW_TIER0_ONLY)                              \
  X(SQUARE, "square", NULL, "tt_square(%s)")                                         \
  X(LEAKY_RELU /* x>0 ? x : alpha*x */, "leaky_relu", NULL, TT_EW_TIER1_SPECIAL)     \
  X(ELU /* x>0 ? x : alpha*(exp(x)-1) */, "elu", NULL, TT_EW_TIER0_ONLY)             \
  X(HARDTANH /* clamp(x, alpha, beta) */, "hardtanh", NULL, TT_EW_TIER1_SPECIAL)     \
  X(SOFTPLUS /* beta=threshold: x*alpha>beta ? x : log1p(exp(alpha*x))/alpha */,     \
    "softplus", NULL, TT_EW_TIER0_ONLY)                                              \
  X(HARDSIGMOID, "hardsigmoid", NULL, "tt_hardsigmoid(%s)")                          \
  X(HARDSWISH, "hardswish", NULL, TT_EW_TIER1_SPECIAL)                               \
  X(MISH, "mish", NULL, TT_EW_TIER0_ONLY)                                            \
  X(LGAMMA, "lgamma", "chlo.lgamma", TT_EW_TIER0_ONLY)                               \
  X(DIGAMMA, "digamma", "chlo.digamma", TT_EW_TIER0_ONLY)

#define TT_UN_ENUM_(suffix, name, stablehlo, tier1) TT_UN_##suffix,
typedef enum tt_unary_op_e { TT_UNARY_OPS(TT_UN_ENUM_) TT_UN_COUNT } tt_unary_op_t;
#undef TT_UN_ENUM_

tt_status_t tt_kernel_unary(tt_unary_op_t op, const tt_view_t *x, double alpha,
                            double beta, tt_view_t *out);

/* Binary with numpy broadcasting: a and b have out's rank or less and are
 * right-aligned against out's shape; a dim of size 1 broadcasts. a and b
 * have the same dtype. out dtype = that dtype, or BOOL for comparisons and
 * logical ops. Integer DIV is not provided (lowering converts to float);
 * FLOOR_DIV and REMAINDER follow Python's sign rules (PyTorch semantics);
 * integer division by zero returns 0 (no trap). MAX/MIN ignore a NaN
 * operand (torch.fmax/fmin); MAXIMUM_NAN/MINIMUM_NAN propagate it. Rows as
 * for TT_UNARY_OPS. */
#define TT_BINARY_OPS(X)                                                             \
  X(ADD, "add", "add", "(%s + %s)")                                                  \
  X(SUB, "sub", "subtract", "(%s - %s)")                                             \
  X(MUL, "mul", "multiply", "(%s * %s)")                                             \
  X(DIV, "div", "divide", "(%s / %s)")                                               \
  X(POW, "pow", "power", "powf(%s, %s)")                                             \
  X(MAX, "max", NULL, TT_EW_TIER0_ONLY)                                              \
  X(MIN, "min", NULL, TT_EW_TIER0_ONLY)                                              \
  X(EQ, "eq", NULL, "(%s == %s ? 1.0f : 0.0f)")                                      \
  X(NE, "ne", NULL, "(%s != %s ? 1.0f : 0.0f)")                                      \
  X(LT, "lt", NULL, "(%s < %s ? 1.0f : 0.0f)")                                       \
  X(LE, "le", NULL, "(%s <= %s ? 1.0f : 0.0f)")                                      \
  X(GT, "gt", NULL, "(%s > %s ? 1.0f : 0.0f)")                                       \
  X(GE, "ge", NULL, "(%s >= %s ? 1.0f : 0.0f)")                                      \
  X(LOGICAL_AND, "logical_and", NULL, "((%s != 0.0f && %s != 0.0f) ? 1.0f : 0.0f)")  \
  X(LOGICAL_OR, "logical_or", NULL, "((%s != 0.0f || %s != 0.0f) ? 1.0f : 0.0f)")    \
  X(LOGICAL_XOR, "logical_xor", NULL,                                                \
    "(((%s != 0.0f) != (%s != 0.0f)) ? 1.0f : 0.0f)")                                \
  X(BITWISE_AND, "bitwise_and", "and", TT_EW_TIER0_ONLY)                             \
  X(BITWISE_OR, "bitwise_or", "or", TT_EW_TIER0_ONLY)                                \
  X(BITWISE_XOR, "bitwise_xor", "xor", TT_EW_TIER0_ONLY)                             \
  X(ATAN2, "atan2", "atan2", TT_EW_TIER0_ONLY)                                       \
  X(REMAINDER, "remainder", NULL, TT_EW_TIER0_ONLY)                                  \
  X(FMOD, "fmod", NULL, TT_EW_TIER0_ONLY)                                            \
  X(FLOOR_DIV, "floor_div", NULL, TT_EW_TIER0_ONLY)                                  \
  X(SHIFT_LEFT, "shift_left", "shift_left", TT_EW_TIER0_ONLY)                        \
  X(SHIFT_RIGHT, "shift_right", NULL, TT_EW_TIER0_ONLY)                              \
  X(HYPOT, "hypot", NULL, TT_EW_TIER0_ONLY)                                          \
  X(MAXIMUM_NAN /* max that propagates NaN, as torch.maximum */, "maximum",          \
    "maximum", "tt_maximum(%s, %s)")                                                 \
  X(MINIMUM_NAN, "minimum", "minimum", "tt_minimum(%s, %s)")

#define TT_BIN_ENUM_(suffix, name, stablehlo, tier1) TT_BIN_##suffix,
typedef enum tt_binary_op_e { TT_BINARY_OPS(TT_BIN_ENUM_) TT_BIN_COUNT } tt_binary_op_t;
#undef TT_BIN_ENUM_

tt_status_t tt_kernel_binary(tt_binary_op_t op, const tt_view_t *a,
                             const tt_view_t *b, tt_view_t *out);

/* out = cond ? a : b, all three broadcast to out (cond is BOOL). */
tt_status_t tt_kernel_where(const tt_view_t *cond, const tt_view_t *a,
                            const tt_view_t *b, tt_view_t *out);

/* Copies x into out converting dtype; float->int truncates toward zero,
 * anything->BOOL is (x != 0). Shapes must have equal numel. */
tt_status_t tt_kernel_convert(const tt_view_t *x, tt_view_t *out);

/* Broadcasts x (right-aligned, size-1 dims stretch) into out, same dtype. */
tt_status_t tt_kernel_broadcast(const tt_view_t *x, tt_view_t *out);

/* Fills out with value (converted to out's dtype). */
tt_status_t tt_kernel_fill(double value, tt_view_t *out);

/* out[i] = start + i*step over the flat index (out is 1-D). */
tt_status_t tt_kernel_iota(double start, double step, tt_view_t *out);

/* ---- reductions ------------------------------------------------------
 * Reduces x over the dims whose bit is set in dims_mask (bit d = dim d).
 * out's shape is x's shape with reduced dims removed, or set to 1 when
 * keepdim; out numel must equal that. SUM/MEAN/PROD of F16/BF16 accumulate
 * in f32; of ints/bool in int64 (out dtype is given by the caller, usually
 * I64 for int sums). MAX/MIN propagate NaN. ARGMAX/ARGMIN return I64 and
 * take exactly one reduced dim (first occurrence wins, NaN counts as max).
 * ANY/ALL return BOOL. Reducing an empty dim: SUM=0, PROD=1, MEAN=NaN,
 * MAX/MIN/ARGMAX/ARGMIN -> TT_INVALID_ARGUMENT. */
typedef enum tt_reduce_op_e {
  TT_RED_SUM, TT_RED_MEAN, TT_RED_PROD, TT_RED_MAX, TT_RED_MIN,
  TT_RED_ARGMAX, TT_RED_ARGMIN, TT_RED_ANY, TT_RED_ALL,
  TT_RED_COUNT
} tt_reduce_op_t;

tt_status_t tt_kernel_reduce(tt_reduce_op_t op, const tt_view_t *x,
                             uint32_t dims_mask, tt_view_t *out);

/* Inclusive scan along dim: CUMSUM, CUMPROD (out same shape; int inputs
 * scan in int64). */
typedef enum tt_scan_op_e { TT_SCAN_SUM, TT_SCAN_PROD } tt_scan_op_t;
tt_status_t tt_kernel_scan(tt_scan_op_t op, const tt_view_t *x, int dim,
                           tt_view_t *out);

/* ---- linear algebra --------------------------------------------------
 * Batched matrix product: a is [B, M, K] (or [B, K, M] when trans_a), b is
 * [Bb, K, N] (or [Bb, N, K] when trans_b), out is [B, M, N]; Bb is B or 1
 * (broadcast). All three are rank 3 (the lowering reshapes). Same dtype for
 * a, b and out. Integer dot accumulates in int64. */
tt_status_t tt_kernel_dot(const tt_view_t *a, const tt_view_t *b, int trans_a,
                          int trans_b, tt_view_t *out);

/* 2-D convolution, NCHW input [N, C, H, W], weight [O, C/groups, kh, kw],
 * out [N, O, OH, OW] with OH = (H + 2*pad[0] - dil[0]*(kh-1) - 1)/stride[0]+1.
 * Bias is added by the lowering, not here. Float dtypes only. */
typedef struct tt_conv2d_params_s {
  int64_t stride[2], pad[2], dilation[2];
  int64_t groups;
} tt_conv2d_params_t;

tt_status_t tt_kernel_conv2d(const tt_view_t *x, const tt_view_t *w,
                             const tt_conv2d_params_t *p, tt_view_t *out);
/* A consumer of a kernel's output computed while that output is still in
 * cache: fn(ctx, begin, end) is called over flat element ranges of out
 * once they are final, every element exactly once, possibly from several
 * kernel threads at a time (ranges never overlap). */
typedef struct tt_epilogue_s {
  void (*fn)(void *ctx, int64_t begin, int64_t end);
  void *ctx;
} tt_epilogue_t;
/* tt_kernel_conv2d, then epi (may be NULL) over out: per output plane,
 * image or group of images, right after the convolution stores it. */
tt_status_t tt_kernel_conv2d_epilogue(const tt_view_t *x, const tt_view_t *w,
                                      const tt_conv2d_params_t *p, tt_view_t *out,
                                      const tt_epilogue_t *epi);
/* grad_x [N,C,H,W] from grad_out [N,O,OH,OW] and w. */
tt_status_t tt_kernel_conv2d_backward_input(const tt_view_t *grad_out,
                                            const tt_view_t *w,
                                            const tt_conv2d_params_t *p,
                                            tt_view_t *grad_x);
/* grad_w [O,C/groups,kh,kw] from grad_out and x. */
tt_status_t tt_kernel_conv2d_backward_weight(const tt_view_t *grad_out,
                                             const tt_view_t *x,
                                             const tt_conv2d_params_t *p,
                                             tt_view_t *grad_w);

/* ---- pooling (NCHW; rank 4, or rank 3 CHW treated as N=1) ------------ */
typedef struct tt_pool2d_params_s {
  int64_t kernel[2], stride[2], pad[2], dilation[2];
  int ceil_mode;
  int count_include_pad; /* avg only */
  int64_t divisor_override; /* avg only; 0 = none */
} tt_pool2d_params_t;

/* indices (I64, same shape as out) holds the flat h*W+w argmax per plane,
 * as PyTorch's max_pool2d_with_indices. indices may be NULL. */
tt_status_t tt_kernel_max_pool2d(const tt_view_t *x, const tt_pool2d_params_t *p,
                                 tt_view_t *out, tt_view_t *indices);
/* grad_x (shape of x, zeroed by the kernel) += grad_out at indices. */
tt_status_t tt_kernel_max_pool2d_backward(const tt_view_t *grad_out,
                                          const tt_view_t *indices,
                                          tt_view_t *grad_x);
tt_status_t tt_kernel_avg_pool2d(const tt_view_t *x, const tt_pool2d_params_t *p,
                                 tt_view_t *out);
tt_status_t tt_kernel_avg_pool2d_backward(const tt_view_t *grad_out,
                                          const tt_pool2d_params_t *p,
                                          tt_view_t *grad_x);
/* Adaptive average pooling to out's H and W (PyTorch's start/end rule). */
tt_status_t tt_kernel_adaptive_avg_pool2d(const tt_view_t *x, tt_view_t *out);
tt_status_t tt_kernel_adaptive_avg_pool2d_backward(const tt_view_t *grad_out,
                                                   tt_view_t *grad_x);

/* ---- data movement -------------------------------------------------- */
/* out = x permuted: out.dims[i] = x.dims[perm[i]]. */
tt_status_t tt_kernel_transpose(const tt_view_t *x, const int32_t *perm,
                                tt_view_t *out);
/* out[i...] = x[start[d] + i_d*step[d] ...]; out's dims give the counts.
 * step >= 1. */
tt_status_t tt_kernel_slice(const tt_view_t *x, const int64_t *start,
                            const int64_t *step, tt_view_t *out);
/* Inverse of slice: out = base with the slice region replaced by src. */
tt_status_t tt_kernel_slice_scatter(const tt_view_t *base, const tt_view_t *src,
                                    const int64_t *start, const int64_t *step,
                                    tt_view_t *out);
/* Concatenates n inputs (same dtype, same dims except dim) along dim. */
tt_status_t tt_kernel_concat(const tt_view_t *const *inputs, int n, int dim,
                             tt_view_t *out);
/* Constant pad: out.dims[d] = x.dims[d] + lo[d] + hi[d]; lo/hi may be
 * negative (crop). */
tt_status_t tt_kernel_pad(const tt_view_t *x, const int64_t *lo,
                          const int64_t *hi, double value, tt_view_t *out);
/* Reverses the dims whose bit is set. */
tt_status_t tt_kernel_flip(const tt_view_t *x, uint32_t dims_mask,
                           tt_view_t *out);

/* out = x.index_select(dim, idx) (idx 1-D; negative indices wrap once;
 * out of range -> TT_OUT_OF_RANGE naming index and size). */
tt_status_t tt_kernel_index_select(const tt_view_t *x, int dim,
                                   const tt_view_t *idx, tt_view_t *out);
/* out = base, then out.index_add_(dim, idx, src) semantics (accumulate). */
tt_status_t tt_kernel_index_add(const tt_view_t *base, int dim,
                                const tt_view_t *idx, const tt_view_t *src,
                                tt_view_t *out);
/* torch.gather(x, dim, idx): out has idx's shape. */
tt_status_t tt_kernel_gather(const tt_view_t *x, int dim, const tt_view_t *idx,
                             tt_view_t *out);
/* out = base.scatter(dim, idx, src) (reduce 0 = replace) or scatter_add
 * (reduce 1 = add). src has idx's shape or larger (only idx's extent used). */
tt_status_t tt_kernel_scatter(const tt_view_t *base, int dim,
                              const tt_view_t *idx, const tt_view_t *src,
                              int reduce, tt_view_t *out);

/* ---- normalisation / softmax --------------------------------------- */
/* softmax (log=0) or log_softmax (log=1) along dim; out same shape. */
tt_status_t tt_kernel_softmax(const tt_view_t *x, int dim, int log,
                              tt_view_t *out);
/* softmax / log_softmax of x + bias along the last dim (F32 only; bias
 * holds the row's length of values, added to every row): what the
 * simplify pass makes of a bias add read only by a softmax (a language
 * model's head). Equal to the add and tt_kernel_softmax run apart. */
tt_status_t tt_kernel_softmax_bias(const tt_view_t *x, const tt_view_t *bias, int dim, int log,
                                   tt_view_t *out);
/* log_softmax of x (+ bias, NULL: none) along the last dim into out and
 * softmax into probs (F32 rows; probs of x's shape): one pass, the exps of
 * the row sum scaled by its inverse, so a backward that needs exp(out)
 * reads probs instead. out equals tt_kernel_softmax(_bias)'s bit for bit. */
tt_status_t tt_kernel_log_softmax_probs(const tt_view_t *x, const tt_view_t *bias,
                                        tt_view_t *out, tt_view_t *probs);
/* grad_x from grad_out and the forward output y. */
tt_status_t tt_kernel_softmax_backward(const tt_view_t *grad_out,
                                       const tt_view_t *y, int dim, int log,
                                       tt_view_t *grad_x);

/* ---- attention (attention.c) -----------------------------------------
 * Scaled dot-product attention over q [B, H, L, E], k [B, H, S, E] and
 * v [B, H, S, Ev], one dtype among F32, F16, BF16 (computed in f32):
 *   out = softmax(scale * q k^T + mask) v,  lse = logsumexp of each row.
 * mask (NULL: none) is rank 4, each dim 1 or (B, H, L, S), any float
 * dtype, added to the scaled scores (-inf hides a key). causal: query i
 * sees keys j <= i (PyTorch's top-left aligned tril). A row that sees no
 * key gives zeros and lse 0, as PyTorch's CPU flash attention. out [B, H,
 * L, Ev] in q's dtype and lse [B, H, L] F32 are each optional (NULL).
 * Fails with TT_INVALID_ARGUMENT / TT_TYPE_ERROR naming mismatched shapes
 * or dtypes, TT_RESOURCE_EXHAUSTED when scratch memory runs out. */
tt_status_t tt_kernel_attention(const tt_view_t *q, const tt_view_t *k, const tt_view_t *v,
                                const tt_view_t *mask, int causal, double scale,
                                tt_view_t *out, tt_view_t *lse);
/* Its gradients from grad_out ([B, H, L, Ev], q's dtype): grad_q, grad_k,
 * grad_v with q's, k's and v's shapes and dtype. The probabilities are
 * recomputed from q and k (the forward's out and lse are not needed). */
tt_status_t tt_kernel_attention_backward(const tt_view_t *grad_out, const tt_view_t *q,
                                         const tt_view_t *k, const tt_view_t *v,
                                         const tt_view_t *mask, int causal, double scale,
                                         tt_view_t *grad_q, tt_view_t *grad_k,
                                         tt_view_t *grad_v);

/* The same over operands that are views into larger buffers (how the
 * graph pass src/passes/attention_layout.c folds the multi-head
 * attention's layout copies into the op). Element (b, h, r, c) of a
 * [B, H, rows, cols] operand is data[off + b*sb + h*sh + r*sr + c]: its
 * columns are contiguous. geom gives the sizes and the layouts of q, k,
 * v, out, grad_out, grad_q, grad_k, grad_v (lay[0..7]); each view is the
 * buffer its layout indexes (only its data, dtype and element count are
 * used), checked to hold every element the layout reaches
 * (TT_INVALID_ARGUMENT otherwise); output layouts must not overlap. The
 * mask, if any, is dense as in tt_kernel_attention. geom NULL: dense
 * operands, checked as by the entry points above. No logsumexp output.
 *
 * probs (NULL: not used) keeps the probabilities softmax(scale q k^T +
 * mask) between a forward and its backward, so the backward need not
 * recompute them (about a third of its time on short rows): f32 rows
 * [B * H * L, tt_attention_probs_ld(S)], problem by problem. The forward
 * writes each row's first keys (up to its last visible one, rounded up;
 * the rest of a row is left as it was); a backward given the same
 * operands, mask, causal flag and scale reads the same entries, and gets
 * the results it would have computed without them, bit for bit. */
typedef struct tt_att_layout_s {
  int64_t off, sb, sh, sr;
} tt_att_layout_t;
typedef struct tt_att_geom_s {
  int64_t B, H, L, S, E, Ev;
  tt_att_layout_t lay[8];
} tt_att_geom_t;
tt_status_t tt_kernel_attention_ex(const tt_view_t *q, const tt_view_t *k, const tt_view_t *v,
                                   const tt_view_t *mask, int causal, double scale,
                                   tt_view_t *out, const tt_att_geom_t *geom, float *probs);
tt_status_t tt_kernel_attention_backward_ex(const tt_view_t *grad_out, const tt_view_t *q,
                                            const tt_view_t *k, const tt_view_t *v,
                                            const tt_view_t *mask, int causal, double scale,
                                            tt_view_t *grad_q, tt_view_t *grad_k,
                                            tt_view_t *grad_v, const tt_att_geom_t *geom,
                                            const float *probs);
int64_t tt_attention_probs_ld(int64_t S);

/* ---- layer norm (layer_norm.c) -------------------------------------
 * x (F32) normalised over its dims [axis, rank), viewed as [R, C]:
 * y = (x - mean) * rstd * weight + bias per row, rstd = 1/sqrt(var + eps)
 * (biased variance), mean and rstd of R elements each (y, or mean and
 * rstd together, may be NULL: not stored); weight and bias (NULL: none)
 * of C elements. Views are checked by element count (any
 * shapes), all F32. The backward gives grad_x, grad_weight (the row sum of
 * grad_out * xhat) and grad_bias (the row sum of grad_out), each optional
 * (NULL), from the forward's mean and rstd; its sums over rows do not
 * depend on the thread count. TT_TYPE_ERROR for another dtype,
 * TT_INVALID_ARGUMENT for a view of the wrong size. */
tt_status_t tt_kernel_layer_norm(const tt_view_t *x, int axis, const tt_view_t *weight,
                                 const tt_view_t *bias, double eps, tt_view_t *y,
                                 tt_view_t *mean, tt_view_t *rstd);
tt_status_t tt_kernel_layer_norm_backward(const tt_view_t *grad_out, const tt_view_t *x,
                                          int axis, const tt_view_t *mean,
                                          const tt_view_t *rstd, const tt_view_t *weight,
                                          tt_view_t *grad_x, tt_view_t *grad_weight,
                                          tt_view_t *grad_bias);

/* ---- random numbers --------------------------------------------------
 * Counter-based (Philox-4x32-10): element i of a call keyed by (seed,
 * offset) depends only on seed, offset and i, so results are reproducible
 * and independent of threads. UNIFORM: [a, b); NORMAL: mean a, std b;
 * BERNOULLI: 1 with probability a (out any dtype, stores 0/1). */
typedef enum tt_rng_op_e { TT_RNG_UNIFORM, TT_RNG_NORMAL, TT_RNG_BERNOULLI } tt_rng_op_t;
tt_status_t tt_kernel_rng(tt_rng_op_t op, uint64_t seed, uint64_t offset,
                          double a, double b, tt_view_t *out);
/* out = the tile at tile_offsets of the tensor of full_dims (out's rank)
 * that tt_kernel_rng would draw whole, bit for bit (an SPMD partition's
 * shard); elements past full_dims (a tile's padding) are 0. */
tt_status_t tt_kernel_rng_tile(tt_rng_op_t op, uint64_t seed, uint64_t offset, double a,
                               double b, const int64_t *full_dims, const int64_t *tile_offsets,
                               tt_view_t *out);

/* ---- threading -------------------------------------------------------
 * Runs fn(ctx, begin, end) over [0, n) split into chunks of at least grain
 * items across the kernel thread pool (TORCHTPU_NUM_THREADS, default: the
 * number of online cores). Blocks until all chunks finish. Safe to call
 * from several threads at once (calls serialise on the pool). */
typedef void (*tt_range_fn_t)(void *ctx, int64_t begin, int64_t end);
void tt_parallel_for(int64_t n, int64_t grain, tt_range_fn_t fn, void *ctx);
/* tt_parallel_for with every item its own chunk, for coarse items (tens
 * of microseconds each or more, like a GEMM's row blocks) that number a
 * few per thread: tt_parallel_for's chunks (at most 4 a thread) would
 * leave one thread idle for up to a whole chunk of items at the end. */
void tt_parallel_for_items(int64_t n, tt_range_fn_t fn, void *ctx);
int tt_num_threads(void);
/* Brackets a burst of parallel calls (a graph execution): while at least
 * one hold is open, idle workers keep polling for the next job (yielding
 * their core to any other runnable thread) instead of going to sleep, so
 * the kernels of one execution do not each pay a worker wake-up. Holds
 * nest and may be taken by several threads. */
void tt_parallel_hold_begin(void);
void tt_parallel_hold_end(void);
/* How many threads a parallel call uses now (kernels size their splits by
 * it): all of tt_num_threads() while some thread waits for the device
 * (tt_parallel_host_wait_begin/end: a step waited for, a value read, a
 * synchronous run), else one fewer, leaving a core to the thread that
 * records the next step while this one runs (PyTorch/XLA's asynchronous
 * loop). TORCHTPU_HOST_CORE=0: always all. */
int tt_parallel_width(void);
void tt_parallel_host_wait_begin(void);
void tt_parallel_host_wait_end(void);

/* External BLAS for large f32 GEMMs (blas_ext.c): `path` names an already
 * loaded library exporting MKL's Fortran sgemm_ and
 * mkl_set_num_threads_local_ (PyTorch's libtorch_cpu.so). Returns 1 when
 * installed; NULL or "" uninstalls. tt_blas_calls counts the products it
 * ran. */
int tt_blas_install(const char *path);
/* Which products the installed BLAS takes: every large plain f32 product
 * (ALL, TORCHTPU_BLAS=mkl), or (AUTO, the default) all of them on a CPU
 * with AVX-512 and only small-batch products on a weight elsewhere
 * (blas_ext.c). */
typedef enum { TT_BLAS_POLICY_AUTO = 0, TT_BLAS_POLICY_ALL = 1 } tt_blas_policy_t;
void tt_blas_set_policy(tt_blas_policy_t policy);
int tt_blas_active(void);
/* Whether the installed library may take some f32 products under the
 * current policy (0 on a CPU where "auto" keeps them all on our kernels). */
int tt_blas_may_take_f32(void);
int64_t tt_blas_calls(void);
/* Packed weights (blas_ext.c): tt_kernel_dot_keyed's b_key names b's
 * bytes (nonzero; the same key promises the same bytes while it lives),
 * so the external BLAS may keep b packed across calls. tt_blas_forget
 * drops what is kept under a key (its buffer is gone). tt_blas_packed_info:
 * packed copies kept, their bytes, products run on them. */
tt_status_t tt_kernel_dot_keyed(const tt_view_t *a, const tt_view_t *b, int trans_a,
                                int trans_b, tt_view_t *out, uint64_t b_key);
void tt_blas_forget(uint64_t b_key);
/* Bytes of packed copies kept at most (default 1 GiB; 0: none). */
void tt_blas_set_packed_limit(int64_t bytes);
void tt_blas_packed_info(int64_t *entries, int64_t *bytes, int64_t *calls);

/* ---- sorting, searching, extra reductions (sort.c, reduce_extra.c) ----
 * argsort: out (I64 or I32, x's shape) holds, along dim, the indices that
 * sort x stably (ascending, or descending when descending != 0); NaN sorts
 * above every number, as torch.sort does. */
tt_status_t tt_kernel_argsort(const tt_view_t *x, int dim, int descending, tt_view_t *out);
/* For each element of values, the insertion index into the last dim of
 * sorted (ATen's lower bound, or upper bound when right): sorted is 1-D
 * (shared by all values) or has values' leading dims (one row per values
 * row). sorted and values have one dtype; out is I64 or I32, values' shape. */
tt_status_t tt_kernel_searchsorted(const tt_view_t *sorted, const tt_view_t *values,
                                   int right, tt_view_t *out);

typedef enum tt_scatter_reduce_e {
  TT_SCATTER_REDUCE_SUM, TT_SCATTER_REDUCE_PROD, TT_SCATTER_REDUCE_MEAN,
  TT_SCATTER_REDUCE_AMAX, TT_SCATTER_REDUCE_AMIN, TT_SCATTER_REDUCE_COUNT
} tt_scatter_reduce_t;
/* out = base.scatter_reduce(dim, idx, src, reduce, include_self): idx and
 * src have base's rank; idx's extent is used (idx <= src in every dim and
 * <= base outside dim). Indices must lie in [0, base.dims[dim]). MEAN of
 * integers floors, as ATen does. */
tt_status_t tt_kernel_scatter_reduce(const tt_view_t *base, int dim, const tt_view_t *idx,
                                     const tt_view_t *src, tt_scatter_reduce_t reduce,
                                     int include_self, tt_view_t *out);

typedef enum tt_cumulative_e {
  TT_CUM_MAX, TT_CUM_MAX_INDEX, TT_CUM_MIN, TT_CUM_MIN_INDEX, TT_CUM_LOGSUMEXP,
  TT_CUM_COUNT
} tt_cumulative_t;
/* Inclusive scans along dim: running max / min (values in x's dtype, or
 * their I64 indices for *_INDEX: the last position of the running extreme,
 * as torch.cummax), and logcumsumexp (floats). out has x's shape. */
tt_status_t tt_kernel_cumulative(tt_cumulative_t op, const tt_view_t *x, int dim,
                                 tt_view_t *out);

/* ---- dense linear algebra (linalg.c) -----------------------------------
 * Batched, in double precision internally: inputs are rank 3 [B, rows,
 * cols] of a float dtype; out is [B, P] of a's dtype, one packed result per
 * batch element (integers such as pivots and info stored as exact floats):
 *   CHOLESKY (a [n,n]; flags[0] upper): L (or U) [n*n], info [1]
 *   LU       (a [m,n]): LU [m*n], pivots (1-based, LAPACK) [k], row order
 *            [m] (A[perm] = L U), info [1]
 *   TRSM     (a [n,n], b [n,r] (batch B or 1); flags: upper, unitriangular,
 *            transpose): X [n*r] with op(a) X = b
 *   GEQRF    (a [m,n]): R and reflectors as LAPACK [m*n], tau [k]
 *   ORGQR    (a [m,n], tau [1,k] per batch): Q's first n columns [m*n]
 *   ORMQR    (a [m,n], tau, c [cm,cn]; flags: left, transpose): op(Q) c or
 *            c op(Q) [cm*cn]
 *   EIGH     (a [n,n]; flags[0] upper triangle): eigenvalues ascending [n],
 *            eigenvectors as columns [n*n]
 *   SVD      (a [m,n]): U [m*m], S descending [k], Vh [n*n] (full)
 * k = min(m, n). tt_linalg_out_size gives P (or -1 for an unknown op). */
typedef enum tt_linalg_op_e {
  TT_LINALG_CHOLESKY, TT_LINALG_LU, TT_LINALG_TRSM, TT_LINALG_GEQRF, TT_LINALG_ORGQR,
  TT_LINALG_ORMQR, TT_LINALG_EIGH, TT_LINALG_SVD, TT_LINALG_COUNT
} tt_linalg_op_t;
int64_t tt_linalg_out_size(tt_linalg_op_t op, const tt_shape_t *a, const tt_shape_t *b,
                           const tt_shape_t *c);
tt_status_t tt_kernel_linalg(tt_linalg_op_t op, const tt_view_t *const *in, int nin,
                             const int64_t *flags, tt_view_t *out);

/* ---- special functions (special.c) --------------------------------------
 * out[i] = f(x[i], y[i]), x, y and out of one shape (float out; y is the
 * second argument: zeta's q, or a polynomial's degree n, truncated). */
typedef enum tt_special_op_e {
  TT_SP_ZETA, TT_SP_CHEB_T, TT_SP_CHEB_U, TT_SP_CHEB_V, TT_SP_CHEB_W,
  TT_SP_SHIFTED_CHEB_T, TT_SP_SHIFTED_CHEB_U, TT_SP_SHIFTED_CHEB_V, TT_SP_SHIFTED_CHEB_W,
  TT_SP_HERMITE_H, TT_SP_HERMITE_HE, TT_SP_LAGUERRE_L, TT_SP_LEGENDRE_P, TT_SP_COUNT
} tt_special_op_t;
tt_status_t tt_kernel_special(tt_special_op_t op, const tt_view_t *x, const tt_view_t *y,
                              tt_view_t *out);

/* ---- discrete Fourier transforms (fft.c) ------------------------------
 * Along the last dim, every leading index a separate transform of length
 * n (any n >= 1: radix 2 for powers of two, a direct sum for short other
 * lengths, Bluestein's chirp-z through a power-of-two transform for long
 * ones). Computed in double precision; every output element is multiplied
 * by scale. With w = exp(-2 pi i / n):
 *  C2C_FORWARD: x C64 [..., n] -> out C64 [..., n], out[k] = sum_j x[j] w^(jk)
 *  C2C_INVERSE: as forward with w^(-jk) (no 1/n: scale carries it)
 *  R2C:         x F32 [..., n] -> out C64 [..., n/2+1], the forward
 *               transform's first n/2+1 terms (the rest are conjugates)
 *  C2R:         x C64 [..., m], m >= n/2+1 -> out F32 [..., n], the real
 *               inverse transform of the Hermitian sequence whose first
 *               n/2+1 terms are x's (the imaginary parts of x[0], and of
 *               x[n/2] for even n, do not contribute), as pocketfft's c2r.
 * Fails with TT_TYPE_ERROR for other dtypes and TT_INVALID_ARGUMENT for
 * shapes that do not match n. */
typedef enum tt_fft_kind_e {
  TT_FFT_C2C_FORWARD, TT_FFT_C2C_INVERSE, TT_FFT_R2C, TT_FFT_C2R, TT_FFT_COUNT
} tt_fft_kind_t;
tt_status_t tt_kernel_fft(tt_fft_kind_t kind, int64_t n, double scale, const tt_view_t *x,
                          tt_view_t *out);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_KERNELS_H_ */
