/* StableHLO lowering of ATTENTION and ATTENTION_BWD: the ops the emitted
 * text is made of (with and without mask, causal or not, logsumexp,
 * half-precision operands), and, when TORCHTPU_PJRT_CPU_PLUGIN names
 * XLA's CPU PJRT plugin, the modules compiled (the StableHLO verifier) and
 * executed, their values compared with a plain double-precision reference
 * computed here. Under the sanitizer build run it with
 * ASAN_OPTIONS=alloc_dealloc_mismatch=0 (the plugin is not built with the
 * sanitizer). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/pjrt.h"
#include "torchtpu/stablehlo.h"

/* One attention problem: sizes, options and host data (f32). */
typedef struct att_case_s {
  const char *name;
  int64_t B, H, L, S, E, Ev;
  int64_t mdims[4]; /* mask dims, each 1 or the full size; mdims[0] == 0: no mask */
  int causal;
  double scale;
  tt_dtype_t dtype; /* of q, k, v, grad_out (the mask stays f32) */
  float *q, *k, *v, *mask, *go;
} att_case_t;

static tt_shape_t shape4(int64_t a, int64_t b, int64_t c, int64_t d) {
  tt_shape_t s = {4, {a, b, c, d}};
  return s;
}

static int64_t numel4(const tt_shape_t *s) {
  int64_t n = 1;
  for (int d = 0; d < s->rank; ++d) n *= s->dims[d];
  return n;
}

/* The graph of a case: params q, k, v[, mask], grad_out; outputs the
 * attention output, its logsumexp and the three gradients
 * (ATTENTION_BWD). g points into the struct's own arrays. */
typedef struct att_graph_s {
  tt_instr_t in[8];
  int32_t ops_fwd[4], ops_bwd[5];
  int32_t inputs[5], outputs[3];
  tt_graph_t g;
} att_graph_t;

static void att_build(const att_case_t *c, att_graph_t *ag) {
  memset(ag, 0, sizeof(*ag));
  tt_instr_t *in = ag->in;
  int has_mask = c->mdims[0] != 0;
  int n = 0;
  tt_shape_t qs = shape4(c->B, c->H, c->L, c->E), ks = shape4(c->B, c->H, c->S, c->E);
  tt_shape_t vs = shape4(c->B, c->H, c->S, c->Ev), os = shape4(c->B, c->H, c->L, c->Ev);
  const tt_shape_t *ps[5] = {&qs, &ks, &vs, NULL, &os};
  tt_shape_t ms = shape4(c->mdims[0], c->mdims[1], c->mdims[2], c->mdims[3]);
  ps[3] = &ms;
  for (int p = 0; p < 5; ++p) {
    if (p == 3 && !has_mask) continue;
    in[n].op = TT_OP_PARAM;
    in[n].dtype = p == 3 ? TT_F32 : c->dtype;
    in[n].shape = *ps[p];
    in[n].input_index = n;
    ag->inputs[n] = n;
    ++n;
  }
  int ni = n, go = n - 1;
  for (int i = 0; i < 3 + has_mask; ++i) ag->ops_fwd[i] = i;
  ag->ops_bwd[0] = go;
  for (int i = 0; i < 3 + has_mask; ++i) ag->ops_bwd[1 + i] = i;
  for (int lse = 0; lse < 2; ++lse) {
    tt_instr_t *a = &in[n];
    a->op = TT_OP_ATTENTION;
    a->num_operands = 3 + has_mask;
    a->operands = ag->ops_fwd;
    a->num_iattrs = 2;
    a->iattrs[0] = c->causal;
    a->iattrs[1] = lse;
    a->fattrs[0] = c->scale;
    a->dtype = lse ? TT_F32 : c->dtype;
    a->shape = lse ? (tt_shape_t){3, {c->B, c->H, c->L}} : os;
    ag->outputs[lse] = n++;
  }
  tt_instr_t *b = &in[n];
  b->op = TT_OP_ATTENTION_BWD;
  b->num_operands = 4 + has_mask;
  b->operands = ag->ops_bwd;
  b->num_iattrs = 1;
  b->iattrs[0] = c->causal;
  b->fattrs[0] = c->scale;
  b->dtype = c->dtype;
  b->shape = (tt_shape_t){1, {numel4(&qs) + numel4(&ks) + numel4(&vs)}};
  ag->outputs[2] = n++;
  ag->g.num_instrs = n;
  ag->g.instrs = in;
  ag->g.num_inputs = ni;
  ag->g.input_instr = ag->inputs;
  ag->g.num_outputs = 3;
  ag->g.output_instr = ag->outputs;
}

static int count(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) ++n;
  return n;
}

/* ---- the emitted text ---- */

static void test_text(const att_case_t *c) {
  att_graph_t ag;
  att_build(c, &ag);
  char *text = NULL;
  CHECK_OK(tt_stablehlo_emit_graph(&ag.g, c->name, &text));
  if (!text) return;
  int half = c->dtype != TT_F32;
  /* Output: q k^T, e v; logsumexp: q k^T; backward: q k^T, then p^T g,
   * g v^T, ds k, ds^T q. */
  CHECK(count(text, "\"stablehlo.dot_general\"") == 2 + 1 + 5);
  CHECK(count(text, "lhs_batching_dimensions = [0, 1], rhs_batching_dimensions = [0, 1]") == 8);
  CHECK(strstr(text, "lhs_contracting_dimensions = [3], rhs_contracting_dimensions = [3]"));
  CHECK(strstr(text, "lhs_contracting_dimensions = [3], rhs_contracting_dimensions = [2]"));
  CHECK(strstr(text, "lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [2]"));
  CHECK(strstr(text, "\"stablehlo.maximum\""));
  CHECK(count(text, "\"stablehlo.exponential\"") == 3);
  CHECK(strstr(text, "\"stablehlo.log\""));
  CHECK(strstr(text, "\"stablehlo.divide\""));
  /* Dead rows: the row max compared with -inf and selected away. */
  CHECK(strstr(text, "comparison_direction = #stablehlo<comparison_direction EQ>"));
  CHECK(strstr(text, "0xFF800000"));
  CHECK(count(text, "\"stablehlo.select\"") >= 3 * 2);
  CHECK(strstr(text, "\"stablehlo.concatenate\""));
  CHECK(strstr(text, "dimension = 0 : i64"));
  CHECK((strstr(text, "\"stablehlo.iota\"") != NULL) == (c->causal != 0));
  CHECK((strstr(text, "comparison_direction = #stablehlo<comparison_direction LE>") != NULL) ==
        (c->causal != 0));
  CHECK((strstr(text, "\"stablehlo.convert\"") != NULL) == half);
  char want[128];
  const char *el = c->dtype == TT_F32 ? "f32" : c->dtype == TT_F16 ? "f16" : "bf16";
  snprintf(want, sizeof(want), "-> (tensor<%lldx%lldx%lldx%lldx%s>, tensor<%lldx%lldx%lldxf32>, "
           "tensor<%lldx%s>)", (long long)c->B, (long long)c->H, (long long)c->L,
           (long long)c->Ev, el, (long long)c->B, (long long)c->H, (long long)c->L,
           (long long)(c->B * c->H * (c->L * c->E + c->S * c->E + c->S * c->Ev)), el);
  CHECK(strstr(text, want));
  if (!strstr(text, want)) fprintf(stderr, "%s: expected %s in\n%s\n", c->name, want, text);
  if (c->mdims[0]) {
    char mt[96];
    snprintf(mt, sizeof(mt), "(tensor<%lldx%lldx%lldx%lldxf32>) -> tensor<%lldx%lldx%lldx%lldxf32>",
             (long long)c->mdims[0], (long long)c->mdims[1], (long long)c->mdims[2],
             (long long)c->mdims[3], (long long)c->B, (long long)c->H, (long long)c->L,
             (long long)c->S);
    CHECK(strstr(text, mt)); /* the mask's broadcast_in_dim */
  }
  free(text);
}

/* ---- a plain reference ---- */

static double mask_at(const att_case_t *c, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!c->mdims[0]) return 0;
  const int64_t *m = c->mdims;
  int64_t idx = (((m[0] > 1 ? b : 0) * m[1] + (m[1] > 1 ? h : 0)) * m[2] + (m[2] > 1 ? i : 0)) *
                    m[3] + (m[3] > 1 ? j : 0);
  return c->mask[idx];
}

/* out [B,H,L,Ev], lse [B,H,L], grads dq|dk|dv flattened: all double. */
static void reference(const att_case_t *c, double *out, double *lse, double *grads) {
  int64_t L = c->L, S = c->S, E = c->E, Ev = c->Ev;
  int64_t nq = c->B * c->H * L * E, nk = c->B * c->H * S * E;
  double *dq = grads, *dk = grads + nq, *dv = grads + nq + nk;
  double *p = malloc(sizeof(double) * (size_t)(L * S));
  double *dp = malloc(sizeof(double) * (size_t)(L * S));
  memset(grads, 0, sizeof(double) * (size_t)(nq + nk + c->B * c->H * S * Ev));
  for (int64_t b = 0; b < c->B; ++b)
    for (int64_t h = 0; h < c->H; ++h) {
      int64_t bh = b * c->H + h;
      const float *q = c->q + bh * L * E, *k = c->k + bh * S * E, *v = c->v + bh * S * Ev;
      const float *g = c->go + bh * L * Ev;
      for (int64_t i = 0; i < L; ++i) {
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          double s = 0;
          for (int64_t e = 0; e < E; ++e) s += (double)q[i * E + e] * k[j * E + e];
          s = s * c->scale + mask_at(c, b, h, i, j);
          if (c->causal && j > i) s = -INFINITY;
          p[i * S + j] = s;
          if (s > m) m = s;
        }
        for (int64_t j = 0; j < S; ++j) {
          p[i * S + j] = m == -INFINITY ? 0 : exp(p[i * S + j] - m);
          sum += p[i * S + j];
        }
        for (int64_t j = 0; j < S; ++j) p[i * S + j] = sum > 0 ? p[i * S + j] / sum : 0;
        lse[bh * L + i] = m == -INFINITY ? 0 : m + log(sum);
        for (int64_t f = 0; f < Ev; ++f) {
          double o = 0;
          for (int64_t j = 0; j < S; ++j) o += p[i * S + j] * v[j * Ev + f];
          out[(bh * L + i) * Ev + f] = o;
        }
        double rs = 0;
        for (int64_t j = 0; j < S; ++j) {
          double d = 0;
          for (int64_t f = 0; f < Ev; ++f) d += (double)g[i * Ev + f] * v[j * Ev + f];
          dp[i * S + j] = d;
          rs += p[i * S + j] * d;
        }
        for (int64_t j = 0; j < S; ++j) {
          double pij = p[i * S + j];
          double ds = pij * (dp[i * S + j] - rs) * c->scale;
          for (int64_t f = 0; f < Ev; ++f) dv[(bh * S + j) * Ev + f] += pij * g[i * Ev + f];
          for (int64_t e = 0; e < E; ++e) {
            dq[(bh * L + i) * E + e] += ds * k[j * E + e];
            dk[(bh * S + j) * E + e] += ds * q[i * E + e];
          }
        }
      }
    }
  free(p);
  free(dp);
}

/* The reference's gradients are those of sum(out * grad_out): checked by
 * central differences of its forward, so the device comparison below
 * rests on gradients, not only on the formulas both sides implement. */
static void test_reference_gradients(att_case_t *c) {
  int64_t no = c->B * c->H * c->L * c->Ev, nl = c->B * c->H * c->L;
  int64_t nq = c->B * c->H * c->L * c->E, nk = c->B * c->H * c->S * c->E;
  int64_t ng = nq + nk + c->B * c->H * c->S * c->Ev;
  double *out = malloc(sizeof(double) * (size_t)no), *lse = malloc(sizeof(double) * (size_t)nl);
  double *grads = malloc(sizeof(double) * (size_t)ng);
  double *scratch = malloc(sizeof(double) * (size_t)ng);
  reference(c, out, lse, grads);
  float *xs[3] = {c->q, c->k, c->v};
  int64_t off[3] = {0, nq, nq + nk}, n[3] = {nq, nk, ng - nq - nk};
  const float h = 1.0f / 64;
  double w = 0;
  for (int t = 0; t < 3; ++t)
    for (int64_t i = 0; i < n[t]; ++i) {
      float x0 = xs[t][i];
      double f[2], x[2];
      for (int sgn = 0; sgn < 2; ++sgn) {
        xs[t][i] = sgn ? x0 - h : x0 + h;
        x[sgn] = xs[t][i]; /* the step as f32 rounded it */
        reference(c, out, lse, scratch);
        f[sgn] = 0;
        for (int64_t j = 0; j < no; ++j) f[sgn] += out[j] * c->go[j];
      }
      xs[t][i] = x0;
      double fd = (f[0] - f[1]) / (x[0] - x[1]), an = grads[off[t] + i];
      double r = fabs(fd - an) / (1e-3 + 1e-2 * fabs(an));
      if (!(r <= w)) w = r;
    }
  CHECK(w <= 1.0);
  if (w > 1.0) fprintf(stderr, "%s: reference gradient off by %g tolerances\n", c->name, w);
  free(out);
  free(lse);
  free(grads);
  free(scratch);
}

/* ---- executed through PJRT ---- */

static float *randoms(int64_t n, uint32_t *state) {
  float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) {
    *state = *state * 1664525u + 1013904223u;
    v[i] = (float)((*state >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
  }
  return v;
}

/* Host data in dt (rounded through dt, so the reference sees the values
 * the device does). Returns a malloc'd buffer of n elements of dt. */
static void *to_dtype(float *v, int64_t n, tt_dtype_t dt, size_t *out_bytes) {
  size_t es = dt == TT_F32 ? 4 : 2;
  void *buf = malloc(es * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; ++i) {
    if (dt == TT_F32) {
      ((float *)buf)[i] = v[i];
    } else if (dt == TT_F16) {
      uint16_t hv = tt_f32_to_f16(v[i]);
      ((uint16_t *)buf)[i] = hv;
      v[i] = tt_f16_to_f32(hv);
    } else {
      uint16_t hv = tt_f32_to_bf16(v[i]);
      ((uint16_t *)buf)[i] = hv;
      v[i] = tt_bf16_to_f32(hv);
    }
  }
  *out_bytes = es * (size_t)n;
  return buf;
}

static double from_dtype(const void *buf, int64_t i, tt_dtype_t dt) {
  if (dt == TT_F32) return ((const float *)buf)[i];
  if (dt == TT_F16) return tt_f16_to_f32(((const uint16_t *)buf)[i]);
  return tt_bf16_to_f32(((const uint16_t *)buf)[i]);
}

/* Largest |got - want| / (atol + rtol |want|) over n values; > 1 fails. */
static double worst(const void *got, tt_dtype_t dt, const double *want, int64_t n, double tol,
                    int64_t *at) {
  double w = 0;
  *at = -1;
  for (int64_t i = 0; i < n; ++i) {
    double gv = from_dtype(got, i, dt);
    double r = fabs(gv - want[i]) / (tol + tol * fabs(want[i]));
    if (!(r <= w)) {
      w = r;
      *at = i;
    }
  }
  return w;
}

static void test_execute(tt_pjrt_client_t *client, att_case_t *c) {
  att_graph_t ag;
  att_build(c, &ag);
  char *text = NULL;
  CHECK_OK(tt_stablehlo_emit_graph(&ag.g, c->name, &text));
  if (!text) return;
  tt_pjrt_executable_t *exe = NULL;
  CHECK_OK(tt_pjrt_compile(client, text, strlen(text), "mlir", NULL, &exe));
  if (!exe) {
    fprintf(stderr, "%s: the module that failed to compile:\n%s\n", c->name, text);
    free(text);
    return;
  }
  free(text);
  CHECK(tt_pjrt_executable_num_outputs(exe) == 3);
  tt_pjrt_buffer_t *args[5] = {0}, *outs[3] = {0};
  int na = 0;
  float *host[5] = {c->q, c->k, c->v, c->mask, c->go};
  for (int p = 0; p < 5; ++p) {
    if (p == 3 && !c->mdims[0]) continue;
    const tt_instr_t *pi = &ag.in[na];
    size_t nbytes = 0;
    void *buf = to_dtype(host[p], numel4(&pi->shape), pi->dtype, &nbytes);
    CHECK_OK(tt_pjrt_buffer_from_host(client, 0, pi->dtype, &pi->shape, buf, nbytes, &args[na]));
    free(buf);
    ++na;
  }
  CHECK_OK(tt_pjrt_execute(exe, 0, args, (size_t)na, outs));
  int64_t no = c->B * c->H * c->L * c->Ev, nl = c->B * c->H * c->L;
  int64_t ng = c->B * c->H * (c->L * c->E + c->S * c->E + c->S * c->Ev);
  double *want_o = malloc(sizeof(double) * (size_t)no);
  double *want_l = malloc(sizeof(double) * (size_t)nl);
  double *want_g = malloc(sizeof(double) * (size_t)ng);
  reference(c, want_o, want_l, want_g);
  const double *wants[3] = {want_o, want_l, want_g};
  const int64_t ns[3] = {no, nl, ng};
  const tt_dtype_t dts[3] = {c->dtype, TT_F32, c->dtype};
  const char *what[3] = {"output", "logsumexp", "gradients"};
  /* f32 computes what the reference does up to rounding; half results are
   * rounded to 8 (bf16) or 11 (f16) significant bits at the end. */
  double tol = c->dtype == TT_F32 ? 1e-5 : c->dtype == TT_F16 ? 2e-3 : 1e-2;
  for (int r = 0; r < 3; ++r) {
    if (!outs[r]) continue;
    CHECK(tt_pjrt_buffer_dtype(outs[r]) == dts[r]);
    size_t nbytes = tt_pjrt_buffer_nbytes(outs[r]);
    CHECK(nbytes == (size_t)ns[r] * (dts[r] == TT_F32 ? 4 : 2));
    void *got = malloc(nbytes ? nbytes : 1);
    CHECK_OK(tt_pjrt_buffer_to_host(outs[r], got, nbytes));
    int64_t at;
    double w = worst(got, dts[r], wants[r], ns[r], r == 1 ? 1e-5 : tol, &at);
    CHECK(w <= 1.0);
    if (w > 1.0)
      fprintf(stderr, "%s: %s [%lld] = %.8g, expected %.8g\n", c->name, what[r], (long long)at,
              from_dtype(got, at, dts[r]), wants[r][at]);
    free(got);
    tt_pjrt_buffer_destroy(outs[r]);
  }
  free(want_o);
  free(want_l);
  free(want_g);
  for (int i = 0; i < na; ++i) tt_pjrt_buffer_destroy(args[i]);
  tt_pjrt_executable_destroy(exe);
}

static void case_init(att_case_t *c, uint32_t seed) {
  int64_t nq = c->B * c->H * c->L * c->E, nk = c->B * c->H * c->S * c->E;
  int64_t nv = c->B * c->H * c->S * c->Ev, no = c->B * c->H * c->L * c->Ev;
  c->q = randoms(nq, &seed);
  c->k = randoms(nk, &seed);
  c->v = randoms(nv, &seed);
  c->go = randoms(no, &seed);
  c->mask = NULL;
  if (c->mdims[0]) {
    int64_t nm = c->mdims[0] * c->mdims[1] * c->mdims[2] * c->mdims[3];
    c->mask = randoms(nm, &seed);
    int64_t mS = c->mdims[3], mL = c->mdims[2];
    /* Hide some keys; with a full-length row dim hide every key of row 1
     * of the first mask slice: a dead row (output 0, lse 0, no gradient). */
    for (int64_t i = 0; i < nm; ++i)
      if (i % 3 == 1) c->mask[i] = -INFINITY;
    if (mL > 1 && mS == c->S)
      for (int64_t j = 0; j < mS; ++j) c->mask[1 * mS + j] = -INFINITY;
  }
}

static void case_free(att_case_t *c) {
  free(c->q);
  free(c->k);
  free(c->v);
  free(c->go);
  free(c->mask);
}

int main(void) {
  att_case_t cases[] = {
      /* name, B, H, L, S, E, Ev, mask dims, causal, scale, dtype */
      {"plain", 2, 3, 5, 4, 3, 2, {0, 0, 0, 0}, 0, 0.57735, .dtype = TT_F32},
      {"causal", 2, 2, 5, 6, 4, 3, {0, 0, 0, 0}, 1, 0.5, .dtype = TT_F32},
      {"causal_long_query", 1, 2, 6, 3, 2, 2, {0, 0, 0, 0}, 1, 1.0, .dtype = TT_F32},
      {"mask_full", 2, 2, 4, 5, 3, 2, {2, 2, 4, 5}, 0, 0.6, .dtype = TT_F32},
      {"mask_bcast", 2, 3, 4, 5, 3, 4, {2, 1, 4, 5}, 0, 0.6, .dtype = TT_F32},
      {"mask_row_bcast_causal", 2, 2, 4, 4, 3, 2, {1, 2, 1, 4}, 1, 0.7, .dtype = TT_F32},
      {"f16_mask_causal", 1, 2, 4, 4, 8, 4, {1, 1, 4, 4}, 1, 0.35, .dtype = TT_F16},
      {"bf16", 2, 1, 3, 5, 4, 4, {0, 0, 0, 0}, 0, 0.5, .dtype = TT_BF16},
  };
  int nc = (int)(sizeof(cases) / sizeof(cases[0]));
  for (int i = 0; i < nc; ++i) {
    case_init(&cases[i], 12345u + (uint32_t)i * 977u);
    test_text(&cases[i]);
    test_reference_gradients(&cases[i]);
  }
  const char *path = getenv("TORCHTPU_PJRT_CPU_PLUGIN");
  if (!path || !*path) {
    printf("execution skipped: set TORCHTPU_PJRT_CPU_PLUGIN to XLA's CPU PJRT plugin to run\n");
  } else {
    tt_pjrt_client_t *client = NULL;
    CHECK_OK(tt_pjrt_client_create(path, NULL, 0, &client));
    if (client) {
      for (int i = 0; i < nc; ++i) test_execute(client, &cases[i]);
      tt_pjrt_client_release(client);
    }
  }
  for (int i = 0; i < nc; ++i) case_free(&cases[i]);
  return test_summary();
}
