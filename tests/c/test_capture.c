/* Unit tests for captured graphs (tt_lazy_capture / tt_lazy_replay): the
 * first call's values, replay on new inputs without a new compile,
 * pass-through and constant outputs, RNG seed slots, runtime scalar
 * inputs, signature mismatches, aliasing, and inputs still pending. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/torchtpu.h"

static tt_tensor_t *from_floats(const float *v, int64_t n) {
  tt_shape_t s = {1, {n}};
  tt_tensor_t *t = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s, v, &t));
  return t;
}

static tt_tensor_t *binary(int64_t op, tt_tensor_t *a, tt_tensor_t *b) {
  tt_tensor_t *ops[2] = {a, b}, *r = NULL;
  CHECK_OK(tt_tensor_op(TT_OP_BINARY, 0, ops, 2, &op, 1, NULL, 0, &r));
  return r;
}

static int close_to(const float *a, const float *b, int n) {
  for (int i = 0; i < n; ++i)
    if (fabsf(a[i] - b[i]) > 1e-5f) return 0;
  return 1;
}

/* y = x * 2 + w; outputs (y, x, k) with k a constant materialized tensor. */
static void test_capture_replay_values(void) {
  float xv[4] = {1, 2, 3, 4}, wv[4] = {10, 20, 30, 40}, kv[4] = {7, 7, 7, 7};
  tt_tensor_t *x = from_floats(xv, 4), *w = from_floats(wv, 4), *k = from_floats(kv, 4);
  tt_tensor_t *two = NULL;
  CHECK_OK(tt_tensor_scalar(0, TT_F32, 2.0, 0, &two));
  tt_tensor_t *m = binary(TT_BIN_MUL, x, two);
  tt_tensor_t *y = binary(TT_BIN_ADD, m, w);
  tt_tensor_t *ins[2] = {x, w};
  tt_tensor_t *outs[4] = {y, x, k, y};
  tt_capture_t *c = NULL;
  int64_t compiles0 = tt_counter_value("UncachedCompile");
  CHECK_OK(tt_lazy_capture(ins, 2, outs, 4, &c));
  CHECK(c && tt_capture_num_inputs(c) == 2 && tt_capture_num_outputs(c) == 4);
  CHECK(c && tt_capture_num_graph_outputs(c) == 1 && tt_capture_num_seeds(c) == 0);
  CHECK(c && tt_capture_hash(c) != 0);
  /* Capturing cut the graph: y already holds the first call's value. */
  CHECK(!tt_tensor_is_pending(y));
  float got[4], want[4] = {12, 24, 36, 48};
  CHECK_OK(tt_tensor_to_host(y, got, sizeof(got)));
  CHECK(close_to(got, want, 4));
  CHECK(tt_counter_value("UncachedCompile") - compiles0 == 1);

  /* Replay on new inputs: no new compile, new values. */
  float x2v[4] = {-1, 0, 1, 2}, w2v[4] = {1, 1, 1, 1};
  tt_tensor_t *x2 = from_floats(x2v, 4), *w2 = from_floats(w2v, 4);
  tt_tensor_t *ins2[2] = {x2, w2};
  tt_tensor_t *r[4] = {NULL, NULL, NULL, NULL};
  int64_t cached0 = tt_counter_value("CachedCompile");
  CHECK_OK(tt_lazy_replay(c, ins2, 2, NULL, 0, r));
  CHECK(tt_counter_value("UncachedCompile") - compiles0 == 1);
  CHECK(tt_counter_value("CachedCompile") == cached0);
  float want2[4] = {-1, 1, 3, 5};
  CHECK_OK(tt_tensor_to_host(r[0], got, sizeof(got)));
  CHECK(close_to(got, want2, 4));
  CHECK(r[1] == x2); /* pass-through output is the input itself */
  CHECK_OK(tt_tensor_to_host(r[2], got, sizeof(got)));
  CHECK(close_to(got, kv, 4));
  CHECK_OK(tt_tensor_to_host(r[3], got, sizeof(got)));
  CHECK(close_to(got, want2, 4));
  for (int i = 0; i < 4; ++i) tt_tensor_release(r[i]);

  /* A new shape is a mismatch that names the input and both shapes. */
  float x3v[3] = {1, 2, 3};
  tt_tensor_t *x3 = from_floats(x3v, 3);
  tt_tensor_t *ins3[2] = {x3, w2};
  char why[256];
  CHECK(!tt_capture_matches(c, ins3, 2, why, sizeof(why)));
  CHECK(strstr(why, "input 0 is float32[3], the graph was captured for float32[4]") != NULL);
  tt_status_t st = tt_lazy_replay(c, ins3, 2, NULL, 0, r);
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT);
  CHECK(st && strstr(tt_status_message(st), "input 0 is float32[3]") != NULL);
  CHECK(r[0] == NULL);
  tt_status_free(st);
  CHECK(!tt_capture_matches(c, ins3, 1, why, sizeof(why)));
  CHECK(strstr(why, "expected 2 inputs, got 1") != NULL);

  /* A pending input is computed first, then the graph runs on it. */
  tt_tensor_t *xp = binary(TT_BIN_ADD, x2, w2); /* {0, 1, 2, 3} */
  tt_tensor_t *insp[2] = {xp, w2};
  CHECK_OK(tt_lazy_replay(c, insp, 2, NULL, 0, r));
  float want3[4] = {1, 3, 5, 7};
  CHECK(!tt_tensor_is_pending(xp));
  CHECK_OK(tt_tensor_to_host(r[0], got, sizeof(got)));
  CHECK(close_to(got, want3, 4));
  for (int i = 0; i < 4; ++i) tt_tensor_release(r[i]);

  char *text = NULL;
  CHECK_OK(tt_capture_graph_text(c, &text));
  CHECK(text && strstr(text, "param") != NULL);
  free(text);
  tt_capture_release(c);
  tt_tensor_release(xp);
  tt_tensor_release(x3);
  tt_tensor_release(x2);
  tt_tensor_release(w2);
  tt_tensor_release(y);
  tt_tensor_release(m);
  tt_tensor_release(two);
  tt_tensor_release(k);
  tt_tensor_release(w);
  tt_tensor_release(x);
}

/* Capture inputs must not be pending computations; devices must agree. */
static void test_capture_errors(void) {
  float v[2] = {1, 2};
  tt_tensor_t *a = from_floats(v, 2), *b = from_floats(v, 2);
  tt_tensor_t *p = binary(TT_BIN_ADD, a, b);
  tt_tensor_t *q = binary(TT_BIN_MUL, p, a);
  tt_tensor_t *ins[1] = {p};
  tt_capture_t *c = NULL;
  tt_status_t st = tt_lazy_capture(ins, 1, &q, 1, &c);
  CHECK(st && c == NULL && tt_status_code(st) == TT_INVALID_ARGUMENT);
  CHECK(st && strstr(tt_status_message(st), "input 0") && strstr(tt_status_message(st), "sync"));
  tt_status_free(st);
  tt_shape_t s = {1, {2}};
  tt_tensor_t *d1 = NULL;
  CHECK_OK(tt_tensor_from_host(1, TT_F32, &s, v, &d1));
  tt_tensor_t *ins2[2] = {a, d1};
  st = tt_lazy_capture(ins2, 2, &q, 1, &c);
  CHECK(st && strstr(tt_status_message(st), "input 1 is on xla:1, expected xla:0"));
  tt_status_free(st);
  tt_tensor_release(d1);
  tt_tensor_release(q);
  tt_tensor_release(p);
  tt_tensor_release(b);
  tt_tensor_release(a);
}

/* RNG keys are seed slots: new seeds give new numbers, equal seeds equal
 * numbers; runtime scalar inputs are read on every replay. */
static void test_seeds_and_scalars(void) {
  tt_tensor_t *key = NULL, *u = NULL, *scale = NULL;
  CHECK_OK(tt_tensor_scalar(0, TT_I64, 0, 1234, &key));
  CHECK_OK(tt_tensor_scalar(0, TT_F32, 3.0, 0, &scale));
  int64_t attrs[3] = {TT_RNG_UNIFORM, TT_F32, 8};
  double f[2] = {0.0, 1.0};
  CHECK_OK(tt_tensor_op(TT_OP_RNG, 0, &key, 1, attrs, 3, f, 2, &u));
  tt_tensor_t *y = binary(TT_BIN_MUL, u, scale);
  tt_capture_t *c = NULL;
  CHECK_OK(tt_lazy_capture(&scale, 1, &y, 1, &c));
  CHECK(c && tt_capture_num_seeds(c) == 1 && tt_capture_num_inputs(c) == 1);
  float first[8], a[8], b[8], d[8];
  CHECK_OK(tt_tensor_to_host(y, first, sizeof(first)));
  tt_tensor_t *s1 = NULL, *r = NULL;
  CHECK_OK(tt_tensor_scalar(0, TT_F32, 1.0, 0, &s1));
  int64_t seed = 1234;
  CHECK_OK(tt_lazy_replay(c, &s1, 1, &seed, 1, &r));
  CHECK_OK(tt_tensor_to_host(r, a, sizeof(a)));
  tt_tensor_release(r);
  int same_as_first = 1;
  for (int i = 0; i < 8; ++i) same_as_first &= fabsf(a[i] * 3.0f - first[i]) < 1e-5f;
  CHECK(same_as_first); /* same key, scale 1 instead of 3 */
  seed = 99;
  CHECK_OK(tt_lazy_replay(c, &s1, 1, &seed, 1, &r));
  CHECK_OK(tt_tensor_to_host(r, b, sizeof(b)));
  tt_tensor_release(r);
  CHECK(memcmp(a, b, sizeof(a)) != 0);
  CHECK_OK(tt_lazy_replay(c, &s1, 1, &seed, 1, &r));
  CHECK_OK(tt_tensor_to_host(r, d, sizeof(d)));
  tt_tensor_release(r);
  CHECK(memcmp(b, d, sizeof(b)) == 0);
  /* Wrong number of seeds, and device data where a scalar was captured. */
  tt_status_t st = tt_lazy_replay(c, &s1, 1, NULL, 0, &r);
  CHECK(st && strstr(tt_status_message(st), "takes 1 RNG seeds, got 0"));
  tt_status_free(st);
  float one = 1;
  tt_shape_t s0 = {0, {0}};
  tt_tensor_t *dev = NULL;
  CHECK_OK(tt_tensor_from_host(0, TT_F32, &s0, &one, &dev));
  char why[256];
  CHECK(!tt_capture_matches(c, &dev, 1, why, sizeof(why)));
  CHECK(strstr(why, "input 0 is device data, the graph was captured with a runtime scalar"));
  tt_tensor_release(dev);
  tt_capture_release(c);
  tt_tensor_release(s1);
  tt_tensor_release(y);
  tt_tensor_release(u);
  tt_tensor_release(scale);
  tt_tensor_release(key);
}

/* The same data passed twice is one graph input; replaying with two
 * different tensors there is an error rather than a silent wrong read. */
static void test_aliased_inputs(void) {
  float v[3] = {1, 2, 3}, w[3] = {5, 5, 5};
  tt_tensor_t *a = from_floats(v, 3);
  tt_tensor_t *s = binary(TT_BIN_ADD, a, a);
  tt_tensor_t *ins[2] = {a, a};
  tt_capture_t *c = NULL;
  CHECK_OK(tt_lazy_capture(ins, 2, &s, 1, &c));
  CHECK(c && tt_capture_num_graph_inputs(c) == 1);
  tt_tensor_t *b = from_floats(w, 3), *r = NULL;
  tt_tensor_t *same[2] = {b, b}, *diff[2] = {a, b};
  CHECK_OK(tt_lazy_replay(c, same, 2, NULL, 0, &r));
  float got[3], want[3] = {10, 10, 10};
  CHECK_OK(tt_tensor_to_host(r, got, sizeof(got)));
  CHECK(close_to(got, want, 3));
  tt_tensor_release(r);
  tt_status_t st = tt_lazy_replay(c, diff, 2, NULL, 0, &r);
  CHECK(st && strstr(tt_status_message(st), "inputs 0 and 1 were the same data at capture"));
  tt_status_free(st);
  tt_capture_release(c);
  tt_tensor_release(b);
  tt_tensor_release(s);
  tt_tensor_release(a);
}

int main(void) {
  CHECK_OK(tt_runtime_init(2));
  test_capture_replay_values();
  test_capture_errors();
  test_seeds_and_scalars();
  test_aliased_inputs();
  tt_lazy_sync(-1, 1, NULL);
  CHECK(tt_lazy_live_tensors() == 0);
  return test_summary();
}
