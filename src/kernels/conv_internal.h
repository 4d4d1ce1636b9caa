/* Internal to the conv2d kernels (conv.c: geometry, GEMM paths, entry
 * points; conv_direct.c: direct loops for one input channel per group and
 * for F64). Not part of the public API. */
#ifndef TORCHTPU_KERNELS_CONV_INTERNAL_H_
#define TORCHTPU_KERNELS_CONV_INTERNAL_H_

#include "kernels/kernel_util.h"

/* Shapes and parameters of one convolution, validated. */
typedef struct tt_conv_geom_s {
  int64_t N, C, H, W, O, KH, KW, OH, OW, G, Cg, Og, K;
  int64_t sh, sw, ph, pw, dh, dw;
} tt_conv_geom_t;

typedef enum { TT_CONV_FWD, TT_CONV_BWD_IN, TT_CONV_BWD_W } tt_conv_kind_t;

/* One call of a conv2d kernel, shared by its parallel ranges. */
typedef struct tt_conv_ctx_s {
  tt_conv_kind_t kind;
  tt_conv_geom_t g;
  const tt_view_t *x;   /* input (FWD, BWD_W) */
  const tt_view_t *w;   /* weight (FWD, BWD_IN) */
  const tt_view_t *go;  /* grad_out (BWD_*) */
  tt_view_t *out;       /* out / grad_x / grad_w */
  int inner_parallel;   /* GEMMs may use the pool */
  int64_t nparts;       /* BWD_W: partial buffers */
  float *partials;      /* BWD_W: [nparts, O*K] */
  _Atomic int failed;   /* set by a range that could not allocate */
} tt_conv_ctx_t;

/* Valid output range [lo, hi) along one axis for kernel tap offset `off`
 * (= tap*dilation - pad): positions o whose input index o*s + off is in
 * [0, len). */
static inline void tt_conv_range(int64_t out_len, int64_t s, int64_t off,
                                 int64_t len, int64_t *lo, int64_t *hi) {
  int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t h = len - off <= 0 ? 0 : (len - off - 1) / s + 1;
  *lo = tt_min64(l, out_len);
  *hi = tt_max64(*lo, tt_min64(h, out_len));
}

/* Parallel ranges of the direct paths (conv_direct.c). Items: (n, o)
 * output planes for FWD, (n, c) input planes for BWD_IN, o for BWD_W.
 * tt_conv_direct_range_fn picks the one-channel-per-group f32-class
 * variant (zero-padded planes for stride 1); tt_conv_f64_range handles
 * F64 for any grouping. */
tt_range_fn_t tt_conv_direct_range_fn(const tt_conv_geom_t *g);
void tt_conv_f64_range(void *arg, int64_t begin, int64_t end);

#endif /* TORCHTPU_KERNELS_CONV_INTERNAL_H_ */
