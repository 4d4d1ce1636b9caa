/* Sharding propagation (tt_pass_propagate_sharding, the op table's rules):
 * per op family a small graph with annotated inputs and the shardings,
 * origins and partial-value records expected for the rest, written out by
 * hand from the rules in docs/spmd.md; conflicts, backward propagation
 * from an annotated output, manual regions, and that the pass leaves the
 * graph's hash and instructions alone. */
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/op_table.h"
#include "torchtpu/passes.h"
#include "torchtpu/runtime.h"
#include "torchtpu/sharding_rule.h"

static tt_buffer_t *g_buf;

/* XLA's HloSharding text ("{replicated}", "{manual}", "{devices=[2,4]0,..,7
 * last_tile_dim_replicate}") as a tt_sharding_t; `n` the device count of
 * replicated and manual ones. */
static tt_sharding_t *parse(const char *text, int32_t n) {
  tt_sharding_t *s = calloc(1, tt_sharding_size(TT_SHARDING_MAX_DEVICES));
  if (strcmp(text, "{replicated}") == 0 || strcmp(text, "{manual}") == 0) {
    s->kind = text[1] == 'r' ? TT_SHARDING_REPLICATED : TT_SHARDING_MANUAL;
    s->num_devices = n;
    return s;
  }
  s->kind = TT_SHARDING_TILED;
  const char *p = strchr(text, '[') + 1;
  while (*p != ']') {
    s->tile_dims[s->num_tile_dims++] = strtol(p, (char **)&p, 10);
    if (*p == ',') ++p;
  }
  ++p;
  while (*p >= '0' && *p <= '9') {
    s->devices[s->num_devices++] = (int32_t)strtol(p, (char **)&p, 10);
    if (*p == ',') ++p;
  }
  s->last_tile_dim_replicate = strstr(text, "last_tile_dim_replicate") != NULL;
  return s;
}

static tt_node_t *param(int32_t rank, const int64_t *dims, tt_dtype_t dt) {
  tt_shape_t s = {rank, {0}};
  for (int32_t d = 0; d < rank; ++d) s.dims[d] = dims[d];
  return tt_node_create_param(g_buf, dt, &s, 0);
}
#define P(dt, ...) param((int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                         (int64_t[]){__VA_ARGS__}, dt)

/* A node of op over operands with int attributes (the node list and the
 * attribute list are compound literals). */
static tt_node_t *mk(tt_op_t op, int32_t nops, tt_node_t *const *ops, int32_t ni,
                     const int64_t *ia) {
  tt_node_t *n = NULL;
  CHECK_OK(tt_node_create(op, 0, ops, nops, ia, ni, NULL, 0, &n), tt_op_name(op));
  return n;
}
#define OPS(...) (int32_t)(sizeof((tt_node_t *[]){__VA_ARGS__}) / sizeof(tt_node_t *)), \
                 (tt_node_t *[]){__VA_ARGS__}
#define IA(...) \
  (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}
#define NOIA 0, NULL

static void annotate(tt_node_t *n, const char *text, int32_t ndev) {
  tt_sharding_t *s = parse(text, ndev);
  CHECK_OK(tt_node_set_sharding(n, s), text);
  free(s);
}

/* Up to 16 nodes of the graph under test, released by finish(). */
static tt_node_t *g_nodes[16];
static int g_num_nodes;
static tt_node_t *keep(tt_node_t *n) {
  g_nodes[g_num_nodes++] = n;
  return n;
}

/* The graph of roots with the nodes' annotations on its instructions (as
 * the StableHLO emitter sets them), propagated. */
static tt_graph_t *propagate(int32_t nroots, tt_node_t *const *roots) {
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(roots, nroots, &g, NULL));
  for (int i = 0; i < g_num_nodes; ++i)
    if (g_nodes[i]->visit_epoch && g_nodes[i]->sharding)
      g->instrs[g_nodes[i]->visit_index].sharding = g_nodes[i]->sharding;
  CHECK_OK(tt_pass_propagate_sharding(g));
  return g;
}

static const tt_sharding_prop_t *rec(const tt_graph_t *g, const tt_node_t *n) {
  return &g->sharding_prop[n->visit_index];
}

static void expect_text(const tt_sharding_t *s, const char *want, int line, const char *what) {
  char *got = s ? tt_sharding_to_text(s) : strdup("(none)");
  check_impl(strcmp(got, want) == 0, __FILE__, line, "%s: got %s, want %s", what, got, want);
  free(got);
}
/* The sharding and origin recorded for node n. */
#define EXPECT(g, n, text, from)                                                    \
  do {                                                                             \
    expect_text(rec(g, n)->sharding, text, __LINE__, #n);                          \
    CHECK(rec(g, n)->origin == (from), "%s: origin %d, want %d", #n,               \
          (int)rec(g, n)->origin, (int)(from));                                    \
  } while (0)
/* The local layout and its partial-value groups. */
#define EXPECT_LOCAL(g, n, text, count, reduce)                                      \
  do {                                                                              \
    expect_text(rec(g, n)->local, text, __LINE__, #n " local");                     \
    CHECK(rec(g, n)->partial_count == (count) && rec(g, n)->partial_reduce == (reduce), \
          "%s: partial %lld reduce %d, want %lld %d", #n,                           \
          (long long)rec(g, n)->partial_count, (int)rec(g, n)->partial_reduce,      \
          (long long)(count), (int)(reduce));                                      \
  } while (0)

static void finish(tt_graph_t *g) {
  tt_graph_destroy(g);
  for (int i = 0; i < g_num_nodes; ++i) tt_node_release(g_nodes[i]);
  g_num_nodes = 0;
}

enum { FWD = TT_SHARDING_FROM_FORWARD, BWD = TT_SHARDING_FROM_BACKWARD,
       USER = TT_SHARDING_FROM_USER, DEF = TT_SHARDING_FROM_DEFAULT };
#define R4 "{devices=[4,1]0,1,2,3}"

static void test_every_op_has_a_rule(void) {
  for (int op = 0; op < TT_OP_COUNT; ++op) {
    const tt_op_info_t *info = tt_op_info((tt_op_t)op);
    CHECK(info && info->sharding_rule && info->sharding_rule->family &&
              info->sharding_rule->family[0],
          "op %s has no sharding rule", tt_op_name((tt_op_t)op));
    /* Only the manual-region ops take their shardings from attributes. */
    CHECK((info->sharding_rule->fixed != NULL) == tt_op_is_spmd_manual((tt_op_t)op),
          "op %s", tt_op_name((tt_op_t)op));
  }
}

static void test_elementwise_broadcast(void) {
  /* Rows over 4 devices (in a permuted order); a bias of the column dim. */
  tt_node_t *x = keep(P(TT_F32, 8, 4)), *b = keep(P(TT_F32, 4)), *c = keep(P(TT_F32, 1, 4));
  annotate(x, "{devices=[4,1]3,2,1,0}", 4);
  tt_node_t *y = keep(mk(TT_OP_BINARY, OPS(x, b), IA(TT_BIN_ADD)));
  tt_node_t *z = keep(mk(TT_OP_BINARY, OPS(c, y), IA(TT_BIN_MUL)));
  tt_node_t *u = keep(mk(TT_OP_UNARY, OPS(z), IA(TT_UN_EXP)));
  tt_graph_t *g = propagate(1, &u);
  EXPECT(g, x, "{devices=[4,1]3,2,1,0}", USER);
  EXPECT(g, y, "{devices=[4,1]3,2,1,0}", FWD);
  EXPECT(g, u, "{devices=[4,1]3,2,1,0}", FWD);
  /* The bias lines up with the unsharded dim, c's size-1 dim broadcasts. */
  EXPECT(g, b, "{replicated}", BWD);
  EXPECT(g, c, "{replicated}", BWD);
  CHECK(rec(g, y)->partial_count == 1 && rec(g, y)->partial_reduce == -1);
  finish(g);
  /* Columns: the bias takes them (backward). */
  x = keep(P(TT_F32, 8, 4));
  b = keep(P(TT_F32, 4));
  annotate(x, "{devices=[1,4]0,1,2,3}", 4);
  y = keep(mk(TT_OP_BINARY, OPS(x, b), IA(TT_BIN_ADD)));
  g = propagate(1, &y);
  EXPECT(g, y, "{devices=[1,4]0,1,2,3}", FWD);
  EXPECT(g, b, "{devices=[4]0,1,2,3}", BWD);
  finish(g);
}

static void test_transpose_reshape(void) {
  tt_node_t *x = keep(P(TT_F32, 8, 4));
  annotate(x, "{devices=[2,4]0,1,2,3,4,5,6,7}", 8);
  tt_node_t *t = keep(mk(TT_OP_TRANSPOSE, OPS(x), IA(1, 0)));
  tt_graph_t *g = propagate(1, &t);
  /* Device (i, j) of x's grid holds tile (j, i) of the transpose. */
  EXPECT(g, t, "{devices=[4,2]0,4,1,5,2,6,3,7}", FWD);
  finish(g);

  /* Merging a sharded major dim keeps it; partial replication carries. */
  tt_node_t *a = keep(P(TT_F32, 8, 6)), *a2 = keep(P(TT_F32, 8, 6));
  annotate(a, R4, 4);
  annotate(a2, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", 4);
  tt_node_t *m = keep(mk(TT_OP_RESHAPE, OPS(a), IA(48)));
  tt_node_t *m2 = keep(mk(TT_OP_RESHAPE, OPS(a2), IA(48)));
  /* Adding a size-1 dim; splitting the merged dim back. */
  tt_node_t *u = keep(mk(TT_OP_RESHAPE, OPS(a), IA(1, 8, 6)));
  tt_node_t *s = keep(mk(TT_OP_RESHAPE, OPS(m), IA(4, 12)));
  /* A minor dim of a merge, or a tile count that does not divide: replicated. */
  tt_node_t *c = keep(P(TT_F32, 8, 6)), *e = keep(P(TT_F32, 6, 8));
  annotate(c, "{devices=[1,2]0,1}", 2);
  annotate(e, R4, 4);
  tt_node_t *cm = keep(mk(TT_OP_RESHAPE, OPS(c), IA(48)));
  tt_node_t *em = keep(mk(TT_OP_RESHAPE, OPS(e), IA(48)));
  tt_node_t *roots[6] = {m2, u, s, cm, em, m};
  g = propagate(6, roots);
  EXPECT(g, m, "{devices=[4]0,1,2,3}", FWD);
  EXPECT(g, m2, "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}", FWD);
  EXPECT(g, u, "{devices=[1,4,1]0,1,2,3}", FWD);
  EXPECT(g, s, R4, FWD);
  EXPECT(g, cm, "{replicated}", FWD);
  EXPECT(g, em, "{replicated}", FWD);
  finish(g);
}

static void test_slice_concat_pad(void) {
  tt_node_t *x = keep(P(TT_F32, 8, 4)), *y = keep(P(TT_F32, 8, 4));
  annotate(x, R4, 4);
  /* start, limit, step per dim */
  tt_node_t *rows = keep(mk(TT_OP_SLICE, OPS(x), IA(0, 0, 4, 4, 1, 1)));
  tt_node_t *cols = keep(mk(TT_OP_SLICE, OPS(x), IA(0, 1, 8, 3, 1, 1)));
  tt_node_t *cat1 = keep(mk(TT_OP_CONCAT, OPS(x, y), IA(1)));
  tt_node_t *cat0 = keep(mk(TT_OP_CONCAT, OPS(x, x), IA(0)));
  tt_node_t *pad = keep(mk(TT_OP_PAD, OPS(x), IA(0, 1, 0, 2)));
  tt_node_t *pad0 = keep(mk(TT_OP_PAD, OPS(x), IA(1, 0, 0, 0)));
  tt_node_t *roots[6] = {rows, cols, cat1, cat0, pad, pad0};
  tt_graph_t *g = propagate(6, roots);
  EXPECT(g, rows, "{replicated}", FWD);
  EXPECT(g, cols, R4, FWD);
  EXPECT(g, cat1, R4, FWD);
  EXPECT(g, y, R4, BWD); /* concatenated beside x: laid out as x */
  EXPECT(g, cat0, "{replicated}", FWD);
  EXPECT(g, pad, R4, FWD);
  EXPECT(g, pad0, "{replicated}", FWD);
  finish(g);
}

static void test_reduce(void) {
  tt_node_t *x = keep(P(TT_F32, 8, 4)), *w = keep(P(TT_F32, 8, 4));
  annotate(x, R4, 4);
  annotate(w, "{devices=[2,4]0,1,2,3,4,5,6,7}", 8);
  /* op, dims_mask, keepdim, dtype */
  tt_node_t *over = keep(mk(TT_OP_REDUCE, OPS(x), IA(TT_RED_SUM, 1, 0, TT_F32)));
  tt_node_t *along = keep(mk(TT_OP_REDUCE, OPS(x), IA(TT_RED_MAX, 2, 1, TT_F32)));
  tt_node_t *arg = keep(mk(TT_OP_REDUCE, OPS(x), IA(TT_RED_ARGMAX, 1, 0, TT_I64)));
  tt_node_t *cols = keep(mk(TT_OP_REDUCE, OPS(w), IA(TT_RED_SUM, 2, 0, TT_F32)));
  tt_node_t *roots[4] = {over, along, arg, cols};
  tt_graph_t *g = propagate(4, roots);
  /* Summing the sharded rows: replicated once the 4 partial sums are added. */
  EXPECT(g, over, "{replicated}", FWD);
  EXPECT_LOCAL(g, over, "{devices=[1,4]0,1,2,3 last_tile_dim_replicate}", 4, TT_RED_SUM);
  EXPECT(g, along, R4, FWD);
  EXPECT_LOCAL(g, along, "{devices=[4,1,1]0,1,2,3 last_tile_dim_replicate}", 1, -1);
  /* argmax needs the whole dim: no partial values. */
  EXPECT(g, arg, "{replicated}", FWD);
  EXPECT_LOCAL(g, arg, "{devices=[1,4]0,1,2,3 last_tile_dim_replicate}", 1, -1);
  /* Rows over 2, columns (summed) over 4: partial groups of 4 per row tile. */
  EXPECT(g, cols, "{devices=[2,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}", FWD);
  EXPECT_LOCAL(g, cols, "{devices=[2,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}", 4, TT_RED_SUM);
  finish(g);
}

/* A 2 x 4 mesh (data, model) of devices 0..7, as mark_sharding makes it. */
#define DATA_B "{devices=[1,2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"
#define MODEL_N "{devices=[1,1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
#define MODEL_K "{devices=[1,4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
#define DATA_MODEL "{devices=[1,2,4]0,1,2,3,4,5,6,7}"

static void test_dot(void) {
  /* Column-parallel: x [16, 12] batch over data, w [12, 8] columns over
   * model: the product is sharded both ways. */
  tt_node_t *x = keep(P(TT_F32, 1, 16, 12)), *w = keep(P(TT_F32, 1, 12, 8));
  annotate(x, DATA_B, 8);
  annotate(w, MODEL_N, 8);
  tt_node_t *h = keep(mk(TT_OP_DOT, OPS(x, w), IA(0, 0)));
  /* Row-parallel: h's columns contract against w2's rows over model. */
  tt_node_t *w2 = keep(P(TT_F32, 1, 8, 12));
  annotate(w2, MODEL_K, 8);
  tt_node_t *o = keep(mk(TT_OP_DOT, OPS(h, w2), IA(0, 0)));
  tt_graph_t *g = propagate(1, &o);
  EXPECT(g, h, DATA_MODEL, FWD);
  /* Each device multiplies its batch rows by its columns: nothing moves. */
  EXPECT_LOCAL(g, h, "{devices=[1,2,4,1]0,1,2,3,4,5,6,7 last_tile_dim_replicate}", 1, -1);
  /* Batch over data; each data row's 4 model devices hold partial sums. */
  EXPECT(g, o, DATA_B, FWD);
  EXPECT_LOCAL(g, o, DATA_B, 4, TT_RED_SUM);
  char *text = tt_sharding_prop_to_text(g);
  char want[256];
  snprintf(want, sizeof want, "%%%d dot(%%%d, %%%d): %s forward local %s partial 4 sum\n",
           o->visit_index, h->visit_index, w2->visit_index, DATA_B, DATA_B);
  CHECK(text && strstr(text, want), "text:\n%s\nlacks %s", text ? text : "(null)", want);
  snprintf(want, sizeof want, "%%%d param(): %s user\n", x->visit_index, DATA_B);
  CHECK(text && strstr(text, want), "text:\n%s\nlacks %s", text ? text : "(null)", want);
  free(text);
  finish(g);

  /* Batched dot with the batch sharded; b transposed: the batch reaches b. */
  tt_node_t *a = keep(P(TT_F32, 4, 8, 6)), *b = keep(P(TT_F32, 4, 5, 6));
  annotate(a, "{devices=[4,1,1]0,1,2,3}", 4);
  tt_node_t *d = keep(mk(TT_OP_DOT, OPS(a, b), IA(0, 1)));
  g = propagate(1, &d);
  EXPECT(g, d, "{devices=[4,1,1]0,1,2,3}", FWD);
  EXPECT(g, b, "{devices=[4,1,1]0,1,2,3}", BWD);
  EXPECT_LOCAL(g, d, "{devices=[4,1,1,1]0,1,2,3 last_tile_dim_replicate}", 1, -1);
  finish(g);
}

/* nn.Linear as the lowering records it: reshapes around a rank-3 dot, the
 * weight [out, in] transposed, the bias added. Batch over data, the
 * weight's rows (output features) over model. */
static void test_linear_as_recorded(void) {
  tt_node_t *x = keep(P(TT_F32, 16, 12)), *w = keep(P(TT_F32, 8, 12)), *b = keep(P(TT_F32, 8));
  annotate(x, "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}", 8);
  annotate(w, "{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}", 8);
  tt_node_t *x3 = keep(mk(TT_OP_RESHAPE, OPS(x), IA(1, 16, 12)));
  tt_node_t *wt = keep(mk(TT_OP_TRANSPOSE, OPS(w), IA(1, 0)));
  tt_node_t *w3 = keep(mk(TT_OP_RESHAPE, OPS(wt), IA(1, 12, 8)));
  tt_node_t *d = keep(mk(TT_OP_DOT, OPS(x3, w3), IA(0, 0)));
  tt_node_t *y2 = keep(mk(TT_OP_RESHAPE, OPS(d), IA(16, 8)));
  tt_node_t *y = keep(mk(TT_OP_BINARY, OPS(y2, b), IA(TT_BIN_ADD)));
  tt_graph_t *g = propagate(1, &y);
  EXPECT(g, wt, "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}", FWD);
  EXPECT(g, d, DATA_MODEL, FWD);
  EXPECT(g, y, "{devices=[2,4]0,1,2,3,4,5,6,7}", FWD);
  /* The bias follows the output features. */
  EXPECT(g, b, "{devices=[4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}", BWD);
  finish(g);
}

/* Row-parallel with the output wanted sharded over model: the local layout
 * holds partial sums the partitioner reduce-scatters. */
static void test_partial_then_reshard(void) {
  tt_node_t *h = keep(P(TT_F32, 1, 16, 8)), *w = keep(P(TT_F32, 1, 8, 12));
  annotate(h, "{devices=[1,1,4]0,1,2,3}", 4);
  annotate(w, "{devices=[1,4,1]0,1,2,3}", 4);
  tt_node_t *o = keep(mk(TT_OP_DOT, OPS(h, w), IA(0, 0)));
  annotate(o, "{devices=[1,1,4]0,1,2,3}", 4);
  tt_graph_t *g = propagate(1, &o);
  EXPECT(g, o, "{devices=[1,1,4]0,1,2,3}", USER);
  EXPECT_LOCAL(g, o, "{devices=[1,1,1,4]0,1,2,3 last_tile_dim_replicate}", 4, TT_RED_SUM);
  finish(g);
}

/* The local layout merges the operands' where their partial groups allow. */
static void test_local_layouts(void) {
  /* Batch over data, K over model in the weight only: each device slices
   * its K rows of x locally; 4 partial sums per batch tile. */
  tt_node_t *x = keep(P(TT_F32, 1, 16, 12)), *w = keep(P(TT_F32, 1, 12, 8));
  annotate(x, DATA_B, 8);
  annotate(w, MODEL_K, 8);
  tt_node_t *o = keep(mk(TT_OP_DOT, OPS(x, w), IA(0, 0)));
  tt_graph_t *g = propagate(1, &o);
  EXPECT(g, o, DATA_B, FWD);
  EXPECT_LOCAL(g, o, DATA_B, 4, TT_RED_SUM);
  finish(g);
  /* K over model in x, N over model in w: the model devices cannot hold
   * both partial sums and column tiles, so w is left to be resharded. */
  x = keep(P(TT_F32, 1, 16, 12));
  w = keep(P(TT_F32, 1, 12, 8));
  annotate(x, "{devices=[1,1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}", 8);
  annotate(w, MODEL_N, 8);
  o = keep(mk(TT_OP_DOT, OPS(x, w), IA(0, 0)));
  g = propagate(1, &o);
  EXPECT(g, o, MODEL_N, FWD);
  EXPECT_LOCAL(g, o, "{devices=[1,1,1,8]0,4,1,5,2,6,3,7 last_tile_dim_replicate}", 4,
               TT_RED_SUM);
  finish(g);
}

static void test_backward_from_output(void) {
  /* Nothing annotated but the result: both operands get the layouts the
   * Megatron column-parallel layer wants, through a relu. */
  tt_node_t *x = keep(P(TT_F32, 1, 16, 12)), *w = keep(P(TT_F32, 1, 12, 8));
  tt_node_t *h = keep(mk(TT_OP_DOT, OPS(x, w), IA(0, 0)));
  tt_node_t *r = keep(mk(TT_OP_UNARY, OPS(h), IA(TT_UN_RELU)));
  annotate(r, DATA_MODEL, 8);
  tt_graph_t *g = propagate(1, &r);
  EXPECT(g, r, DATA_MODEL, USER);
  EXPECT(g, h, DATA_MODEL, BWD);
  EXPECT(g, x, DATA_B, BWD);
  EXPECT(g, w, MODEL_N, BWD);
  finish(g);
}

static void test_conv(void) {
  tt_node_t *x = keep(P(TT_F32, 8, 3, 6, 6)), *w = keep(P(TT_F32, 5, 3, 3, 3));
  annotate(x, "{devices=[4,1,1,1]0,1,2,3}", 4);
  /* stride, padding, dilation, groups */
  tt_node_t *y = keep(mk(TT_OP_CONV2D, OPS(x, w), IA(1, 1, 0, 0, 1, 1, 1)));
  /* The weight gradient over the sharded batch: partial sums (data
   * parallelism's gradient all-reduce). */
  tt_node_t *gw = keep(mk(TT_OP_CONV2D_BWD_WEIGHT, OPS(y, x),
                          IA(1, 1, 0, 0, 1, 1, 1, 5, 3, 3, 3)));
  tt_node_t *roots[2] = {y, gw};
  tt_graph_t *g = propagate(2, roots);
  EXPECT(g, y, "{devices=[4,1,1,1]0,1,2,3}", FWD);
  EXPECT(g, w, "{replicated}", BWD);
  EXPECT(g, gw, "{replicated}", FWD);
  EXPECT_LOCAL(g, gw, "{devices=[1,1,1,1,4]0,1,2,3 last_tile_dim_replicate}", 4, TT_RED_SUM);
  finish(g);
}

static void test_gather_embedding(void) {
  /* A vocabulary-parallel table: each device looks up its rows. */
  tt_node_t *table = keep(P(TT_F32, 100, 16)), *ids = keep(P(TT_I64, 12));
  annotate(table, R4, 4);
  tt_node_t *emb = keep(mk(TT_OP_INDEX_SELECT, OPS(table, ids), IA(0)));
  tt_graph_t *g = propagate(1, &emb);
  EXPECT(g, emb, "{replicated}", FWD);
  EXPECT_LOCAL(g, emb, "{devices=[1,1,4]0,1,2,3 last_tile_dim_replicate}", 4, TT_RED_SUM);
  EXPECT(g, ids, "{replicated}", BWD);
  finish(g);
  /* Sharded indices shard the lookups. */
  table = keep(P(TT_F32, 100, 16));
  ids = keep(P(TT_I64, 12));
  annotate(ids, "{devices=[4]0,1,2,3}", 4);
  emb = keep(mk(TT_OP_INDEX_SELECT, OPS(table, ids), IA(0)));
  tt_node_t *x = keep(P(TT_F32, 8, 6)), *idx = keep(P(TT_I64, 8, 2));
  annotate(idx, R4, 4);
  tt_node_t *gat = keep(mk(TT_OP_GATHER, OPS(x, idx), IA(1)));
  tt_node_t *roots[2] = {emb, gat};
  g = propagate(2, roots);
  EXPECT(g, emb, R4, FWD);
  CHECK(rec(g, emb)->partial_count == 1);
  EXPECT(g, table, "{replicated}", BWD);
  EXPECT(g, gat, R4, FWD);
  EXPECT(g, x, R4, BWD); /* rows line up with the index's */
  finish(g);
}

static void test_softmax_norm_attention_sort(void) {
  tt_node_t *x = keep(P(TT_F32, 8, 4));
  annotate(x, R4, 4);
  tt_node_t *sm1 = keep(mk(TT_OP_SOFTMAX, OPS(x), IA(1, 0)));
  tt_node_t *sm0 = keep(mk(TT_OP_SOFTMAX, OPS(x), IA(0, 1)));
  /* axis, has_weight, has_bias, form */
  tt_node_t *ln = keep(mk(TT_OP_LAYER_NORM, OPS(x), IA(1, 0, 0, 0)));
  tt_node_t *srt1 = keep(mk(TT_OP_ARGSORT, OPS(x), IA(1, 0)));
  tt_node_t *cum0 = keep(mk(TT_OP_CUMULATIVE, OPS(x), IA(TT_CUM_MAX, 0)));
  tt_node_t *roots[5] = {sm1, sm0, ln, srt1, cum0};
  tt_graph_t *g = propagate(5, roots);
  EXPECT(g, sm1, R4, FWD);
  EXPECT(g, sm0, "{replicated}", FWD);
  EXPECT(g, ln, R4, FWD);
  EXPECT(g, srt1, R4, FWD);
  EXPECT(g, cum0, "{replicated}", FWD);
  finish(g);
  /* Heads over 4 devices: q carries them to the output, k and v follow. */
  tt_node_t *q = keep(P(TT_F32, 2, 4, 8, 16)), *k = keep(P(TT_F32, 2, 4, 8, 16));
  tt_node_t *v = keep(P(TT_F32, 2, 4, 8, 16));
  annotate(q, "{devices=[1,4,1,1]0,1,2,3}", 4);
  tt_node_t *att = keep(mk(TT_OP_ATTENTION, OPS(q, k, v), IA(0)));
  g = propagate(1, &att);
  EXPECT(g, att, "{devices=[1,4,1,1]0,1,2,3}", FWD);
  EXPECT(g, k, "{devices=[1,4,1,1]0,1,2,3}", BWD);
  EXPECT(g, v, "{devices=[1,4,1,1]0,1,2,3}", BWD);
  finish(g);
}

static void test_rng_and_collectives(void) {
  /* A random tensor takes its user's layout; the seed stays replicated. */
  tt_node_t *seed = keep(tt_node_create_scalar(TT_I64, 0, 7, 0)), *x = keep(P(TT_F32, 8, 4));
  annotate(x, R4, 4);
  tt_node_t *r = keep(mk(TT_OP_RNG, OPS(seed), IA(TT_RNG_UNIFORM, TT_F32, 8, 4)));
  tt_node_t *y = keep(mk(TT_OP_BINARY, OPS(r, x), IA(TT_BIN_ADD)));
  /* all_reduce keeps the layout; all_gather along the sharded dim needs it
   * whole (one group of 4: reduce, reserved x2, channel, group size, ids). */
  tt_node_t *ar = keep(mk(TT_OP_ALL_REDUCE, OPS(y), IA(TT_RED_SUM, 0, 0, 0, 4, 0, 1, 2, 3)));
  tt_node_t *ag = keep(mk(TT_OP_ALL_GATHER, OPS(y), IA(0, 4, 0, 0, 4, 0, 1, 2, 3)));
  tt_node_t *roots[2] = {ar, ag};
  tt_graph_t *g = propagate(2, roots);
  EXPECT(g, r, R4, BWD);
  EXPECT(g, seed, "{replicated}", BWD);
  EXPECT(g, ar, R4, FWD);
  EXPECT(g, ag, "{replicated}", FWD);
  finish(g);
}

static void test_conflicts(void) {
  tt_node_t *x = keep(P(TT_F32, 8, 8)), *y = keep(P(TT_F32, 8, 8));
  annotate(x, R4, 4);
  annotate(y, "{devices=[1,4]0,1,2,3}", 4);
  /* As many tiles each: the first operand's layout. */
  tt_node_t *xy = keep(mk(TT_OP_BINARY, OPS(x, y), IA(TT_BIN_ADD)));
  tt_node_t *yx = keep(mk(TT_OP_BINARY, OPS(y, x), IA(TT_BIN_ADD)));
  /* More tiles win over operand order. */
  tt_node_t *z = keep(P(TT_F32, 8, 8));
  annotate(z, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", 4);
  tt_node_t *zy = keep(mk(TT_OP_BINARY, OPS(z, y), IA(TT_BIN_ADD)));
  tt_node_t *roots[3] = {xy, yx, zy};
  tt_graph_t *g = propagate(3, roots);
  EXPECT(g, xy, R4, FWD);
  EXPECT(g, yx, "{devices=[1,4]0,1,2,3}", FWD);
  EXPECT(g, zy, "{devices=[1,4]0,1,2,3}", FWD);
  finish(g);
  /* Compatible partial shardings merge: rows over data, columns over model. */
  x = keep(P(TT_F32, 8, 8));
  y = keep(P(TT_F32, 8, 8));
  annotate(x, "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}", 8);
  annotate(y, "{devices=[1,4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}", 8);
  xy = keep(mk(TT_OP_BINARY, OPS(x, y), IA(TT_BIN_ADD)));
  g = propagate(1, &xy);
  EXPECT(g, xy, "{devices=[2,4]0,1,2,3,4,5,6,7}", FWD);
  finish(g);
  /* Forward runs first: a user's different wish does not undo it. */
  x = keep(P(TT_F32, 8, 8));
  annotate(x, R4, 4);
  tt_node_t *e = keep(mk(TT_OP_UNARY, OPS(x), IA(TT_UN_EXP)));
  tt_node_t *f = keep(mk(TT_OP_UNARY, OPS(e), IA(TT_UN_EXP)));
  annotate(f, "{devices=[1,4]0,1,2,3}", 4);
  g = propagate(1, &f);
  EXPECT(g, e, R4, FWD);
  EXPECT(g, f, "{devices=[1,4]0,1,2,3}", USER);
  EXPECT_LOCAL(g, f, "{devices=[4,1,1]0,1,2,3 last_tile_dim_replicate}", 1, -1);
  finish(g);
}

static void test_manual_region(void) {
  tt_node_t *x = keep(P(TT_F32, 8, 4));
  /* num_tile_dims, last_tile_dim_replicate, tile dims, num_devices, devices */
  tt_node_t *s = keep(mk(TT_OP_SPMD_FULL_TO_SHARD, OPS(x), IA(2, 0, 4, 1, 4, 0, 1, 2, 3)));
  tt_node_t *e = keep(mk(TT_OP_UNARY, OPS(s), IA(TT_UN_EXP)));
  tt_node_t *f = keep(mk(TT_OP_SPMD_SHARD_TO_FULL, OPS(e), IA(2, 0, 4, 1, 4, 0, 1, 2, 3, 8, 4)));
  tt_node_t *o = keep(mk(TT_OP_UNARY, OPS(f), IA(TT_UN_EXP)));
  tt_graph_t *g = propagate(1, &o);
  EXPECT(g, x, R4, BWD);
  EXPECT(g, s, "{manual}", FWD);
  EXPECT(g, e, "{manual}", FWD);
  EXPECT(g, f, R4, FWD);
  EXPECT(g, o, R4, FWD);
  CHECK(rec(g, s)->local == NULL && rec(g, s)->sharding->num_devices == 4);
  finish(g);
}

/* A long chain annotated at its end: one backward sweep carries the
 * layout to the input, and the chain between is filled in. */
static void test_long_chain(void) {
  tt_node_t *x = keep(P(TT_F32, 8, 4)), *y = x;
  tt_node_retain(x);
  for (int i = 0; i < 300; ++i) {
    tt_node_t *next = mk(TT_OP_UNARY, OPS(y), IA(i % 2 ? TT_UN_EXP : TT_UN_RELU));
    tt_node_release(y);
    y = next;
  }
  keep(y);
  annotate(y, R4, 4);
  tt_graph_t *g = propagate(1, &y);
  EXPECT(g, x, R4, BWD);
  int all = 1;
  for (int32_t i = 0; i < g->num_instrs; ++i)
    all &= tt_sharding_equal(g->sharding_prop[i].sharding, rec(g, y)->sharding);
  CHECK(all && g->num_instrs == 301);
  finish(g);
}

static void test_unsharded_and_errors(void) {
  tt_node_t *x = keep(P(TT_F32, 8, 4));
  tt_node_t *y = keep(mk(TT_OP_UNARY, OPS(x), IA(TT_UN_EXP)));
  tt_graph_t *g = NULL;
  CHECK_OK(tt_graph_build(&y, 1, &g, NULL));
  uint64_t hash = g->hash;
  tt_instr_t before = g->instrs[1];
  CHECK(g->sharding_prop == NULL); /* nothing made by a build */
  CHECK_OK(tt_pass_propagate_sharding(g));
  CHECK(g->hash == hash && memcmp(&before, &g->instrs[1], sizeof before) == 0);
  EXPECT(g, x, "{replicated}", DEF);
  EXPECT(g, y, "{replicated}", DEF);
  CHECK(rec(g, y)->sharding->num_devices == 0);
  /* Running again replaces the record. */
  CHECK_OK(tt_pass_propagate_sharding(g));
  EXPECT(g, y, "{replicated}", DEF);
  /* An annotation that does not fit its instruction. */
  tt_sharding_t *bad = parse("{devices=[4]0,1,2,3}", 4);
  g->instrs[1].sharding = bad;
  tt_status_t st = tt_pass_propagate_sharding(g);
  CHECK(st && tt_status_code(st) == TT_INVALID_ARGUMENT &&
        strstr(tt_status_message(st), "instruction 1 (unary): sharding: 1 tile dims for a "
                                      "tensor of rank 2"),
        "%s", st ? tt_status_message(st) : "no error");
  tt_status_free(st);
  free(bad);
  finish(g);
}

static void test_algebra(void) {
  /* Merging refuses tiles that disagree and grids that do not split the devices. */
  tt_sharding_t *a = parse("{devices=[4,1]0,1,2,3}", 4), *b = parse("{devices=[4,1]1,0,2,3}", 4);
  tt_sharding_t *c = parse("{devices=[1,4]0,1,2,3}", 4);
  tt_sharding_t *fa = tt_sharding_full(a, 2), *fb = tt_sharding_full(b, 2);
  tt_sharding_t *fc = tt_sharding_full(c, 2);
  tt_sharding_t *m = tt_sharding_merge(fa, fb, 2);
  CHECK(m == NULL);
  free(m);
  m = tt_sharding_merge(fa, fc, 2);
  CHECK(m == NULL);
  free(m);
  m = tt_sharding_merge(fa, fa, 2);
  CHECK(m && tt_sharding_same_tiles(m, fa, 2) && !tt_sharding_same_tiles(fa, fb, 2));
  CHECK(tt_sharding_tiles(fa, 2) == 4);
  free(m);
  /* Partial groups must agree device by device. */
  tt_sharding_t *pa = parse("{devices=[1,4]0,1,2,3 last_tile_dim_replicate}", 4);
  tt_sharding_t *pb = parse("{devices=[1,4]1,0,2,3 last_tile_dim_replicate}", 4);
  int64_t count = 0;
  m = tt_sharding_merge_partial(pa, 4, pb, 4, 1, &count);
  CHECK(m == NULL);
  m = tt_sharding_merge_partial(pa, 4, pa, 4, 1, &count);
  CHECK(m && count == 4 && tt_sharding_equal(m, pa));
  free(m);
  /* Two groups of two: a tile split over the group's devices refuses. */
  tt_sharding_t *t4 = parse("{devices=[4]0,1,2,3}", 4), *ft4 = tt_sharding_full(t4, 1);
  m = tt_sharding_merge_partial(pa, 2, ft4, 1, 1, &count);
  CHECK(m == NULL);
  /* Tiles of two that each hold both groups: merged, listed group-major. */
  tt_sharding_t *t2 = parse("{devices=[2,2]0,2,1,3 last_tile_dim_replicate}", 4);
  m = tt_sharding_merge_partial(pa, 2, t2, 1, 1, &count);
  expect_text(m, "{devices=[2,2]0,2,1,3 last_tile_dim_replicate}", __LINE__, "merged");
  CHECK(count == 2);
  free(m);
  free(t2);
  free(t4);
  free(ft4);
  free(pa);
  free(pb);
  free(a);
  free(b);
  free(c);
  free(fa);
  free(fb);
  free(fc);
}

int main(void) {
  CHECK_OK(tt_runtime_init(1));
  float data[4] = {0};
  CHECK_OK(tt_buffer_from_host(0, data, sizeof(data), &g_buf));
  test_every_op_has_a_rule();
  test_elementwise_broadcast();
  test_transpose_reshape();
  test_slice_concat_pad();
  test_reduce();
  test_dot();
  test_linear_as_recorded();
  test_partial_then_reshard();
  test_local_layouts();
  test_backward_from_output();
  test_conv();
  test_gather_embedding();
  test_softmax_norm_attention_sort();
  test_rng_and_collectives();
  test_conflicts();
  test_manual_region();
  test_long_chain();
  test_unsharded_and_errors();
  test_algebra();
  tt_buffer_release(g_buf);
  return test_summary();
}
