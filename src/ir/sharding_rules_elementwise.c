/* Sharding rules of the elementwise ops: every operand dim that is not a
 * broadcast size-1 dim is the result dim it lines up with (numpy
 * alignment), so a sharded operand shards the result alike and a sharded
 * result shards every full-size operand. Fused elementwise programs read
 * their inputs the same way; a fused reduction (its domain is not its
 * shape) is replicated. */
#include "ir/sharding_rules.h"

void tt_srule_broadcast_row(const tt_shape_t *x, const tt_shape_t *out, int32_t *row) {
  int32_t off = out->rank - x->rank;
  for (int32_t d = 0; d < x->rank; ++d) {
    int32_t od = d + off;
    row[d] = od >= 0 && x->dims[d] == out->dims[od] ? od : TT_SDIM_WHOLE;
  }
}

void tt_srule_same_size_row(const tt_shape_t *x, const tt_shape_t *out, int32_t *row) {
  for (int32_t d = 0; d < x->rank; ++d)
    row[d] = d < out->rank && x->dims[d] == out->dims[d] ? d : TT_SDIM_WHOLE;
}

void tt_srule_map_elementwise(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  for (int32_t k = 0; k < m->num_operands; ++k)
    tt_srule_broadcast_row(tt_srule_operand_shape(g, i, k), &g->instrs[i].shape, m->dims[k]);
}

static void tt_srule_fused(const tt_graph_t *g, int32_t i, tt_sharding_map_t *m) {
  if (tt_fused_is_reduce(&g->instrs[i])) return;
  tt_srule_map_elementwise(g, i, m);
}

TT_SHARDING_RULE(UNARY, "elementwise", tt_srule_map_elementwise);
TT_SHARDING_RULE(BINARY, "elementwise", tt_srule_map_elementwise);
TT_SHARDING_RULE(WHERE, "elementwise", tt_srule_map_elementwise);
TT_SHARDING_RULE(CONVERT, "elementwise", tt_srule_map_elementwise);
TT_SHARDING_RULE(SPECIAL, "elementwise", tt_srule_map_elementwise);
TT_SHARDING_RULE(FUSED, "fused", tt_srule_fused);
