/* The elementwise functions' table (TT_UNARY_OPS / TT_BINARY_OPS in
 * torchtpu/kernels.h) against the code that reads it: every function has a
 * unique Python name; lowers to StableHLO for some dtype (through its
 * row's single op, which must then appear in the text, or a case in
 * emit_elementwise.c); and tier-1 code generation agrees with its row: a
 * C expression is emitted as written, TT_EW_TIER1_SPECIAL is written out
 * by tier1_emit_c.c, TT_EW_TIER0_ONLY is not generated at all. A row added
 * without a lowering, or marked for tier 1 without one there, fails here. */
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/codegen.h"
#include "torchtpu/stablehlo.h"

typedef struct ew_row_s {
  int64_t code;
  const char *suffix, *name, *stablehlo, *tier1;
} ew_row_t;

#define UNARY_ROW(suffix, name, shlo, tier1) {TT_UN_##suffix, #suffix, name, shlo, tier1},
#define BINARY_ROW(suffix, name, shlo, tier1) {TT_BIN_##suffix, #suffix, name, shlo, tier1},
static const ew_row_t unary_rows[] = {TT_UNARY_OPS(UNARY_ROW)};
static const ew_row_t binary_rows[] = {TT_BINARY_OPS(BINARY_ROW)};
#undef UNARY_ROW
#undef BINARY_ROW

#define NUM_UNARY ((int)(sizeof(unary_rows) / sizeof(unary_rows[0])))
#define NUM_BINARY ((int)(sizeof(binary_rows) / sizeof(binary_rows[0])))

static void test_names(const ew_row_t *rows, int n, int count, const char *kind) {
  CHECK(n == count, "%s: %d rows for %d codes", kind, n, count);
  for (int i = 0; i < n; ++i) {
    const ew_row_t *r = &rows[i];
    CHECK(r->code == i, "%s row %d (%s) defines code %lld", kind, i, r->suffix,
          (long long)r->code);
    CHECK(r->name && r->name[0], "%s %s has no Python name", kind, r->suffix);
    for (int j = 0; j < i && r->name; ++j)
      CHECK(!rows[j].name || strcmp(rows[j].name, r->name) != 0, "%s %s and %s share name %s",
            kind, rows[j].suffix, r->suffix, r->name);
  }
}

/* StableHLO text of op `code` over scalars of dtype dt, or NULL when there
 * is no lowering (or the engine refuses the node for that dtype). */
static char *lower(tt_op_t op, int64_t code, tt_dtype_t dt) {
  tt_node_t *x = tt_node_create_scalar(dt, 1.5, 1, 0);
  tt_node_t *y = tt_node_create_scalar(dt, 0.5, 1, 0);
  tt_node_t *operands[2] = {x, y};
  double params[2] = {0.25, 2.0}; /* alpha, beta of the parameterised unary functions */
  tt_node_t *n = NULL;
  char *text = NULL;
  tt_status_t st = tt_node_create(op, 0, operands, op == TT_OP_UNARY ? 1 : 2, &code, 1, params,
                                  op == TT_OP_UNARY ? 2 : 0, &n);
  if (!st) st = tt_stablehlo_emit(&n, 1, &text, NULL, NULL);
  if (st) {
    CHECK(tt_status_code(st) != TT_INTERNAL && tt_status_code(st) != TT_RESOURCE_EXHAUSTED,
          "op %d code %lld %s: %s", (int)op, (long long)code, tt_dtype_name(dt),
          tt_status_message(st));
    tt_status_free(st);
    text = NULL;
  }
  tt_node_release(n);
  tt_node_release(x);
  tt_node_release(y);
  return text;
}

static void test_stablehlo(tt_op_t op, const ew_row_t *rows, int n, const char *kind) {
  static const tt_dtype_t dtypes[] = {TT_F32, TT_I32, TT_BOOL};
  for (int i = 0; i < n; ++i) {
    const ew_row_t *r = &rows[i];
    int lowered = 0;
    for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); ++d) {
      char *text = lower(op, r->code, dtypes[d]);
      if (!text) continue;
      /* The row's op is what a float (unary) or a non-bool (binary)
       * operand lowers to; the first such dtype that lowers shows it. */
      if (r->stablehlo && !lowered && dtypes[d] != TT_BOOL) {
        char want[96];
        snprintf(want, sizeof(want), "\"%s%s\"", strchr(r->stablehlo, '.') ? "" : "stablehlo.",
                 r->stablehlo);
        CHECK(strstr(text, want) != NULL, "%s %s over %s: no %s in\n%s", kind, r->suffix,
              tt_dtype_name(dtypes[d]), want, text);
      }
      lowered = 1;
      free(text);
    }
    CHECK(lowered, "%s %s has no StableHLO lowering for float32, int32 or bool", kind, r->suffix);
  }
}

/* Counts the "%s" in fmt; -1 when it holds any other conversion. */
static int count_args(const char *fmt) {
  int n = 0;
  for (const char *p = strchr(fmt, '%'); p; p = strchr(p + 2, '%')) {
    if (p[1] != 's') return -1;
    ++n;
  }
  return n;
}

/* Tier-1 source for one fused step of function `code` over float32
 * inputs, or NULL when tier 1 does not generate it. */
static char *tier1_source(tt_op_t op, int64_t code) {
  int nargs = op == TT_OP_UNARY ? 1 : 2;
  tt_fused_op_t step = {op, TT_F32, nargs, {-1, -2, 0}, code, 0.25, 2.0};
  tt_fused_t prog = {1, &step};
  tt_instr_t in[3];
  memset(in, 0, sizeof(in));
  int32_t operands[2] = {0, 1};
  for (int k = 0; k < 2; ++k) {
    in[k].op = TT_OP_PARAM;
    in[k].dtype = TT_F32;
    in[k].shape.rank = 1;
    in[k].shape.dims[0] = 8;
    in[k].input_index = k;
  }
  in[2].op = TT_OP_FUSED;
  in[2].dtype = TT_F32;
  in[2].shape = in[0].shape;
  in[2].num_operands = nargs;
  in[2].operands = operands;
  in[2].fused = &prog;
  int32_t inputs[2] = {0, 1}, outputs[1] = {2};
  tt_graph_t g;
  memset(&g, 0, sizeof(g));
  g.num_instrs = 3;
  g.instrs = in;
  g.num_inputs = 2;
  g.input_instr = inputs;
  g.num_outputs = 1;
  g.output_instr = outputs;
  int supported = tt_codegen_supported(&g, 2);
  char *src = tt_codegen_emit(&g, "test");
  CHECK((src != NULL) == supported, "op %d code %lld: supported %d but source %p", (int)op,
        (long long)code, supported, (void *)src);
  return src;
}

static void test_tier1(tt_op_t op, const ew_row_t *rows, int n, const char *kind) {
  int nargs = op == TT_OP_UNARY ? 1 : 2;
  for (int i = 0; i < n; ++i) {
    const ew_row_t *r = &rows[i];
    char *src = tier1_source(op, r->code);
    if (r->tier1 == TT_EW_TIER0_ONLY) {
      CHECK(src == NULL, "%s %s is TT_EW_TIER0_ONLY but tier 1 generates it", kind, r->suffix);
    } else if (!r->tier1[0]) {
      CHECK(src != NULL, "%s %s is TT_EW_TIER1_SPECIAL but tier1_emit_c.c does not write it out",
            kind, r->suffix);
      if (src)
        CHECK(strstr(src, "float s0 = ") && strstr(src, "a0"), "%s %s: no step in\n%s", kind,
              r->suffix, src);
    } else {
      CHECK(count_args(r->tier1) == nargs, "%s %s: C expression \"%s\" needs one %%s per operand",
            kind, r->suffix, r->tier1);
      CHECK(src != NULL, "%s %s has a C expression but tier 1 does not generate it", kind,
            r->suffix);
      if (src && count_args(r->tier1) == nargs) {
        char want[160];
        if (nargs == 1) snprintf(want, sizeof(want), r->tier1, "a0");
        else snprintf(want, sizeof(want), r->tier1, "a0", "a1");
        CHECK(strstr(src, want) != NULL, "%s %s: no %s in\n%s", kind, r->suffix, want, src);
      }
    }
    free(src);
  }
  /* A code past the table is never generated. */
  char *src = tier1_source(op, op == TT_OP_UNARY ? TT_UN_COUNT : TT_BIN_COUNT);
  CHECK(src == NULL);
  free(src);
}

int main(void) {
  test_names(unary_rows, NUM_UNARY, TT_UN_COUNT, "unary");
  test_names(binary_rows, NUM_BINARY, TT_BIN_COUNT, "binary");
  test_stablehlo(TT_OP_UNARY, unary_rows, NUM_UNARY, "unary");
  test_stablehlo(TT_OP_BINARY, binary_rows, NUM_BINARY, "binary");
  test_tier1(TT_OP_UNARY, unary_rows, NUM_UNARY, "unary");
  test_tier1(TT_OP_BINARY, binary_rows, NUM_BINARY, "binary");
  return test_summary();
}
