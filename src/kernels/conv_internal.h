/* Internal to the conv2d kernels (conv.c: geometry, backward GEMM paths,
 * entry points; conv_fwd.c: forward GEMM path on phase planes;
 * conv_batched.c: all three passes with several images per GEMM, for small
 * output planes; conv_direct.c: direct loops for one input channel per
 * group and for F64). Not part of the public API. */
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
  int64_t chunk_imgs;   /* batched path: images per GEMM */
  float *partials;      /* BWD_W: [nparts, O*K] */
  _Atomic int failed;   /* set by a range that could not allocate */
  const tt_epilogue_t *epi; /* FWD: run over output ranges once final (or NULL) */
} tt_conv_ctx_t;

/* Runs c's epilogue (if any) over output elements [begin, end): in
 * parallel when called outside the pool, inline inside it. */
void tt_conv_run_epilogue(const tt_conv_ctx_t *c, int64_t begin, int64_t end);
/* The same over `rows` runs of `width` elements, `stride` apart, from base. */
void tt_conv_run_epilogue_rows(const tt_conv_ctx_t *c, int64_t base, int64_t rows,
                               int64_t stride, int64_t width);

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

/* Dense path (conv_dense.c): whether the forward (a = x) or backward-input
 * (a = grad_out) pass of g reads every input position from every output
 * position (f32, one group, planes of at most 16 positions), and running
 * it as one GEMM over the batch (c->kind FWD or BWD_IN). */
int tt_conv_dense_ok(const tt_conv_geom_t *g, const tt_view_t *a, const tt_view_t *w,
                     const tt_view_t *out);
tt_status_t tt_conv_dense_run(const tt_conv_ctx_t *c);
/* The weight gradient on such a plane (a = grad_out, w = x): one GEMM per
 * (output, input) position pair over the batch. */
tt_status_t tt_conv_dense_bwd_w(const tt_conv_ctx_t *c);

/* Parallel ranges of the direct paths (conv_direct.c). Items: (n, o)
 * output planes for FWD, (n, c) input planes for BWD_IN, o for BWD_W.
 * tt_conv_direct_range_fn picks the one-channel-per-group f32-class
 * variant (phase planes for the forward, zero-padded planes for stride-1
 * backward passes); tt_conv_f64_range handles
 * F64 for any grouping. */
tt_range_fn_t tt_conv_direct_range_fn(const tt_conv_geom_t *g, tt_conv_kind_t kind);

/* Phase planes (conv_fwd.c): for stride (sh, sw) the zero-padded input
 * plane of a channel split into the sh*sw planes of rows a, a+sh, ... and
 * columns b, b+sw, ... (Hq x Wq each), built only for the phases some tap
 * reads. Output position (oh, ow) is column oh*Wq + ow (ow >= OW:
 * scratch); tap k of the im2col matrix reads xq + off[k] + that column. */
#define TT_CONV_SLACK 64 /* zero floats after the planes for vector overreads */
typedef struct tt_conv_plan_s {
  const tt_conv_geom_t *g;
  int64_t Hq, Wq, plane; /* phase plane rows, columns, floats */
  int64_t nph;           /* built phases per channel */
  int64_t *phase_id;     /* [sh*sw]: index among built phases, or -1 */
  int64_t *off;          /* [K]: im2col row k starts at xq + off[k] */
  int64_t size;          /* floats of the phase buffer (with slack) */
  int in_place;          /* 1x1/1 f32, no padding: xq is x itself */
  int avx512;            /* the CPU runs AVX-512F */
} tt_conv_plan_t;

/* Fills p for g (x: the input, for its dtype); allow_in_place lets a 1x1 /
 * stride 1 / unpadded f32 input serve as its own phase buffer. Returns 0
 * if it cannot allocate; release with tt_conv_plan_free. */
int tt_conv_plan_init(const tt_conv_geom_t *g, const tt_view_t *x,
                      int allow_in_place, tt_conv_plan_t *p);
void tt_conv_plan_free(tt_conv_plan_t *p);
/* Writes the built phase planes of the Cg channels at element offset xoff
 * of x into xq (p->size floats, slack zeroed). */
void tt_conv_build_phases(const tt_conv_plan_t *p, const tt_view_t *x,
                          int64_t xoff, float *xq);

/* Tests: on = 1 makes the forward paths take their portable (non-AVX-512)
 * packing, gather and depthwise loops; 0 restores CPU detection. */
void tt_conv_force_portable_for_test(int on);
/* 1 if the CPU runs AVX-512F and no test forced the portable loops. */
int tt_conv_cpu_avx512(void);

/* Forward of images [begin, end) for the f32 class with Cg > 1 through the
 * GEMM (conv_fwd.c); sets ctx->failed if it cannot allocate. */
void tt_conv_forward_range(void *arg, int64_t begin, int64_t end);
void tt_conv_f64_range(void *arg, int64_t begin, int64_t end);

/* Batched path (conv_batched.c), for the f32 class with Cg > 1.
 * tt_conv_use_batched says whether g takes it (several images and an
 * output plane of at most 128 positions; with `wide`, any spatial kernel;
 * unless a test forced it);
 * tt_conv_batch_images is the chunk size to store in ctx->chunk_imgs
 * (images per GEMM, >= 1, fixed by g and `wide` alone so results do not
 * depend on the thread count; wide: an f32 forward the external BLAS
 * takes, which may use a larger col). tt_conv_batched_range runs FWD or BWD_IN over image
 * chunks [begin, end); tt_conv_batched_w_range runs BWD_W into
 * ctx->partials [begin, end) (partial q sums chunks q, q + nparts, ...).
 * Both set ctx->failed if they cannot allocate. */
int tt_conv_use_batched(const tt_conv_geom_t *g, int wide);
/* 1 if every kernel tap reads inside the input at some output position
 * (else the batched path leaves the others out of its GEMMs). */
int tt_conv_all_taps_read_input(const tt_conv_geom_t *g);
int64_t tt_conv_batch_images(const tt_conv_geom_t *g, int wide);
void tt_conv_batched_range(void *arg, int64_t begin, int64_t end);
void tt_conv_batched_w_range(void *arg, int64_t begin, int64_t end);
/* Tests: mode 1 sends every f32-class Cg > 1 convolution down the batched
 * path, 0 none, -1 restores the size rule. */
void tt_conv_force_batched_for_test(int mode);
/* Tests: on = 1 makes stride-1 backward-input take the col2im path
 * (W^T * grad_out, then scatter) instead of the forward convolution with
 * the flipped kernel; 0 restores the default. */
void tt_conv_force_col2im_for_test(int on);
/* Tests: off = 1 keeps every convolution off the dense path
 * (conv_dense.c), so the paths it would take over stay covered. */
void tt_conv_force_no_dense_for_test(int off);

#endif /* TORCHTPU_KERNELS_CONV_INTERNAL_H_ */
