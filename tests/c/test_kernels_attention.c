/* Fused attention kernels (src/kernels/attention.c) against a plain
 * double-precision reference: forward output and logsumexp, and the three
 * gradients, over causal and plain problems, L != S, head sizes that are
 * not multiples of the micro-tile, masks broadcast in every way the op
 * allows (with fully masked rows), F32 and BF16, and shape errors. */
#include "test_harness.h"

typedef struct ref_s {
  int64_t B, H, L, S, E, Ev;
  int causal;
  double scale;
} ref_t;

static int64_t mask_index(const tensor_t *m, const ref_t *r, int64_t b, int64_t h, int64_t i,
                          int64_t j) {
  const int64_t *d = m->v.shape.dims;
  int64_t idx[4] = {d[0] == 1 ? 0 : b, d[1] == 1 ? 0 : h, d[2] == 1 ? 0 : i,
                    d[3] == 1 ? 0 : j};
  (void)r;
  return ((idx[0] * d[1] + idx[1]) * d[2] + idx[2]) * d[3] + idx[3];
}

/* Probabilities of row i of problem (b, h) into p[S]; returns the row's
 * logsumexp (0 when no key is visible, p all 0). */
static double ref_probs(const ref_t *r, const tensor_t *q, const tensor_t *k,
                        const tensor_t *m, int64_t b, int64_t h, int64_t i, double *p) {
  int64_t bh = b * r->H + h;
  double mx = -INFINITY;
  for (int64_t j = 0; j < r->S; ++j) {
    double s = 0;
    for (int64_t e = 0; e < r->E; ++e)
      s += tget(q, (bh * r->L + i) * r->E + e) * tget(k, (bh * r->S + j) * r->E + e);
    s *= r->scale;
    if (m) s += tget(m, mask_index(m, r, b, h, i, j));
    if (r->causal && j > i) s = -INFINITY;
    p[j] = s;
    if (s > mx) mx = s;
  }
  if (mx == -INFINITY) {
    for (int64_t j = 0; j < r->S; ++j) p[j] = 0;
    return 0;
  }
  double sum = 0;
  for (int64_t j = 0; j < r->S; ++j) sum += p[j] = exp(p[j] - mx);
  for (int64_t j = 0; j < r->S; ++j) p[j] /= sum;
  return mx + log(sum);
}

/* out, lse and the gradients for cotangent go, in double. */
static void reference(const ref_t *r, const tensor_t *q, const tensor_t *k, const tensor_t *v,
                      const tensor_t *m, const tensor_t *go, double *out, double *lse,
                      double *gq, double *gk, double *gv) {
  double *p = malloc(sizeof(double) * (size_t)r->S), *dp = malloc(sizeof(double) * (size_t)r->S);
  memset(gk, 0, sizeof(double) * (size_t)(r->B * r->H * r->S * r->E));
  memset(gv, 0, sizeof(double) * (size_t)(r->B * r->H * r->S * r->Ev));
  for (int64_t b = 0; b < r->B; ++b)
    for (int64_t h = 0; h < r->H; ++h)
      for (int64_t i = 0; i < r->L; ++i) {
        int64_t bh = b * r->H + h, row = bh * r->L + i;
        lse[row] = ref_probs(r, q, k, m, b, h, i, p);
        for (int64_t e = 0; e < r->Ev; ++e) {
          double o = 0;
          for (int64_t j = 0; j < r->S; ++j) o += p[j] * tget(v, (bh * r->S + j) * r->Ev + e);
          out[row * r->Ev + e] = o;
        }
        double dsum = 0;
        for (int64_t j = 0; j < r->S; ++j) {
          double s = 0;
          for (int64_t e = 0; e < r->Ev; ++e)
            s += tget(go, row * r->Ev + e) * tget(v, (bh * r->S + j) * r->Ev + e);
          dp[j] = s;
          dsum += p[j] * s;
        }
        for (int64_t j = 0; j < r->S; ++j) {
          double ds = p[j] * (dp[j] - dsum) * r->scale;
          for (int64_t e = 0; e < r->E; ++e) {
            gq[row * r->E + e] += ds * tget(k, (bh * r->S + j) * r->E + e);
            gk[(bh * r->S + j) * r->E + e] += ds * tget(q, row * r->E + e);
          }
          for (int64_t e = 0; e < r->Ev; ++e)
            gv[(bh * r->S + j) * r->Ev + e] += p[j] * tget(go, row * r->Ev + e);
        }
      }
  free(p);
  free(dp);
}

static double max_err(const tensor_t *t, const double *want) {
  double worst = 0;
  for (int64_t i = 0; i < t->n; ++i) {
    double e = fabs(tget(t, i) - want[i]) / (1.0 + fabs(want[i]));
    if (!(e <= worst)) worst = e; /* NaN counts as the worst */
  }
  return worst;
}

/* Runs forward and backward on one problem and compares everything.
 * mdims: the mask's dims (NULL: no mask); masked_row >= 0 hides that query
 * row's every key (when the mask's L dim is not broadcast). */
static void run_case(tt_dtype_t dt, ref_t r, const int64_t *mdims, int64_t masked_row) {
  int64_t qd[4] = {r.B, r.H, r.L, r.E}, kd[4] = {r.B, r.H, r.S, r.E};
  int64_t vd[4] = {r.B, r.H, r.S, r.Ev}, od[4] = {r.B, r.H, r.L, r.Ev}, ld[3] = {r.B, r.H, r.L};
  tensor_t q = tensor_new(dt, 4, qd), k = tensor_new(dt, 4, kd), v = tensor_new(dt, 4, vd);
  tensor_t go = tensor_new(dt, 4, od), out = tensor_new(dt, 4, od), lse = tensor_new(TT_F32, 3, ld);
  tensor_t gq = tensor_new(dt, 4, qd), gk = tensor_new(dt, 4, kd), gv = tensor_new(dt, 4, vd);
  tensor_fill_random(&q, -1.5, 1.5);
  tensor_fill_random(&k, -1.5, 1.5);
  tensor_fill_random(&v, -1, 1);
  tensor_fill_random(&go, -1, 1);
  tensor_t m;
  const tensor_t *mp = NULL;
  if (mdims) {
    m = tensor_new(TT_F32, 4, mdims);
    for (int64_t i = 0; i < m.n; ++i)
      tset(&m, i, rnd_uniform(0, 1) < 0.2 ? -INFINITY : rnd_uniform(-1, 1));
    if (masked_row >= 0 && mdims[2] != 1)
      for (int64_t i = 0; i < m.n; ++i)
        if ((i / mdims[3]) % mdims[2] == masked_row) tset(&m, i, -INFINITY);
    mp = &m;
  }
  size_t nq = (size_t)q.n, nk = (size_t)k.n, nv = (size_t)v.n, no = (size_t)out.n;
  double *w_out = malloc(sizeof(double) * no), *w_lse = malloc(sizeof(double) * (size_t)lse.n);
  double *w_gq = calloc(nq, sizeof(double)), *w_gk = malloc(sizeof(double) * nk);
  double *w_gv = malloc(sizeof(double) * nv);
  reference(&r, &q, &k, &v, mp, &go, w_out, w_lse, w_gq, w_gk, w_gv);
  double tol = dt == TT_F32 ? 2e-5 : 2e-2;
  char what[160];
  snprintf(what, sizeof what, "%s [%lld,%lld,%lld,%lld] S %lld Ev %lld causal %d mask %s",
           tt_dtype_name(dt), (long long)r.B, (long long)r.H, (long long)r.L, (long long)r.E,
           (long long)r.S, (long long)r.Ev, r.causal, mdims ? "yes" : "no");
  if (CHECK_OK(tt_kernel_attention(&q.v, &k.v, &v.v, mp ? &mp->v : NULL, r.causal, r.scale,
                                   &out.v, &lse.v), what)) {
    CHECK(max_err(&out, w_out) < tol, "%s: out error %g", what, max_err(&out, w_out));
    CHECK(max_err(&lse, w_lse) < 2e-5 * (dt == TT_F32 ? 1 : 100), "%s: lse error %g", what,
          max_err(&lse, w_lse));
  }
  if (CHECK_OK(tt_kernel_attention_backward(&go.v, &q.v, &k.v, &v.v, mp ? &mp->v : NULL,
                                            r.causal, r.scale, &gq.v, &gk.v, &gv.v), what)) {
    CHECK(max_err(&gq, w_gq) < tol, "%s: grad_q error %g", what, max_err(&gq, w_gq));
    CHECK(max_err(&gk, w_gk) < tol, "%s: grad_k error %g", what, max_err(&gk, w_gk));
    CHECK(max_err(&gv, w_gv) < tol, "%s: grad_v error %g", what, max_err(&gv, w_gv));
  }
  if (masked_row >= 0 && mdims && mdims[2] != 1) {
    /* A row that sees no key: zeros and logsumexp 0, as PyTorch's CPU kernel. */
    int ok = 1;
    for (int64_t e = 0; e < r.Ev; ++e) ok &= tget(&out, masked_row * r.Ev + e) == 0.0;
    CHECK(ok && tget(&lse, masked_row) == 0.0, "%s: fully masked row", what);
  }
  free(w_out);
  free(w_lse);
  free(w_gq);
  free(w_gk);
  free(w_gv);
  tensor_t *all[9] = {&q, &k, &v, &go, &out, &lse, &gq, &gk, &gv};
  for (int i = 0; i < 9; ++i) tensor_free(all[i]);
  if (mdims) tensor_free(&m);
}

static void test_attention_values(void) {
  /* The decoder's shape (a 64-row block, 32-wide tiles), causal and not. */
  run_case(TT_F32, (ref_t){2, 2, 64, 64, 32, 32, 1, 0.17677669529}, NULL, -1);
  run_case(TT_F32, (ref_t){2, 2, 64, 64, 32, 32, 0, 0.17677669529}, NULL, -1);
  /* More rows than a block, S < L and S > L, odd head sizes, E != Ev. */
  run_case(TT_F32, (ref_t){1, 3, 70, 33, 8, 8, 1, 0.35}, NULL, -1);
  run_case(TT_F32, (ref_t){1, 2, 37, 100, 5, 40, 1, 0.5}, NULL, -1);
  run_case(TT_F32, (ref_t){2, 1, 129, 67, 16, 7, 0, -0.25}, NULL, -1);
  run_case(TT_F32, (ref_t){1, 1, 1, 1, 1, 1, 1, 1.0}, NULL, -1);
  /* Masks: full, [L, S] shared, a key-padding [B, 1, 1, S], per head. */
  int64_t full[4] = {2, 3, 9, 11}, ls[4] = {1, 1, 9, 11}, pad[4] = {2, 1, 1, 11};
  int64_t head[4] = {1, 3, 1, 11};
  run_case(TT_F32, (ref_t){2, 3, 9, 11, 6, 6, 0, 0.4}, full, 4);
  run_case(TT_F32, (ref_t){2, 3, 9, 11, 6, 6, 0, 0.4}, ls, 0);
  run_case(TT_F32, (ref_t){2, 3, 9, 11, 6, 6, 1, 0.4}, ls, 8);
  run_case(TT_F32, (ref_t){2, 3, 9, 11, 6, 6, 0, 0.4}, pad, -1);
  run_case(TT_F32, (ref_t){2, 3, 9, 11, 6, 6, 0, 0.4}, head, -1);
  /* Narrow storage, computed in f32. */
  run_case(TT_BF16, (ref_t){2, 2, 64, 64, 32, 32, 1, 0.17677669529}, NULL, -1);
  int64_t ls2[4] = {1, 1, 19, 23};
  run_case(TT_BF16, (ref_t){1, 2, 19, 23, 12, 12, 0, 0.3}, ls2, 3);
  run_case(TT_F16, (ref_t){1, 2, 40, 40, 16, 16, 1, 0.25}, NULL, -1);
}

static void test_attention_errors(void) {
  int64_t qd[4] = {1, 2, 4, 8}, kd[4] = {1, 2, 5, 6}, bad_m[4] = {1, 2, 3, 5};
  tensor_t q = tensor_new(TT_F32, 4, qd), k = tensor_new(TT_F32, 4, kd);
  tensor_t o = tensor_new(TT_F32, 4, qd), m = tensor_new(TT_F32, 4, bad_m);
  tensor_t qi = tensor_new(TT_I64, 4, qd);
  tensor_fill_random(&q, -1, 1);
  tensor_fill_random(&k, -1, 1);
  tensor_fill_random(&m, -1, 1);
  /* Key head size 6 against the query's 8. */
  CHECK_CODE(tt_kernel_attention(&q.v, &k.v, &k.v, NULL, 0, 1.0, &o.v, NULL),
             TT_INVALID_ARGUMENT, "head sizes differ");
  /* Integer queries. */
  CHECK_CODE(tt_kernel_attention(&qi.v, &qi.v, &qi.v, NULL, 0, 1.0, &o.v, NULL),
             TT_TYPE_ERROR, "int64 query");
  /* A mask whose L dim (3) is neither 1 nor 4. */
  CHECK_CODE(tt_kernel_attention(&q.v, &q.v, &q.v, &m.v, 0, 1.0, &o.v, NULL),
             TT_INVALID_ARGUMENT, "mask does not broadcast");
  tensor_t *all[5] = {&q, &k, &o, &m, &qi};
  for (int i = 0; i < 5; ++i) tensor_free(all[i]);
}

/* ---- strided operands (tt_kernel_attention_ex) -------------------------------
 * The layouts the graph pass gives the op in a multi-head attention: q, k
 * and v read in place from one [L, B, 3, H, E] projection, out and the
 * gradient of out in [L, B, H, E], the three gradients written into one
 * [L, B, 3, H, E] buffer. Results equal the dense entry points' bit for
 * bit (the same products on the same values); also q, k, v in separate
 * [L, B, H, E] buffers with L != S, a mask, BF16, and a layout that
 * reaches past its buffer. keep: the forward keeps its probabilities for
 * the backward (buffer filled with NaN first, so a read of an entry the
 * forward did not write would show), strided and dense, with the same
 * results bit for bit. */
static int64_t lbhe(int64_t B, int64_t H, int64_t rows, int64_t cols, int64_t b, int64_t h,
                    int64_t r, int64_t c, int64_t which, int64_t nwhich) {
  (void)rows;
  return (((r * B + b) * nwhich + which) * H + h) * cols + c;
}

static float *nan_probs(int64_t B, int64_t H, int64_t L, int64_t S) {
  size_t n = (size_t)(B * H * L * tt_attention_probs_ld(S));
  float *p = malloc((n + 1) * sizeof(float));
  for (size_t i = 0; i < n; ++i) p[i] = NAN;
  return p;
}

static void run_strided(tt_dtype_t dt, int64_t B, int64_t H, int64_t L, int64_t S, int64_t E,
                        int causal, int packed, int with_mask, int keep) {
  int64_t qd[4] = {B, H, L, E}, kd[4] = {B, H, S, E}, od[4] = {B, H, L, E};
  tensor_t q = tensor_new(dt, 4, qd), k = tensor_new(dt, 4, kd), v = tensor_new(dt, 4, kd);
  tensor_t go = tensor_new(dt, 4, od), out = tensor_new(dt, 4, od);
  tensor_t gq = tensor_new(dt, 4, qd), gk = tensor_new(dt, 4, kd), gv = tensor_new(dt, 4, kd);
  tensor_fill_random(&q, -1.5, 1.5);
  tensor_fill_random(&k, -1.5, 1.5);
  tensor_fill_random(&v, -1, 1);
  tensor_fill_random(&go, -1, 1);
  int64_t md[4] = {1, 1, L, S};
  tensor_t m = tensor_new(TT_F32, 4, md);
  tensor_fill_random(&m, -1, 1);
  const tt_view_t *mv = with_mask ? &m.v : NULL;
  double scale = 1.0 / sqrt((double)E);
  /* Buffers: packed [L, B, 3, H, E] (L == S) or one [rows, B, H, E] each. */
  int64_t nw = packed ? 3 : 1;
  int64_t yd[1] = {L * B * 3 * H * E}, ld1[1] = {L * B * H * E}, sd1[1] = {S * B * H * E};
  tensor_t y = tensor_new(dt, 1, yd), yq = tensor_new(dt, 1, ld1), yk = tensor_new(dt, 1, sd1);
  tensor_t yv = tensor_new(dt, 1, sd1), yo = tensor_new(dt, 1, ld1), ygo = tensor_new(dt, 1, ld1);
  tensor_t yg = tensor_new(dt, 1, yd), ygq = tensor_new(dt, 1, ld1), ygk = tensor_new(dt, 1, sd1);
  tensor_t ygv = tensor_new(dt, 1, sd1);
  const tensor_t *src[3] = {&q, &k, &v};
  tensor_t *dst3[3] = {&yq, &yk, &yv};
  for (int w = 0; w < 3; ++w) {
    int64_t rows = w == 0 ? L : S;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < E; ++c) {
            double val = tget(src[w], ((b * H + h) * rows + r) * E + c);
            if (packed) tset(&y, lbhe(B, H, rows, E, b, h, r, c, w, 3), val);
            else tset(dst3[w], lbhe(B, H, rows, E, b, h, r, c, 0, 1), val);
          }
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < L; ++r)
        for (int64_t c = 0; c < E; ++c)
          tset(&ygo, lbhe(B, H, L, E, b, h, r, c, 0, 1), tget(&go, ((b * H + h) * L + r) * E + c));
  tt_att_geom_t g = {.B = B, .H = H, .L = L, .S = S, .E = E, .Ev = E};
  for (int i = 0; i < 8; ++i) {
    int in_packed = packed && (i <= 2 || i >= 5);
    int64_t which = i <= 2 ? i : i >= 5 ? i - 5 : 0;
    int64_t ww = in_packed ? nw : 1;
    g.lay[i] = (tt_att_layout_t){in_packed ? which * H * E : 0, ww * H * E, E, B * ww * H * E};
  }
  char what[160];
  snprintf(what, sizeof what, "strided %s B%lld H%lld L%lld S%lld E%lld causal %d %s%s%s",
           tt_dtype_name(dt), (long long)B, (long long)H, (long long)L, (long long)S,
           (long long)E, causal, packed ? "packed" : "separate", with_mask ? " mask" : "",
           keep ? " kept probabilities" : "");
  CHECK_OK(tt_kernel_attention(&q.v, &k.v, &v.v, mv, causal, scale, &out.v, NULL), what);
  CHECK_OK(tt_kernel_attention_backward(&go.v, &q.v, &k.v, &v.v, mv, causal, scale, &gq.v,
                                        &gk.v, &gv.v), what);
  tt_view_t *qv = packed ? &y.v : &yq.v, *kv = packed ? &y.v : &yk.v, *vv = packed ? &y.v : &yv.v;
  tt_view_t *gqv = packed ? &yg.v : &ygq.v, *gkv = packed ? &yg.v : &ygk.v;
  tt_view_t *gvv = packed ? &yg.v : &ygv.v;
  float *probs = keep ? nan_probs(B, H, L, S) : NULL;
  CHECK_OK(tt_kernel_attention_ex(qv, kv, vv, mv, causal, scale, &yo.v, &g, probs), what);
  CHECK_OK(tt_kernel_attention_backward_ex(&ygo.v, qv, kv, vv, mv, causal, scale, gqv, gkv, gvv,
                                           &g, probs), what);
  const tensor_t *dense[4] = {&out, &gq, &gk, &gv};
  const tensor_t *strided[4] = {&yo, packed ? &yg : &ygq, packed ? &yg : &ygk, packed ? &yg : &ygv};
  const int64_t which4[4] = {0, 0, 1, 2}, nw4[4] = {1, nw, nw, nw};
  int bad = 0;
  for (int t = 0; t < 4; ++t) {
    int64_t rows = t <= 1 ? L : S;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < E; ++c) {
            double want = tget(dense[t], ((b * H + h) * rows + r) * E + c);
            int64_t wi = packed && t > 0 ? which4[t] : 0;
            double got = tget(strided[t], lbhe(B, H, rows, E, b, h, r, c, wi, packed && t > 0 ? nw4[t] : 1));
            bad += !(got == want);
          }
  }
  CHECK(bad == 0, "%s: %d values differ from the dense kernels'", what, bad);
  if (keep) {
    /* The dense operands, with kept probabilities. */
    tensor_t out2 = tensor_new(dt, 4, od), gq2 = tensor_new(dt, 4, qd);
    tensor_t gk2 = tensor_new(dt, 4, kd), gv2 = tensor_new(dt, 4, kd);
    free(probs);
    probs = nan_probs(B, H, L, S);
    CHECK_OK(tt_kernel_attention_ex(&q.v, &k.v, &v.v, mv, causal, scale, &out2.v, NULL, probs),
             what);
    CHECK_OK(tt_kernel_attention_backward_ex(&go.v, &q.v, &k.v, &v.v, mv, causal, scale, &gq2.v,
                                             &gk2.v, &gv2.v, NULL, probs), what);
    const tensor_t *want[4] = {&out, &gq, &gk, &gv}, *got[4] = {&out2, &gq2, &gk2, &gv2};
    int bad2 = 0;
    for (int t = 0; t < 4; ++t)
      for (int64_t i = 0; i < tt_view_numel(&want[t]->v); ++i)
        bad2 += !(tget(got[t], i) == tget(want[t], i));
    CHECK(bad2 == 0, "%s: %d dense values differ with kept probabilities", what, bad2);
    tensor_free(&out2);
    tensor_free(&gq2);
    tensor_free(&gk2);
    tensor_free(&gv2);
  }
  free(probs);
  /* A layout one row too long for its buffer. */
  tt_att_geom_t g2 = g;
  g2.lay[0].off += g2.lay[0].sr;
  CHECK_CODE(tt_kernel_attention_ex(qv, kv, vv, mv, causal, scale, &yo.v, &g2, NULL),
             TT_INVALID_ARGUMENT, "layout past its buffer");
  tensor_t *all[19] = {&q, &k, &v, &go, &out, &gq, &gk, &gv, &m, &y, &yq, &yk, &yv, &yo, &ygo,
                       &yg, &ygq, &ygk, &ygv};
  for (int i = 0; i < 19; ++i) tensor_free(all[i]);
}

static void test_attention_strided(void) {
  for (int keep = 0; keep < 2; ++keep) {
    run_strided(TT_F32, 3, 4, 70, 70, 32, 1, 1, 0, keep);
    run_strided(TT_F32, 2, 3, 37, 37, 24, 0, 1, 1, keep);
    run_strided(TT_F32, 2, 2, 37, 50, 24, 0, 0, 1, keep);
    run_strided(TT_F32, 2, 2, 50, 37, 16, 1, 0, 0, keep);
    run_strided(TT_BF16, 2, 2, 33, 33, 32, 1, 1, 0, keep);
    run_strided(TT_BF16, 1, 2, 20, 29, 8, 0, 0, 1, keep);
  }
  run_strided(TT_F32, 2, 2, 130, 130, 32, 1, 0, 0, 1); /* three query blocks */
}

/* An unmasked row of at most 64 keys takes the AVX-512 register softmax
 * (tt_att_softmax_row16) where the CPU has it; with an all-zero additive
 * mask the same scores take the general loop. Both must give the same
 * bits, forward (output, logsumexp) and backward, over rows of 1-64 keys
 * (causal) and whole short rows, with scores large enough to flush some
 * exps and a -inf column. */
static void test_attention_fast_row_softmax(void) {
  const int64_t shapes[][4] = {{2, 3, 64, 64}, {1, 2, 23, 23}, {2, 2, 17, 50}, {1, 1, 70, 70}};
  for (int si = 0; si < 4; ++si) {
    for (int causal = 0; causal < 2; ++causal) {
      int64_t B = shapes[si][0], H = shapes[si][1], L = shapes[si][2], S = shapes[si][3], E = 8;
      int64_t qd[4] = {B, H, L, E}, kd[4] = {B, H, S, E}, ld[3] = {B, H, L}, md[4] = {1, 1, L, S};
      tensor_t q = tensor_new(TT_F32, 4, qd), k = tensor_new(TT_F32, 4, kd);
      tensor_t v = tensor_new(TT_F32, 4, kd), go = tensor_new(TT_F32, 4, qd);
      tensor_t m = tensor_new(TT_F32, 4, md);
      tensor_t o[2] = {tensor_new(TT_F32, 4, qd), tensor_new(TT_F32, 4, qd)};
      tensor_t l[2] = {tensor_new(TT_F32, 3, ld), tensor_new(TT_F32, 3, ld)};
      tensor_t g[2][3];
      tensor_fill_random(&q, -30, 30);
      tensor_fill_random(&k, -3, 3);
      tensor_fill_random(&v, -1, 1);
      tensor_fill_random(&go, -1, 1);
      memset(m.v.data, 0, (size_t)(L * S) * sizeof(float));
      for (int64_t b = 0; b < B * H; ++b) ((float *)k.v.data)[(b * S + S / 2) * E] = -INFINITY;
      for (int w = 0; w < 2; ++w) {
        const tt_view_t *mv = w ? &m.v : NULL;
        for (int i = 0; i < 3; ++i) g[w][i] = tensor_new(TT_F32, 4, i ? kd : qd);
        CHECK_OK(tt_kernel_attention(&q.v, &k.v, &v.v, mv, causal, 0.3, &o[w].v, &l[w].v),
                 "fast row softmax forward");
        CHECK_OK(tt_kernel_attention_backward(&go.v, &q.v, &k.v, &v.v, mv, causal, 0.3,
                                              &g[w][0].v, &g[w][1].v, &g[w][2].v),
                 "fast row softmax backward");
      }
      int bad = memcmp(o[0].v.data, o[1].v.data, (size_t)(B * H * L * E) * sizeof(float)) != 0;
      bad |= memcmp(l[0].v.data, l[1].v.data, (size_t)(B * H * L) * sizeof(float)) != 0;
      for (int i = 0; i < 3; ++i)
        bad |= memcmp(g[0][i].v.data, g[1][i].v.data,
                      (size_t)tt_view_numel(&g[0][i].v) * sizeof(float)) != 0;
      CHECK(!bad, "B%lld H%lld L%lld S%lld causal %d: unmasked and zero-masked rows differ",
            (long long)B, (long long)H, (long long)L, (long long)S, causal);
      tensor_t *all[5] = {&q, &k, &v, &go, &m};
      for (int i = 0; i < 5; ++i) tensor_free(all[i]);
      for (int w = 0; w < 2; ++w) {
        tensor_free(&o[w]);
        tensor_free(&l[w]);
        for (int i = 0; i < 3; ++i) tensor_free(&g[w][i]);
      }
    }
  }
}

int main(void) {
  test_attention_values();
  test_attention_fast_row_softmax();
  test_attention_errors();
  test_attention_strided();
  return test_summary();
}
