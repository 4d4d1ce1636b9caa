/* StableHLO emission from hand-built graphs: the per-opcode lowering
 * table, fused programs (plain and fused reductions, which only pass
 * pipelines make), and a clear error for an unlowerable variant and for an
 * op with no lowering. */
#include <stdlib.h>
#include <string.h>

#include "test_harness.h"
#include "torchtpu/stablehlo.h"

static tt_shape_t shape2(int64_t a, int64_t b) {
  tt_shape_t s = {2, {a, b}};
  return s;
}

/* A graph of instrs (operands point into ops); inputs are the PARAMs. */
static tt_graph_t make_graph(tt_instr_t *instrs, int32_t n, int32_t *inputs, int32_t ni,
                             int32_t *outputs) {
  tt_graph_t g;
  memset(&g, 0, sizeof(g));
  g.num_instrs = n;
  g.instrs = instrs;
  g.num_inputs = ni;
  g.input_instr = inputs;
  g.num_outputs = 1;
  g.output_instr = outputs;
  return g;
}

static void test_table(void) {
  for (int op = 0; op < TT_OP_COUNT; ++op) CHECK(tt_stablehlo_op_lowering((tt_op_t)op) != NULL);
  CHECK(tt_stablehlo_op_lowering(TT_OP_COUNT) == NULL);
}

static void test_fused(int reduce) {
  /* %0, %1 params [4,3] and [3]; %2 = fused(%0, %1):
   *   s0 = in0 * in1 (broadcast), s1 = exp(s0) [, s2 = reduce-sum(s1) over
   *   dim 1, s3 = s2 + in1... no: s3 = neg(s2)] */
  tt_fused_op_t ops[4];
  memset(ops, 0, sizeof(ops));
  ops[0] = (tt_fused_op_t){TT_OP_BINARY, TT_F32, 2, {-1, -2, 0}, TT_BIN_MUL, 0, 0};
  ops[1] = (tt_fused_op_t){TT_OP_UNARY, TT_F32, 1, {0, 0, 0}, TT_UN_EXP, 0, 0};
  ops[2] = (tt_fused_op_t){TT_OP_REDUCE, TT_F32, 1, {1, 0, 0}, TT_RED_SUM, 0, 0};
  ops[3] = (tt_fused_op_t){TT_OP_UNARY, TT_F32, 1, {2, 0, 0}, TT_UN_NEG, 0, 0};
  tt_fused_t prog = {reduce ? 4 : 2, ops};
  int32_t operands[2] = {0, 1};
  tt_instr_t in[3];
  memset(in, 0, sizeof(in));
  in[0].op = TT_OP_PARAM;
  in[0].dtype = TT_F32;
  in[0].shape = shape2(4, 3);
  in[0].input_index = 0;
  in[1].op = TT_OP_PARAM;
  in[1].dtype = TT_F32;
  in[1].shape.rank = 1;
  in[1].shape.dims[0] = 3;
  in[1].input_index = 1;
  in[2].op = TT_OP_FUSED;
  in[2].dtype = TT_F32;
  in[2].num_operands = 2;
  in[2].operands = operands;
  in[2].fused = &prog;
  if (reduce) {
    int64_t attrs[5] = {1, 2, 2, 4, 3}; /* TT_FUSED_REDUCE, mask dim 1, domain [4,3] */
    memcpy(in[2].iattrs, attrs, sizeof(attrs));
    in[2].num_iattrs = 5;
    in[2].shape.rank = 1;
    in[2].shape.dims[0] = 4;
  } else {
    in[2].shape = shape2(4, 3);
  }
  int32_t inputs[2] = {0, 1}, outputs[1] = {2};
  tt_graph_t g = make_graph(in, 3, inputs, 2, outputs);
  char *text = NULL;
  CHECK_OK(tt_stablehlo_emit_graph(&g, "fused", &text));
  CHECK(text && strstr(text, "module @\"fused\""));
  CHECK(text && strstr(text, "\"stablehlo.multiply\""));
  CHECK(text && strstr(text, "\"stablehlo.exponential\""));
  CHECK(text && strstr(text, "broadcast_dimensions = array<i64: 1>"));
  if (reduce) {
    CHECK(text && strstr(text, "\"stablehlo.reduce\""));
    CHECK(text && strstr(text, "\"stablehlo.negate\""));
    CHECK(text && strstr(text, "-> tensor<4xf32> {"));
  } else {
    CHECK(text && !strstr(text, "\"stablehlo.reduce\""));
    CHECK(text && strstr(text, "-> tensor<4x3xf32> {"));
  }
  free(text);
}

static void test_unimplemented(void) {
  /* Integer true division has no kernel and no lowering. */
  tt_instr_t in[2];
  memset(in, 0, sizeof(in));
  int32_t operands[2] = {0, 0};
  in[0].op = TT_OP_PARAM;
  in[0].dtype = TT_I32;
  in[0].shape = shape2(2, 2);
  in[1].op = TT_OP_BINARY;
  in[1].dtype = TT_I32;
  in[1].shape = shape2(2, 2);
  in[1].num_operands = 2;
  in[1].operands = operands;
  in[1].iattrs[0] = TT_BIN_DIV;
  in[1].num_iattrs = 1;
  int32_t inputs[1] = {0}, outputs[1] = {1};
  tt_graph_t g = make_graph(in, 2, inputs, 1, outputs);
  char *text = (char *)"x";
  tt_status_t st = tt_stablehlo_emit_graph(&g, NULL, &text);
  CHECK(st && tt_status_code(st) == TT_UNIMPLEMENTED);
  CHECK(st && strstr(tt_status_message(st), "binary op 3") && strstr(tt_status_message(st), "int32"));
  CHECK(text == NULL);
  tt_status_free(st);
}

/* An op with no lowering registered: TT_UNIMPLEMENTED naming it, nothing
 * written (an op code past the table stands for one). */
static void test_no_lowering(void) {
  tt_instr_t in[2];
  memset(in, 0, sizeof(in));
  int32_t operands[1] = {0};
  in[0].op = TT_OP_PARAM;
  in[0].dtype = TT_F32;
  in[0].shape = shape2(2, 2);
  in[1].op = TT_OP_COUNT;
  in[1].dtype = TT_F32;
  in[1].shape = shape2(2, 2);
  in[1].num_operands = 1;
  in[1].operands = operands;
  int32_t inputs[1] = {0}, outputs[1] = {1};
  tt_graph_t g = make_graph(in, 2, inputs, 1, outputs);
  char *text = (char *)"x";
  tt_status_t st = tt_stablehlo_emit_graph(&g, NULL, &text);
  char want[64];
  snprintf(want, sizeof want, "stablehlo: no lowering for op ? (%d)", (int)TT_OP_COUNT);
  CHECK(st && tt_status_code(st) == TT_UNIMPLEMENTED);
  CHECK(st && strcmp(tt_status_message(st), want) == 0);
  CHECK(text == NULL);
  tt_status_free(st);
}

int main(void) {
  test_table();
  test_fused(0);
  test_fused(1);
  test_unimplemented();
  test_no_lowering();
  return test_summary();
}
