/* The op table and its per-backend companions: every op has an entry with
 * a name, an operand range, an attribute schema that fits its struct and
 * (but graph inputs) a shape inference; every op exactly one StableHLO
 * lowering registered (a description, and a function but for the graph
 * inputs) and every op but the graph inputs exactly one CPU tier-0
 * executor registered (and each registration check names an op registered
 * twice, missing, or a graph input registered with a function). The attribute
 * codec: round trips, storage order, optional fields, floats, and the
 * layouts it refuses. Node creation: the operand range and attribute
 * layout checks that come from the table, and the complex-dtype rule. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/exec.h"
#include "backends/stablehlo/emit_internal.h"
#include "test_harness.h"
#include "torchtpu/op_table.h"
#include "torchtpu/stablehlo.h"

static void check_error(tt_status_t st, tt_code_t code, const char *needle) {
  CHECK(st != NULL);
  if (!st) return;
  CHECK(tt_status_code(st) == code);
  if (!strstr(tt_status_message(st), needle)) {
    fprintf(stderr, "message \"%s\" lacks \"%s\"\n", tt_status_message(st), needle);
    CHECK(0);
  }
  tt_status_free(st);
}

static size_t field_size(const tt_attr_field_t *f) {
  switch (f->kind) {
    case TT_ATTR_INT:
    case TT_ATTR_FLOAT:
      return 8;
    case TT_ATTR_INTS:
      return 8 * (size_t)f->count;
    case TT_ATTR_LIST:
      return sizeof(tt_attr_list_t);
  }
  return (size_t)-1;
}

/* Reports the op by name with the failing property (a CHECK's line alone
 * does not say which of 56 entries broke). */
#define CHECK_OP(op, cond)                                                       \
  do {                                                                           \
    if (!(cond)) fprintf(stderr, "op %d (%s): %s\n", (int)(op), tt_op_name(op), #cond); \
    CHECK(cond);                                                                 \
  } while (0)

static void test_entries(void) {
  /* An op without an executor or a StableHLO lowering (or with two) fails
   * here, naming it. */
  CHECK_OK(tt_cpu_exec_table_check());
  CHECK_OK(tt_shlo_table_check());
  CHECK(tt_op_info((tt_op_t)TT_OP_COUNT) == NULL);
  CHECK(tt_op_info((tt_op_t)-1) == NULL);
  CHECK(strcmp(tt_op_name((tt_op_t)TT_OP_COUNT), "?") == 0);
  for (int op = 0; op < TT_OP_COUNT; ++op) {
    const tt_op_info_t *info = tt_op_info((tt_op_t)op);
    CHECK_OP(op, info != NULL);
    if (!info) continue;
    CHECK_OP(op, info->name && info->name[0]);
    CHECK_OP(op, strcmp(tt_op_name((tt_op_t)op), info->name) == 0);
    for (int other = 0; other < op; ++other) {
      const tt_op_info_t *o = tt_op_info((tt_op_t)other);
      if (o && o->name && info->name) CHECK_OP(op, strcmp(o->name, info->name) != 0);
    }
    CHECK_OP(op, info->min_operands >= 0);
    CHECK_OP(op, info->max_operands == -1 || info->max_operands >= info->min_operands);
    int input = (info->flags & TT_OPF_INPUT) != 0;
    CHECK_OP(op, input ? info->infer == NULL : info->infer != NULL);
    CHECK_OP(op, (info->fields == NULL) == (info->num_fields == 0));
    CHECK_OP(op, info->attrs_size > 0 && info->attrs_size <= TT_ATTRS_MAX_SIZE);
    int floats = 0, lists = 0;
    for (int32_t f = 0; f < info->num_fields; ++f) {
      const tt_attr_field_t *fd = &info->fields[f];
      size_t sz = field_size(fd);
      CHECK_OP(op, fd->name && fd->name[0]);
      CHECK_OP(op, fd->kind == TT_ATTR_INTS ? fd->count >= 1 : fd->count == 1);
      CHECK_OP(op, sz != (size_t)-1 && fd->offset + sz <= info->attrs_size);
      CHECK_OP(op, fd->offset % 8 == 0 || fd->kind == TT_ATTR_LIST);
      /* No two fields share bytes of the struct. */
      for (int32_t g = 0; g < f; ++g) {
        const tt_attr_field_t *gd = &info->fields[g];
        CHECK_OP(op, fd->offset >= gd->offset + field_size(gd) ||
                         gd->offset >= fd->offset + sz);
      }
      floats += fd->kind == TT_ATTR_FLOAT;
      lists += fd->kind == TT_ATTR_LIST;
    }
    CHECK_OP(op, floats <= TT_MAX_FATTRS);
    /* The backends' tables. */
    CHECK_OP(op, tt_stablehlo_op_lowering((tt_op_t)op) != NULL);
    const tt_shlo_table_t *shlo = tt_shlo_table();
    CHECK_OP(op, shlo != NULL);
    if (shlo) CHECK_OP(op, input ? shlo->fn[op] == NULL : shlo->fn[op] != NULL);
    CHECK_OP(op, input ? tt_cpu_executor((tt_op_t)op) == NULL : 1);
    if (!input) CHECK_OP(op, tt_cpu_executor((tt_op_t)op) != NULL);
  }
  CHECK(tt_op_has_flag(TT_OP_PARAM, TT_OPF_INPUT));
  CHECK(tt_op_has_flag(TT_OP_ALL_GATHER, TT_OPF_COLLECTIVE));
  CHECK(!tt_op_has_flag(TT_OP_DOT, TT_OPF_COLLECTIVE));
  CHECK(!tt_op_has_flag((tt_op_t)TT_OP_COUNT, TT_OPF_INPUT));
}

static tt_status_t dummy_exec(const tt_cpu_exec_t *c, tt_view_t *out) {
  (void)c;
  (void)out;
  return NULL;
}

/* The registration check on lists made here: the backend's own lists
 * build the backend's table; one more row for conv2d, the lists without
 * the family that registers conv2d, and a row for a graph input are each
 * refused, naming the op. */
static void test_cpu_exec_registrations(void) {
  tt_cpu_exec_fn table[TT_OP_COUNT];
  const tt_cpu_exec_row_t *lists[32];
  int n = 0, conv_family = -1;
  for (; tt_cpu_exec_families[n]; ++n) {
    lists[n] = tt_cpu_exec_families[n];
    for (const tt_cpu_exec_row_t *r = lists[n]; r->fn; ++r)
      if (r->op == TT_OP_CONV2D) conv_family = n;
  }
  CHECK(n > 0 && n < 30 && conv_family >= 0);
  if (n <= 0 || n >= 30 || conv_family < 0) return;
  lists[n] = NULL;
  CHECK_OK(tt_cpu_exec_table_build(lists, table));
  for (int op = 0; op < TT_OP_COUNT; ++op)
    CHECK_OP(op, table[op] == tt_cpu_executor((tt_op_t)op));

  const tt_cpu_exec_row_t twice[] = {{TT_OP_CONV2D, dummy_exec}, TT_CPU_EXEC_ROWS_END};
  lists[n] = twice;
  lists[n + 1] = NULL;
  check_error(tt_cpu_exec_table_build(lists, table), TT_INTERNAL,
              "op conv2d has two executors registered");

  const tt_cpu_exec_row_t input[] = {{TT_OP_PARAM, dummy_exec}, TT_CPU_EXEC_ROWS_END};
  lists[n] = input;
  check_error(tt_cpu_exec_table_build(lists, table), TT_INTERNAL,
              "op param is a graph input and takes no executor");

  const tt_cpu_exec_row_t no_fn[] = {{TT_OP_DOT, NULL}, TT_CPU_EXEC_ROWS_END};
  lists[n] = no_fn;
  check_error(tt_cpu_exec_table_build(lists, table), TT_INTERNAL, "(dot) has no executor function");

  /* Without conv2d's family: the first op left without one is named, the
   * family's lowest op (others' ops are all registered). */
  int m = 0, lowest = TT_OP_COUNT;
  for (int f = 0; f < n; ++f)
    if (f != conv_family) lists[m++] = tt_cpu_exec_families[f];
  lists[m] = NULL;
  for (const tt_cpu_exec_row_t *r = tt_cpu_exec_families[conv_family]; r->fn; ++r)
    if ((int)r->op < lowest) lowest = (int)r->op;
  char want[96];
  snprintf(want, sizeof want, "op %s has no executor registered", tt_op_name((tt_op_t)lowest));
  check_error(tt_cpu_exec_table_build(lists, table), TT_INTERNAL, want);
}

static tt_shv_t dummy_lowering(tt_shlo_t *c, const tt_shlo_instr_t *ins) {
  (void)c;
  (void)ins;
  return -1;
}

/* The StableHLO emitter's registration check, as the CPU backend's: its
 * own lists build its table (the descriptions tt_stablehlo_op_lowering
 * gives); a second row for conv2d, a function for a graph input, none for
 * another op, a row without a description, and the lists without the
 * family that lowers conv2d are each refused, naming the op. */
static void test_shlo_registrations(void) {
  tt_shlo_table_t *t = malloc(sizeof *t);
  CHECK(t != NULL);
  if (!t) return;
  const tt_shlo_row_t *lists[32];
  int n = 0, conv_family = -1;
  for (; tt_shlo_families[n] && n < 30; ++n) {
    lists[n] = tt_shlo_families[n];
    for (const tt_shlo_row_t *r = lists[n]; r->op != TT_OP_COUNT; ++r)
      if (r->op == TT_OP_CONV2D) conv_family = n;
  }
  CHECK(n > 0 && n < 30 && conv_family >= 0);
  if (n <= 0 || n >= 30 || conv_family < 0) {
    free(t);
    return;
  }
  lists[n] = NULL;
  CHECK_OK(tt_shlo_table_build(lists, t));
  const tt_shlo_table_t *built = tt_shlo_table();
  CHECK(built != NULL);
  for (int op = 0; op < TT_OP_COUNT && built; ++op) {
    CHECK_OP(op, t->fn[op] == built->fn[op]);
    CHECK_OP(op, t->how[op] == tt_stablehlo_op_lowering((tt_op_t)op));
  }

  const tt_shlo_row_t twice[] = {{TT_OP_CONV2D, dummy_lowering, "again"}, TT_SHLO_ROWS_END};
  lists[n] = twice;
  lists[n + 1] = NULL;
  check_error(tt_shlo_table_build(lists, t), TT_INTERNAL,
              "stablehlo: op conv2d has two lowerings registered");

  const tt_shlo_row_t input[] = {{TT_OP_PARAM, dummy_lowering, "argument"}, TT_SHLO_ROWS_END};
  lists[n] = input;
  check_error(tt_shlo_table_build(lists, t), TT_INTERNAL,
              "op param is a graph input (a function argument) and takes no lowering function");

  const tt_shlo_row_t no_fn[] = {{TT_OP_DOT, NULL, "nothing"}, TT_SHLO_ROWS_END};
  lists[n] = no_fn;
  check_error(tt_shlo_table_build(lists, t), TT_INTERNAL,
              "op dot is registered without a lowering function");

  const tt_shlo_row_t no_how[] = {{TT_OP_DOT, dummy_lowering, ""}, TT_SHLO_ROWS_END};
  lists[n] = no_how;
  check_error(tt_shlo_table_build(lists, t), TT_INTERNAL,
              "the registration of op dot has no description");

  /* Without conv2d's family: the family's lowest op is named (the other
   * families register all theirs), and the rest of the table is built. */
  int m = 0, lowest = TT_OP_COUNT;
  for (int f = 0; f < n; ++f)
    if (f != conv_family) lists[m++] = tt_shlo_families[f];
  lists[m] = NULL;
  for (const tt_shlo_row_t *r = tt_shlo_families[conv_family]; r->op != TT_OP_COUNT; ++r)
    if ((int)r->op < lowest) lowest = (int)r->op;
  char want[128];
  snprintf(want, sizeof want, "stablehlo: op %s has no lowering registered",
           tt_op_name((tt_op_t)lowest));
  check_error(tt_shlo_table_build(lists, t), TT_INTERNAL, want);
  CHECK(t->fn[TT_OP_CONV2D] == NULL && t->how[TT_OP_CONV2D] == NULL);
  CHECK(t->fn[TT_OP_UNARY] != NULL && t->how[TT_OP_PARAM] != NULL);
  free(t);
}

/* Fixed fields: every value in storage order, and back. */
static void test_codec_fixed(void) {
  tt_conv2d_bwd_attrs_t in = {{1, 2}, {3, 4}, {5, 6}, 7, {8, 9, 10, 11}}, out;
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS] = {9, 9, 9, 9};
  int32_t ni = -1, nf = -1;
  CHECK_OK(tt_attrs_encode(TT_OP_CONV2D_BWD_INPUT, &in, sizeof in, -1, ia, &ni, fa));
  CHECK(ni == 11);
  for (int k = 0; k < 11 && ni == 11; ++k) CHECK(ia[k] == k + 1);
  for (int k = 0; k < TT_MAX_FATTRS; ++k) CHECK(fa[k] == 0); /* zero-filled */
  memset(&out, 0x5a, sizeof out);
  CHECK_OK(tt_attrs_decode(TT_OP_CONV2D_BWD_INPUT, ia, ni, fa, &out, sizeof out, &nf));
  CHECK(nf == 5);
  CHECK(memcmp(&in, &out, sizeof in) == 0);

  /* A field then a list: bitcast [dtype, dims...]. */
  tt_bitcast_attrs_t bc = {0}, bc2;
  bc.dtype = TT_I32;
  bc.dims.n = 2;
  bc.dims.v[0] = 6;
  bc.dims.v[1] = 7;
  CHECK_OK(tt_attrs_encode(TT_OP_BITCAST, &bc, sizeof bc, -1, ia, &ni, fa));
  CHECK(ni == 3 && ia[0] == TT_I32 && ia[1] == 6 && ia[2] == 7);
  /* TT_ATTRS reads anything with op, num_iattrs, iattrs and fattrs. */
  tt_instr_t instr;
  memset(&instr, 0, sizeof instr);
  instr.op = TT_OP_BITCAST;
  instr.num_iattrs = ni;
  memcpy(instr.iattrs, ia, sizeof(int64_t) * (size_t)ni);
  CHECK(TT_ATTRS(&instr, &bc2) == 2);
  CHECK(bc2.dtype == TT_I32 && bc2.dims.n == 2 && bc2.dims.v[0] == 6 && bc2.dims.v[1] == 7);
}

/* Lists sharing the ints equally: slice's start, limit and step. */
static void test_codec_lists(void) {
  const int32_t lens[] = {0, 1, 3, TT_MAX_IATTRS / 3};
  for (size_t t = 0; t < sizeof lens / sizeof lens[0]; ++t) {
    int32_t len = lens[t];
    tt_slice_attrs_t in, out;
    memset(&in, 0, sizeof in);
    in.start.n = in.limit.n = in.step.n = len;
    for (int32_t d = 0; d < len; ++d) {
      in.start.v[d] = 100 + d;
      in.limit.v[d] = 200 + d;
      in.step.v[d] = 300 + d;
    }
    int64_t ia[TT_MAX_IATTRS];
    double fa[TT_MAX_FATTRS];
    int32_t ni = -1;
    CHECK_OK(tt_attrs_encode(TT_OP_SLICE, &in, sizeof in, -1, ia, &ni, fa));
    CHECK(ni == 3 * len);
    for (int32_t d = 0; d < len && ni == 3 * len; ++d)
      CHECK(ia[d] == 100 + d && ia[len + d] == 200 + d && ia[2 * len + d] == 300 + d);
    CHECK_OK(tt_attrs_decode(TT_OP_SLICE, ia, ni, fa, &out, sizeof out, NULL));
    CHECK(out.start.n == len && out.limit.n == len && out.step.n == len);
    for (int32_t d = 0; d < len && out.start.n == len; ++d)
      CHECK(out.start.v[d] == 100 + d && out.limit.v[d] == 200 + d && out.step.v[d] == 300 + d);
  }
  /* The collectives' header then the groups list. */
  tt_all_gather_attrs_t ag = {0}, ag2;
  ag.dim = 1, ag.shard_count = 2, ag.channel_id = 3, ag.group_size = 2;
  ag.groups.n = 4;
  for (int k = 0; k < 4; ++k) ag.groups.v[k] = 3 - k;
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS];
  int32_t ni = -1;
  CHECK_OK(tt_attrs_encode(TT_OP_ALL_GATHER, &ag, sizeof ag, -1, ia, &ni, fa));
  CHECK(ni == TT_COLLECTIVE_HEADER + 4 && ia[0] == 1 && ia[1] == 2 && ia[2] == 0 &&
        ia[3] == 3 && ia[4] == 2 && ia[5] == 3 && ia[8] == 0);
  CHECK_OK(tt_attrs_decode(TT_OP_ALL_GATHER, ia, ni, fa, &ag2, sizeof ag2, NULL));
  CHECK(ag2.dim == 1 && ag2.shard_count == 2 && ag2.channel_id == 3 && ag2.group_size == 2 &&
        ag2.groups.n == 4 && ag2.groups.v[3] == 0);
}

/* Optional trailing fields: absent ones decode as 0 and are not written
 * when the caller stops before them. */
static void test_codec_optional(void) {
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS];
  int32_t ni = -1, nf = -1;
  tt_softmax_attrs_t sm = {1, 1, 1}, sm2;
  CHECK_OK(tt_attrs_encode(TT_OP_SOFTMAX, &sm, sizeof sm, 2, ia, &ni, fa));
  CHECK(ni == 2);
  memset(&sm2, 0x5a, sizeof sm2);
  CHECK_OK(tt_attrs_decode(TT_OP_SOFTMAX, ia, ni, fa, &sm2, sizeof sm2, &nf));
  CHECK(nf == 2 && sm2.dim == 1 && sm2.log == 1 && sm2.packed == 0);
  CHECK_OK(tt_attrs_encode(TT_OP_SOFTMAX, &sm, sizeof sm, -1, ia, &ni, fa));
  CHECK(ni == 3 && ia[2] == 1);
  CHECK_OK(tt_attrs_decode(TT_OP_SOFTMAX, ia, ni, fa, &sm2, sizeof sm2, &nf));
  CHECK(nf == 3 && sm2.packed == 1);

  /* Attention: the recorded form (causal, lse) and the strided one. */
  tt_attention_attrs_t at, at2;
  memset(&at, 0, sizeof at);
  at.causal = 1, at.lse = 1, at.B = 2, at.H = 3, at.L = 4, at.S = 5, at.E = 6, at.Ev = 7;
  for (int k = 0; k < 4; ++k) {
    at.q_layout[k] = 10 + k, at.k_layout[k] = 20 + k;
    at.v_layout[k] = 30 + k, at.out_layout[k] = 40 + k;
  }
  at.scale = 0.125;
  CHECK_OK(tt_attrs_encode(TT_OP_ATTENTION, &at, sizeof at, 2, ia, &ni, fa));
  CHECK(ni == 2 && ia[0] == 1 && ia[1] == 1 && fa[0] == 0.125);
  CHECK_OK(tt_attrs_decode(TT_OP_ATTENTION, ia, ni, fa, &at2, sizeof at2, &nf));
  CHECK(nf == 2 && at2.causal == 1 && at2.lse == 1 && at2.B == 0 && at2.out_layout[3] == 0 &&
        at2.scale == 0.125);
  CHECK_OK(tt_attrs_encode(TT_OP_ATTENTION, &at, sizeof at, -1, ia, &ni, fa));
  CHECK(ni == 24 && ia[2] == 2 && ia[7] == 7 && ia[8] == 10 && ia[23] == 43);
  CHECK_OK(tt_attrs_decode(TT_OP_ATTENTION, ia, ni, fa, &at2, sizeof at2, &nf));
  CHECK(nf == 12 && memcmp(&at, &at2, sizeof at) == 0);
}

/* Float fields are fattrs[0..] in order, whatever ints sit between. */
static void test_codec_floats(void) {
  int64_t ia[TT_MAX_IATTRS];
  double fa[TT_MAX_FATTRS];
  int32_t ni = -1;
  tt_rng_attrs_t r = {0}, r2;
  r.op = 2, r.dtype = TT_F32, r.a = -1.5, r.b = 1e-300;
  r.dims.n = 3;
  r.dims.v[0] = 4, r.dims.v[1] = 5, r.dims.v[2] = 6;
  CHECK_OK(tt_attrs_encode(TT_OP_RNG, &r, sizeof r, -1, ia, &ni, fa));
  CHECK(ni == 5 && ia[0] == 2 && ia[1] == TT_F32 && ia[4] == 6);
  CHECK(fa[0] == -1.5 && fa[1] == 1e-300 && fa[2] == 0 && fa[3] == 0);
  CHECK_OK(tt_attrs_decode(TT_OP_RNG, ia, ni, fa, &r2, sizeof r2, NULL));
  CHECK(r2.op == 2 && r2.dtype == TT_F32 && r2.dims.n == 3 && r2.dims.v[1] == 5 &&
        r2.a == -1.5 && r2.b == 1e-300);
  tt_pad_attrs_t p = {0}, p2;
  p.lo.n = p.hi.n = 2;
  p.lo.v[0] = 1, p.lo.v[1] = -2, p.hi.v[0] = 3, p.hi.v[1] = 4;
  p.value = -0.0;
  CHECK_OK(tt_attrs_encode(TT_OP_PAD, &p, sizeof p, -1, ia, &ni, fa));
  CHECK(ni == 4 && ia[1] == -2 && ia[2] == 3);
  fa[0] = 2.75;
  CHECK_OK(tt_attrs_decode(TT_OP_PAD, ia, ni, fa, &p2, sizeof p2, NULL));
  CHECK(p2.lo.n == 2 && p2.hi.v[1] == 4 && p2.value == 2.75);
  tt_unary_attrs_t u = {TT_UN_NEG, 0.5, 0.25}, u2;
  CHECK_OK(tt_attrs_encode(TT_OP_UNARY, &u, sizeof u, -1, ia, &ni, fa));
  CHECK(ni == 1 && ia[0] == TT_UN_NEG && fa[0] == 0.5 && fa[1] == 0.25);
  CHECK_OK(tt_attrs_decode(TT_OP_UNARY, ia, ni, fa, &u2, sizeof u2, NULL));
  CHECK(u2.op == TT_UN_NEG && u2.alpha == 0.5 && u2.beta == 0.25);
}

/* Layouts that fit no schema are refused, naming the op. */
static void test_codec_refusals(void) {
  int64_t ia[TT_MAX_IATTRS] = {0};
  double fa[TT_MAX_FATTRS] = {0};
  _Alignas(max_align_t) unsigned char buf[TT_ATTRS_MAX_SIZE];
  /* Too few ints for the fixed fields. */
  check_error(tt_attrs_decode(TT_OP_CONV2D, ia, 6, fa, buf, sizeof(tt_conv2d_attrs_t), NULL),
              TT_INVALID_ARGUMENT, "conv2d: 6 int attributes fit no layout");
  check_error(tt_attrs_decode(TT_OP_REDUCE, ia, 3, fa, buf, sizeof(tt_reduce_attrs_t), NULL),
              TT_INVALID_ARGUMENT, "reduce: 3 int attributes");
  check_error(tt_attrs_decode(TT_OP_ALL_REDUCE, ia, 4, fa, buf, sizeof(tt_all_reduce_attrs_t),
                              NULL),
              TT_INVALID_ARGUMENT, "all_reduce: 4 int attributes");
  /* Too many for a schema without a list. */
  check_error(tt_attrs_decode(TT_OP_UNARY, ia, 2, fa, buf, sizeof(tt_unary_attrs_t), NULL),
              TT_INVALID_ARGUMENT, "unary: 2 int attributes");
  /* Lists that do not share the rest equally. */
  check_error(tt_attrs_decode(TT_OP_SLICE, ia, 4, fa, buf, sizeof(tt_slice_attrs_t), NULL),
              TT_INVALID_ARGUMENT, "slice: 4 int attributes");
  check_error(tt_attrs_decode(TT_OP_PAD, ia, 3, fa, buf, sizeof(tt_pad_attrs_t), NULL),
              TT_INVALID_ARGUMENT, "pad: 3 int attributes");
  /* Optional fields: all or a prefix, never fewer than the required. */
  check_error(tt_attrs_decode(TT_OP_SOFTMAX, ia, 1, fa, buf, sizeof(tt_softmax_attrs_t), NULL),
              TT_INVALID_ARGUMENT, "softmax: 1 int attributes");
  check_error(tt_attrs_decode(TT_OP_SOFTMAX, ia, 4, fa, buf, sizeof(tt_softmax_attrs_t), NULL),
              TT_INVALID_ARGUMENT, "softmax: 4 int attributes");
  check_error(tt_attrs_decode((int32_t)TT_OP_COUNT, ia, 0, fa, buf, 1, NULL),
              TT_INVALID_ARGUMENT, "unknown op");
  /* Encoding: lists of different lengths, or more ints than a node holds. */
  tt_slice_attrs_t s;
  memset(&s, 0, sizeof s);
  s.start.n = 2, s.limit.n = 2, s.step.n = 1;
  int32_t ni = -1;
  check_error(tt_attrs_encode(TT_OP_SLICE, &s, sizeof s, -1, ia, &ni, fa), TT_INVALID_ARGUMENT,
              "slice: list step has 1 entries, an earlier list 2");
  s.start.n = s.limit.n = s.step.n = TT_MAX_IATTRS / 3 + 1;
  check_error(tt_attrs_encode(TT_OP_SLICE, &s, sizeof s, -1, ia, &ni, fa), TT_INVALID_ARGUMENT,
              "more than 32 int attributes");
}

/* What node creation takes from the table: the operand range, the
 * attribute layout, and which ops may see complex64. */
static void test_node_create(void) {
  tt_node_t *x = tt_node_create_scalar(TT_F32, 1.0, 0, 0);
  tt_node_t *z = tt_node_create_scalar(TT_C64, 1.0, 0, 0);
  tt_node_t *r = NULL;
  tt_node_t *two[2] = {x, x};
  int64_t neg[1] = {TT_UN_NEG};
  check_error(tt_node_create(TT_OP_UNARY, 0, two, 2, neg, 1, NULL, 0, &r), TT_INVALID_ARGUMENT,
              "unary: expected 1 operands, got 2");
  CHECK(r == NULL);
  check_error(tt_node_create(TT_OP_LINALG, 0, NULL, 0, neg, 1, NULL, 0, &r),
              TT_INVALID_ARGUMENT, "linalg: expected 1 to 3 operands, got 0");
  int64_t dim0[1] = {0};
  check_error(tt_node_create(TT_OP_CONCAT, 0, NULL, 0, dim0, 1, NULL, 0, &r),
              TT_INVALID_ARGUMENT, "torch.cat(): expected a non-empty list of Tensors");
  int64_t two_ints[2] = {TT_UN_NEG, 0};
  check_error(tt_node_create(TT_OP_UNARY, 0, &x, 1, two_ints, 2, NULL, 0, &r),
              TT_INVALID_ARGUMENT, "unary: 2 int attributes fit no layout");
  check_error(tt_node_create(TT_OP_PARAM, 0, NULL, 0, NULL, 0, NULL, 0, &r), TT_INTERNAL,
              "param/scalar nodes have their own constructors");
  check_error(tt_node_create((tt_op_t)TT_OP_COUNT, 0, NULL, 0, NULL, 0, NULL, 0, &r),
              TT_INVALID_ARGUMENT, "unknown op");
  double alpha[2] = {0.5, 0};
  CHECK_OK(tt_node_create(TT_OP_UNARY, 0, &x, 1, neg, 1, alpha, 2, &r));
  CHECK(r && r->dtype == TT_F32 && r->shape.rank == 0);
  tt_node_release(r);
  r = NULL;
  /* Complex64: movement ops (TT_OPF_COMPLEX_OK) take it, arithmetic not. */
  int64_t one[1] = {1};
  CHECK_OK(tt_node_create(TT_OP_RESHAPE, 0, &z, 1, one, 1, NULL, 0, &r));
  CHECK(r && r->dtype == TT_C64 && r->shape.rank == 1 && r->shape.dims[0] == 1);
  tt_node_release(r);
  r = NULL;
  check_error(tt_node_create(TT_OP_UNARY, 0, &z, 1, neg, 1, NULL, 0, &r), TT_TYPE_ERROR,
              "unary does not take complex64 tensors");
  /* index_select gathers complex values with integer indices. */
  tt_node_t *idx = tt_node_create_scalar(TT_I64, 0.0, 0, 0);
  tt_node_t *zi[2] = {z, idx};
  CHECK_OK(tt_node_create(TT_OP_INDEX_SELECT, 0, zi, 2, dim0, 1, NULL, 0, &r));
  CHECK(r && r->dtype == TT_C64);
  tt_node_release(r);
  r = NULL;
  tt_node_release(idx);
  tt_node_release(z);
  tt_node_release(x);
}

int main(void) {
  test_entries();
  test_cpu_exec_registrations();
  test_shlo_registrations();
  test_codec_fixed();
  test_codec_lists();
  test_codec_optional();
  test_codec_floats();
  test_codec_refusals();
  test_node_create();
  return test_summary();
}
